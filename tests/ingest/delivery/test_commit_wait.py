"""A delivery's job commits without waiting for the disk, and only its runs do
(``ingest.delivery.sql.commits_unflushed``): the session waits again after the
job, however it ended, and a paid embedding request's commit waits within it."""

from __future__ import annotations

from unittest import mock

import pytest
from django.db import OperationalError, connection
from django.test.utils import CaptureQueriesContext, override_settings
from django_q.models import OrmQ

from ingest.delivery import carry
from ingest.delivery.models import Delivery
from ingest.delivery.sql import commits_unflushed
from retrieval.backends import HashingEmbedder, OpenAIEmbedder
from retrieval.indexing import embeddings_ensure
from sources.models import Source
from tests.fakes.openai_api import FakeOpenAI
from tests.ingest.delivery.jobs import run_as_a_worker
from tests.world import SITE, page_html, receive_delivery

pytestmark = pytest.mark.django_db(transaction=True)
FLUSH_WAIT = "SET LOCAL synchronous_commit = on"


def commit_wait() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        return cursor.fetchone()[0]


def session_killed() -> None:
    """The run's database session ends under it (a server restart, an admin's
    pg_terminate_backend)."""
    with connection.cursor() as cursor, pytest.raises(OperationalError):
        cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")


@pytest.mark.parametrize(
    ("waiting", "during", "ending"),
    [
        (1, None, Delivery.Outcome.EMBEDDED),
        (3, None, Delivery.Outcome.EMBEDDED),
        (1, RuntimeError("a bug in the run"), RuntimeError),
        (1, session_killed, RuntimeError),
    ],
    ids=["alone", "carrying two more", "a run that raises", "the session killed"],
)
def test_a_delivery_job_commits_without_waiting_then_the_session_waits_again(
    waiting, during, ending
):
    Source.objects.create(name="Example docs", seed_urls=f"{SITE}/")
    OrmQ.objects.all().delete()  # the rescope its creation queued
    deliveries = [
        receive_delivery(f"{SITE}/p{n}/", page_html(f"Page {n}", ("About", f"{n}.")))
        for n in range(waiting)
    ]
    seen: list[str] = []
    real = carry.delivery_process

    def observed(*, delivery_id: int):
        seen.append(commit_wait())
        if isinstance(during, Exception):
            raise during
        if during is not None:
            during()
            raise RuntimeError("the run's session is gone")
        return real(delivery_id=delivery_id)

    with mock.patch.object(carry, "delivery_process", observed):
        if isinstance(ending, type):
            with pytest.raises(ending):
                run_as_a_worker(deliveries[0])
        else:
            assert run_as_a_worker(deliveries[0]) == ending

    assert seen == ["off"] * waiting, "each run's commits do not wait"
    assert commit_wait() == "on", "the worker's next job waits for the disk again"
    if ending == Delivery.Outcome.EMBEDDED:
        states = Delivery.objects.filter(pk__in=[d.pk for d in deliveries])
        assert set(states.values_list("outcome", flat=True)) == {ending}


@pytest.mark.parametrize("billed", [False, True], ids=["hashing", "openai"])
def test_within_the_job_a_paid_embedding_requests_commit_waits_for_the_disk(
    billed,
):
    with (
        FakeOpenAI() as api,
        override_settings(OPENAI_API_KEY="sk-test", OPENAI_BASE_URL=api.base_url),
    ):
        embedder = (
            OpenAIEmbedder("text-embedding-3-small", 64)
            if billed
            else HashingEmbedder("words", 64)
        )
        with commits_unflushed(), CaptureQueriesContext(connection) as queries:
            embeddings_ensure(
                texts={"h1": "alpha beta", "h2": "gamma"}, embedder=embedder
            )
        assert api.requests == int(billed)

    statements = [query["sql"] for query in queries.captured_queries]
    stored = next(
        n
        for n, sql in enumerate(statements)
        if "retrieval_embedding" in sql and sql.startswith("INSERT")
    )
    begun = max(n for n in range(stored) if statements[n] == "BEGIN")
    assert (FLUSH_WAIT in statements[begun:stored]) is billed
    assert commit_wait() == "on"
