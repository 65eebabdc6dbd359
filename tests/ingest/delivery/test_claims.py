"""Which run has a delivery, and the sweep that queues again the deliveries whose job
is gone: at once, and never one a live run holds."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from unittest import mock

import psycopg
import pytest
from django.conf import settings
from django.db import OperationalError, connection, transaction
from django.test import override_settings
from django.utils import timezone
from django_q.brokers import get_broker
from django_q.brokers.orm import ORM
from django_q.models import OrmQ, Schedule

from ingest.delivery import finish
from ingest.delivery import job as delivery_job
from ingest.delivery.job import delivery_process
from ingest.delivery.models import Delivery
from ingest.delivery.queue import deliveries_requeue_stalled, delivery_retry_later
from retrieval.models import Chunk
from sources.models import Page, PageVersion, Source
from tests.world import (
    INSTALL,
    INSTALL_EDITED,
    SITE,
    receive_delivery,
    run_queued,
)

pytestmark = pytest.mark.django_db(transaction=True)
TASK = "ingest.tasks.delivery_process_task"


@pytest.fixture(autouse=True)
def world(transactional_db, settings):
    settings.DELIVERY_RETRY_SECONDS = 0
    Source.objects.create(name="Example docs", seed_urls=f"{SITE}/")


def job_of(delivery: Delivery) -> OrmQ:
    return next(job for job in OrmQ.objects.all() if job.task["args"] == (delivery.pk,))


def taken(job: OrmQ, *, at: datetime) -> None:
    """As a worker takes a job: its lock moves Q_RETRY seconds past then."""
    OrmQ.objects.filter(pk=job.pk).update(lock=at + timedelta(seconds=settings.Q_RETRY))


def database_started() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_postmaster_start_time()")
        return cursor.fetchone()[0]


@contextlib.contextmanager
def a_live_run(delivery: Delivery) -> Iterator[list]:
    """``delivery_process`` in a thread of its own, as a worker runs it, stopped
    inside the run until the block ends; then its result."""
    inside, finish = threading.Event(), threading.Event()
    results: list = []
    real = delivery_job._process

    def slow(delivery: Delivery) -> Delivery.Outcome:
        if threading.current_thread() is worker:
            inside.set()
            finish.wait(30)
        return real(delivery)

    def run() -> None:
        try:
            results.append(delivery_process(delivery_id=delivery.pk))
        finally:
            connection.close()

    worker = threading.Thread(target=run)
    with mock.patch("ingest.delivery.job._process", slow):
        worker.start()
        try:
            assert inside.wait(30), "the run never started"
            yield results
        finally:
            finish.set()
            worker.join(30)


def a_run_whose_retry_could_not_be_recorded(delivery: Delivery) -> None:
    """A run that fails, then finds the database gone when it records its retry
    (the server restarting): it ends with the delivery ``processing``."""
    with (
        mock.patch("ingest.delivery.job._process", side_effect=RuntimeError("cut off")),
        mock.patch.object(
            Delivery,
            "mark_retry",
            side_effect=OperationalError("the database system is starting up"),
        ),
        pytest.raises(OperationalError),
    ):
        delivery_process(delivery_id=delivery.pk)


@pytest.mark.parametrize(
    "its_job",
    ["acknowledged", "taken by the worker, never acknowledged"],
)
def test_a_run_that_could_not_record_its_retry_is_queued_again_by_the_next_sweep(
    its_job,
):
    delivery = receive_delivery()
    job = job_of(delivery)
    taken(job, at=timezone.now())

    a_run_whose_retry_could_not_be_recorded(delivery)
    if its_job == "acknowledged":
        job.delete()

    assert Delivery.objects.get(pk=delivery.pk).state == Delivery.State.PROCESSING
    assert deliveries_requeue_stalled() == 1
    assert Delivery.objects.get(pk=delivery.pk).state == Delivery.State.QUEUED
    # The worker's copy, offered again later, would find the delivery done.
    OrmQ.objects.filter(pk=job.pk).delete()
    assert run_queued(TASK) == ["embedded"]


@pytest.mark.parametrize(
    ("its_job", "requeued"),
    [
        ("none", 1),
        ("taken before the database started", 1),
        ("taken since the database started", 0),
        ("waiting", 0),
    ],
)
def test_a_queued_delivery_keeps_only_a_job_a_live_worker_may_run(its_job, requeued):
    delivery = receive_delivery()
    Delivery.objects.update(queued_at=timezone.now() - timedelta(minutes=5))
    job = job_of(delivery)
    # The broker holds a taken job for Q_RETRY: long enough here that a job taken
    # just before the server started is still held, however long ago that was.
    up = (timezone.now() - database_started()).total_seconds()
    with override_settings(Q_RETRY=int(up) + 600):
        if its_job == "none":
            job.delete()
        elif its_job == "taken before the database started":
            # The worker's job failed in the outage and could not be acknowledged.
            taken(job, at=database_started() - timedelta(seconds=1))
        elif its_job == "taken since the database started":
            taken(job, at=timezone.now())

        assert deliveries_requeue_stalled() == requeued


@pytest.mark.parametrize("claimed", ["just now", "hours ago"])
def test_a_delivery_a_live_run_holds_is_never_queued_again(claimed):
    delivery = receive_delivery()
    OrmQ.objects.all().delete()  # run outside the queue, as a command would

    with a_live_run(delivery) as results:
        if claimed == "hours ago":
            Delivery.objects.filter(pk=delivery.pk).update(
                claimed_at=timezone.now() - timedelta(hours=3)
            )
        assert deliveries_requeue_stalled() == 0
        assert not OrmQ.objects.exists()

    assert results == ["embedded"]
    assert Delivery.objects.get(pk=delivery.pk).attempts == 1


def test_a_second_copy_of_a_job_leaves_a_held_delivery_to_its_run():
    delivery = receive_delivery()

    with a_live_run(delivery) as results:
        assert delivery_process(delivery_id=delivery.pk) is None

    done = Delivery.objects.get(pk=delivery.pk)
    assert results == ["embedded"]
    assert (done.outcome, done.attempts) == (Delivery.Outcome.EMBEDDED, 1)


def test_a_run_that_lost_its_delivery_records_no_retry():
    delivery = receive_delivery()
    OrmQ.objects.all().delete()
    assert delivery.mark_claimed(at=timezone.now())
    # Cut off by a database restart, the run was given up for lost and another
    # run took the delivery up before this one could record its retry.
    later = timezone.now() + timedelta(seconds=1)
    Delivery.objects.filter(pk=delivery.pk).update(claimed_at=later, attempts=2)

    assert delivery_retry_later(delivery=delivery, error="cut off") is None

    now = Delivery.objects.get(pk=delivery.pk)
    assert (now.state, now.claimed_at, now.error) == ("processing", later, "")
    assert not OrmQ.objects.exists()


@contextlib.contextmanager
def finished_by_another_run_at_the_page_lock(delivery: Delivery):
    """``page_lock`` as a run meets it after another run of the same delivery (its
    lock lost with its session) recorded an outcome first: alone, or recording
    its delivery with others (``ingest.delivery.batch``)."""
    real = finish.page_lock

    def other_run() -> None:
        try:
            Delivery.objects.filter(pk=delivery.pk).update(
                state=Delivery.State.DONE,
                outcome=Delivery.Outcome.SKIPPED,
                error="other",
            )
        finally:
            connection.close()

    def lock(page, **options):
        thread = threading.Thread(target=other_run)  # a session of its own
        thread.start()
        thread.join(30)
        return real(page, **options)

    with (
        mock.patch("ingest.delivery.finish.page_lock", lock),
        mock.patch("ingest.delivery.batch.page_lock", lock),
    ):
        yield


@pytest.mark.parametrize(
    "kind, body, status",
    [
        ("new content", INSTALL, 200),
        ("changed content", INSTALL_EDITED, 200),
        ("the same body", INSTALL, 200),
        ("not modified", "", 304),
        ("gone", "Not found", 404),
        ("a failure on the page", "Bad gateway", 502),
    ],
)
def test_a_run_whose_delivery_another_run_finished_changes_nothing(kind, body, status):
    if kind != "new content":
        receive_delivery()
        assert run_queued(TASK) == ["embedded"]
    page = Page.objects.filter(url=f"{SITE}/install/").first()
    before = (
        (page.status, page.content_hash, page.last_verified_at, page.failure_count)
        if page
        else None
    )
    versions, chunks = PageVersion.objects.count(), Chunk.objects.count()
    delivery = receive_delivery(body=body, original_status=status)
    OrmQ.objects.all().delete()

    with finished_by_another_run_at_the_page_lock(delivery):
        assert delivery_process(delivery_id=delivery.pk) is None

    page = Page.objects.filter(url=f"{SITE}/install/").first()
    after = (
        (page.status, page.content_hash, page.last_verified_at, page.failure_count)
        if before
        else None
    )
    assert after == before, f"{kind}: the page changed"
    assert (PageVersion.objects.count(), Chunk.objects.count()) == (versions, chunks)
    done = Delivery.objects.get(pk=delivery.pk)
    assert (done.outcome, done.error) == (Delivery.Outcome.SKIPPED, "other")


@pytest.mark.parametrize("inside_a_transaction", [False, True])
def test_a_page_another_run_made_first_is_the_one_taken(inside_a_transaction):
    source = Source.objects.get()
    made = Page.objects.create(url=f"{SITE}/install/", source=source)

    guard = transaction.atomic() if inside_a_transaction else contextlib.nullcontext()
    with guard:
        page = delivery_job._page_create(f"{SITE}/install/", source)
        assert Page.objects.count() == 1, "the transaction around it still works"

    assert page.pk == made.pk


@pytest.mark.parametrize(
    ("queued", "database_started", "requeued"),
    [
        # Its job was taken before the database started again, and failed in the
        # outage: queued again as soon as the database answers.
        ("2 s ago", "just now", 1),
        # Newer than the queue's settling time, with the database up all along:
        # its job is on its way.
        ("2 s ago", "long ago", 0),
        ("5 minutes ago", "just now", 1),
    ],
)
def test_a_queued_delivery_stranded_by_a_restart_is_queued_again_at_once(
    queued, database_started, requeued
):
    delivery = receive_delivery()
    ago = {"2 s ago": 2, "5 minutes ago": 300}[queued]
    Delivery.objects.update(queued_at=timezone.now() - timedelta(seconds=ago))
    started = {
        "just now": timezone.now() - timedelta(seconds=1),
        "long ago": timezone.now() - timedelta(minutes=10),
    }[database_started]
    # Taken by a worker before the database (re)started, never acknowledged, and
    # held by the queue for Q_RETRY.
    with (
        override_settings(Q_RETRY=3600),
        mock.patch("ingest.delivery.sql.postmaster_started_at", return_value=started),
    ):
        taken(job_of(delivery), at=started - timedelta(seconds=1))
        assert deliveries_requeue_stalled() == requeued


@pytest.mark.parametrize(
    ("failure", "backoff"),
    [
        ("the run's connection was cut", False),
        ("the run could not connect again, the server starting", False),
        ("a statement timed out, the connection still answers", True),
        ("the embedding provider failed", True),
    ],
)
def test_a_run_cut_off_by_the_database_is_queued_again_without_a_backoff(
    settings, failure, backoff
):
    settings.DELIVERY_RETRY_SECONDS = 30
    delivery = receive_delivery()
    OrmQ.objects.all().delete()  # taken by the worker that runs it below

    def fail(delivery: Delivery) -> None:
        if failure == "the embedding provider failed":
            raise RuntimeError("the provider answered 500")
        if failure == "the run could not connect again, the server starting":
            connection.close()  # as a health check closes a dead session
            starting = psycopg.OperationalError("the database system is starting up")
            with mock.patch.object(
                connection, "get_new_connection", side_effect=starting
            ):
                connection.ensure_connection()
        with connection.cursor() as cursor:
            if failure == "the run's connection was cut":  # as a restart does
                cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")
            cursor.execute("SET statement_timeout = 1")
            try:
                cursor.execute("SELECT pg_sleep(1)")
            finally:
                cursor.execute("RESET statement_timeout")

    with mock.patch("ingest.delivery.job._process", fail):
        assert delivery_process(delivery_id=delivery.pk) == Delivery.State.QUEUED

    delivery.refresh_from_db()
    retry_in = (delivery.next_attempt_at - timezone.now()).total_seconds()
    assert (retry_in > 20) is backoff
    assert Schedule.objects.filter(func=TASK).exists() is backoff
    assert (run_queued(TASK) == []) is backoff


@pytest.mark.parametrize("stranded", ["queued", "processing"])
@pytest.mark.parametrize(
    ("seen", "requeued"),
    [
        # The embedded server is started again by whichever process connects
        # first, which waits for it: the reader may see no error at all.
        ("a new session on a server that started since", True),
        ("a failed read, then an answer", True),
        ("a new session on the same server", False),
    ],
)
def test_the_cluster_queues_a_stranded_delivery_again_once_the_database_is_back(
    stranded, seen, requeued
):
    delivery = receive_delivery()
    OrmQ.objects.exclude(pk=job_of(delivery).pk).delete()  # the source's own
    if stranded == "queued":  # its job failed in the outage, unacknowledged
        Delivery.objects.update(queued_at=timezone.now() - timedelta(seconds=2))
    else:  # its run was cut off in the outage, and holds no lock any more
        Delivery.objects.update(
            state=Delivery.State.PROCESSING, claimed_at=timezone.now(), attempts=1
        )
    started = timezone.now() - timedelta(seconds=1)
    broker = get_broker()
    with (
        override_settings(Q_RETRY=3600),
        mock.patch("ingest.delivery.sql.postmaster_started_at", return_value=started),
        mock.patch("kbsite.queue_broker.time.sleep"),
        # An empty queue read again at once, not after django-q2's poll (0.5 s).
        mock.patch("django_q.brokers.orm.sleep"),
    ):
        taken(job_of(delivery), at=started - timedelta(seconds=1))
        assert broker.dequeue() is None  # the cluster reading before the outage
        if seen == "a failed read, then an answer":
            with mock.patch.object(
                ORM, "dequeue", side_effect=OperationalError("the server is down")
            ):
                assert broker.dequeue() is None
        else:
            connection.close()  # the session the outage ended
            if seen == "a new session on a server that started since":
                broker.started -= timedelta(hours=1)
        assert OrmQ.objects.count() == 1

        taken_now = broker.dequeue()

    if not requeued:
        assert taken_now is None
        assert OrmQ.objects.count() == 1
        return
    # The job taken now is the new one: the stranded delivery's run, at once.
    assert taken_now is not None and len(taken_now) == 1
    assert OrmQ.objects.count() == 2
    assert Delivery.objects.get(pk=delivery.pk).state == Delivery.State.QUEUED
    OrmQ.objects.exclude(pk=taken_now[0][0]).delete()  # the stale copy
    assert run_queued(TASK) == ["embedded"]
