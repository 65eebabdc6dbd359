"""Deliveries processed by a real django-q2 cluster, including one killed mid-job."""

from __future__ import annotations

import contextlib
import os
import signal
import time

import pytest
from django_q.models import OrmQ, Schedule

from ingest.delivery.models import Delivery
from ingest.delivery.queue import TASK as DELIVERY_TASK
from retrieval.models import Chunk, Embedding
from sources.models import PageVersion, Source
from tests.conftest import qcluster_running, subprocess_env
from tests.fakes.openai_api import FakeOpenAI
from tests.world import SITE, receive_delivery

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SPACE = "openai/text-embedding-3-small/64"


@contextlib.contextmanager
def worker_cluster(fake: FakeOpenAI):
    """One ``qcluster`` in its own process group, embedding through the fake API."""
    env = subprocess_env(
        EMBEDDING_BACKEND="openai",
        EMBEDDING_MODEL="text-embedding-3-small",
        EMBEDDING_DIMENSIONS="64",
        OPENAI_API_KEY="sk-test",
        OPENAI_BASE_URL=fake.base_url,
        OPENAI_MAX_RETRIES="0",
        Q_WORKERS="1",
        # A job whose worker died is offered again after Q_RETRY seconds.
        Q_TIMEOUT="8",
        Q_RETRY="10",
    )
    with qcluster_running(env) as process:
        yield process


def wait_until(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


@pytest.fixture
def source():
    return Source.objects.create(name="Example docs", seed_urls=f"{SITE}/")


def state_of(delivery: Delivery) -> str:
    return Delivery.objects.values_list("state", flat=True).get(pk=delivery.pk)


def test_a_worker_killed_with_sigkill_mid_job_does_not_lose_the_delivery(source):
    with FakeOpenAI() as fake:
        fake.hold()
        delivery = receive_delivery(rid="crash-1")
        with worker_cluster(fake) as first:
            assert fake.waiting.wait(60), "the worker never reached the embedding call"
            assert state_of(delivery) == Delivery.State.PROCESSING
            os.killpg(first.pid, signal.SIGKILL)
            first.wait(timeout=30)
        fake.release()

        # Nothing was half-written while the job was interrupted.
        assert not Chunk.objects.exists()
        assert not PageVersion.objects.exists()

        with worker_cluster(fake):
            wait_until(lambda: state_of(delivery) == Delivery.State.DONE, 90, "retry")

    delivery.refresh_from_db()
    assert delivery.outcome == Delivery.Outcome.EMBEDDED
    assert delivery.attempts == 2
    assert PageVersion.objects.count() == 1
    assert Chunk.objects.count() >= 2
    assert Embedding.objects.filter(space=SPACE).count() == Chunk.objects.count()


def test_a_queued_delivery_is_processed_once_by_the_cluster(source):
    with FakeOpenAI() as fake:
        delivery = receive_delivery(rid="once-1")
        with worker_cluster(fake):
            wait_until(lambda: state_of(delivery) == Delivery.State.DONE, 60, "the job")
            # Acknowledged: no copy of the job is left that the queue could offer
            # again after Q_RETRY, and no retry is scheduled.
            wait_until(lambda: not OrmQ.objects.exists(), 30, "the acknowledgement")
            assert not Schedule.objects.filter(func=DELIVERY_TASK).exists()

    delivery.refresh_from_db()
    assert delivery.outcome == Delivery.Outcome.EMBEDDED
    assert delivery.attempts == 1
    assert PageVersion.objects.count() == 1
    assert fake.requests == 1
