"""Unchanged deliveries recorded together (``ingest.delivery.batch``): one run
records the waiting ones with its own, in one transaction, and leaves every other
delivery, untouched, to its own job."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from unittest import mock

import pytest
from django.conf import settings
from django.db import OperationalError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_q.models import OrmQ
from django_q.tasks import async_task

from ingest.delivery import batch
from ingest.delivery.models import Delivery
from ingest.pushing.models import Push
from kbsite import locks
from sources.models import Page, Source
from tests.ingest.delivery.jobs import (
    delivery_jobs,
    job_of,
    run_as_a_worker,
    untouched,
)
from tests.world import SITE, receive_delivery, run_queued

pytestmark = pytest.mark.django_db(transaction=True)
TASK = "ingest.tasks.delivery_process_task"


@pytest.fixture(autouse=True)
def alone(settings) -> None:
    """Each job runs its own delivery only: what a batch leaves must stay on the
    queue untouched (carrying is tests/ingest/delivery/test_carry.py's)."""
    settings.DELIVERY_CARRY = 1


@pytest.fixture(autouse=True)
def source(transactional_db) -> Source:
    return Source.objects.create(name="Example docs", seed_urls=f"{SITE}/")


def url(n: int) -> str:
    return f"{SITE}/guide/{n}/"


def html(n: int, edit: str = "") -> str:
    """A page with no line of the same shape as another's (digits count as one
    shape): none is learned as the site's boilerplate, which would have every
    page read again."""
    word = WORDS[n]
    return (
        f"<html><head><title>{word}</title></head><body><main><h1>{word}</h1>"
        f"<h2>Using {word}</h2><p>How {word} {WORDS[-n]} works.{edit}</p></main>"
        "</body></html>"
    )


WORDS = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliett kilo lima "
    "mike november oscar papa quebec romeo sierra tango"
).split()


def site_crawled(pages: int) -> None:
    """``pages`` pages delivered once and indexed."""
    for n in range(pages):
        receive_delivery(url(n), html(n))
    run_queued(TASK)
    assert Page.objects.filter(status=Page.Status.LIVE).count() == pages


def recrawled(pages: range, *, status: int = 200) -> list[Delivery]:
    """Each page delivered again, unchanged: a 304, or the same body."""
    body = lambda n: "" if status == 304 else html(n)  # noqa: E731
    return [receive_delivery(url(n), body(n), original_status=status) for n in pages]


@pytest.mark.parametrize("status", [200, 304], ids=["the same body", "304"])
def test_a_run_records_the_waiting_unchanged_deliveries_with_its_own(status):
    site_crawled(5)
    before = {p.url: p.last_verified_at for p in Page.objects.all()}
    own, *others = recrawled(range(5), status=status)

    assert run_as_a_worker(own) == Delivery.Outcome.UNCHANGED

    assert not delivery_jobs(), "the others' jobs left the queue"
    for delivery in [own, *others]:
        done = Delivery.objects.get(pk=delivery.pk)
        page = Page.objects.get(url=delivery.url)
        assert (done.state, done.outcome, done.attempts) == ("done", "unchanged", 1)
        assert done.page_id == page.pk
        assert done.body is None and done.claimed_at and done.processed_at
        assert page.last_verified_at == delivery.received_at > before[page.url]
        assert page.next_crawl_at == delivery.received_at + page.interval
        assert len(page.check_hours) == 1, "the check is counted for the schedule"
    assert not locks.keys_held(lock=locks.DELIVERY_RUNS), "every run lock let go"


def test_the_statements_of_a_run_do_not_grow_with_the_deliveries_it_records():
    site_crawled(12)
    counts = []
    for pages in (range(0, 3), range(3, 12)):
        own, *_ = recrawled(pages)
        with CaptureQueriesContext(connection) as queries:
            run_as_a_worker(own)
        counts.append(len(queries))
        assert Delivery.objects.filter(state="done", outcome="unchanged").count() == (
            pages.stop
        )

    assert counts[0] == counts[1], counts


def test_a_run_of_one_records_its_own_delivery_alone(settings):
    settings.DELIVERY_BATCH = 1
    site_crawled(3)
    own, *others = recrawled(range(3))

    assert run_as_a_worker(own) == Delivery.Outcome.UNCHANGED
    assert all(untouched(delivery) for delivery in others)


@contextlib.contextmanager
def in_another_session(hold: Callable[[], None]) -> Iterator[None]:
    """``hold`` run in a database session of its own (a thread), which holds
    what it took until the block ends."""
    holding, done = threading.Event(), threading.Event()

    def run() -> None:
        try:
            with transaction.atomic():
                hold()
                holding.set()
                done.wait(30)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert holding.wait(30)
        yield
    finally:
        done.set()
        thread.join(30)


def held_by_another_run(delivery: Delivery):
    return in_another_session(
        lambda: locks.session_lock_try(lock=locks.DELIVERY_RUNS, key=delivery.pk)
    )


def page_locked_elsewhere(delivery: Delivery):
    page = Page.objects.get(url=delivery.url)
    return in_another_session(
        lambda: Page.objects.select_for_update().filter(pk=page.pk).exists()
    )


def leave_no_more_attempts(delivery: Delivery):
    attempts = settings.DELIVERY_MAX_ATTEMPTS
    Delivery.objects.filter(pk=delivery.pk).update(attempts=attempts)
    return contextlib.nullcontext()


# (why the delivery is left to its own job, how it is delivered, what else holds)
LEFT_ALONE = {
    "changed content": (lambda: receive_delivery(url(1), html(1, " Edited."))),
    "a new page": (lambda: receive_delivery(url(9), html(9))),
    "gone": (lambda: receive_delivery(url(1), "Not found", original_status=404)),
    "a crawler failure": (
        lambda: receive_delivery(url(1), "Bad gateway", crawler_status=502)
    ),
    "a second delivery of the run's own page": (
        lambda: receive_delivery(url(0), html(0))
    ),
    "a 304 for a page gone": (
        lambda: receive_delivery(url(2), "", original_status=304)
    ),
}
HELD = {
    "another run holds it": held_by_another_run,
    "another transaction holds its page": page_locked_elsewhere,
    "no attempts left": leave_no_more_attempts,
}


@pytest.mark.parametrize(
    "why", [*LEFT_ALONE, *HELD, "its job taken by a worker already"]
)
def test_a_delivery_that_is_not_a_plain_unchanged_one_is_left_to_its_own_job(why):
    site_crawled(5)
    Page.objects.filter(url=url(2)).update(status=Page.Status.GONE)
    own = recrawled([0])[0]
    if why in LEFT_ALONE:
        left = LEFT_ALONE[why]()
    else:
        left = recrawled([1])[0]
    plain = recrawled([4])  # another one, recorded
    held = HELD.get(why, lambda d: contextlib.nullcontext())(left)
    if why == "its job taken by a worker already":
        OrmQ.objects.filter(pk=job_of(left).pk).update(
            lock=timezone.now() + timedelta(seconds=settings.Q_RETRY)
        )

    with held:
        assert run_as_a_worker(own) == Delivery.Outcome.UNCHANGED

    left_now = Delivery.objects.get(pk=left.pk)
    assert left_now.state == Delivery.State.QUEUED and job_of(left) is not None
    if why != "no attempts left":
        assert left_now.attempts == 0
    for delivery in plain:
        done = Delivery.objects.get(pk=delivery.pk)
        assert (done.state, done.outcome) == ("done", "unchanged"), why


def test_a_job_of_another_task_stays_on_the_queue():
    site_crawled(2)
    own, other = recrawled(range(2))
    async_task("ingest.tasks.recrawl_due_task")

    run_as_a_worker(own)

    assert Delivery.objects.get(pk=other.pk).state == Delivery.State.DONE
    assert "ingest.tasks.recrawl_due_task" in [
        job.task["func"] for job in OrmQ.objects.all()
    ]
    assert not delivery_jobs()


def test_a_delivery_that_moved_meanwhile_leaves_the_whole_batch_unrecorded():
    site_crawled(4)
    verified = {p.pk: p.last_verified_at for p in Page.objects.all()}
    own, moved, *others = recrawled(range(4))
    real = batch._record
    recorded: list[int] = []

    def record(members):
        recorded.append(len(members))

        # Another session moves one of the deliveries after it was read.
        def other_run():
            try:
                Delivery.objects.filter(pk=moved.pk).update(attempts=3)
            finally:
                connection.close()

        thread = threading.Thread(target=other_run)
        thread.start()
        thread.join(30)
        return real(members)

    with mock.patch.object(batch, "_record", record):
        assert run_as_a_worker(own) == Delivery.Outcome.UNCHANGED

    assert recorded == [4], "the run tried to record the four together"
    # The run's own delivery went on alone; none of the others was recorded.
    assert Delivery.objects.get(pk=own.pk).outcome == Delivery.Outcome.UNCHANGED
    assert all(untouched(delivery) for delivery in others)
    assert Delivery.objects.get(pk=moved.pk).state == Delivery.State.QUEUED
    for delivery in [moved, *others]:
        page = Page.objects.get(url=delivery.url)
        assert page.last_verified_at == verified[page.pk]


def test_a_delivery_of_a_push_marks_its_push_delivered():
    site_crawled(2)
    pushes = [
        Push.objects.create(
            rid=f"push-{n}",
            page=Page.objects.get(url=url(n)),
            url=url(n),
            state=Push.State.SENT,
            pushed_at=timezone.now(),
        )
        for n in range(2)
    ]
    own, other = (receive_delivery(url(n), html(n), rid=f"push-{n}") for n in range(2))

    run_as_a_worker(own)

    for push, delivery in zip(pushes, (own, other), strict=True):
        push.refresh_from_db()
        done = Delivery.objects.get(pk=delivery.pk)
        assert (done.outcome, done.push_id) == ("unchanged", push.pk)
        assert push.state == Push.State.DELIVERED and push.delivered_at
        page = Page.objects.get(url=delivery.url)
        assert page.last_crawled_at == push.pushed_at, "the crawl is the push's"


def test_the_run_locks_are_let_go_before_the_transaction_ends():
    site_crawled(4)
    own, recorded, changed = recrawled(range(2)) + [
        receive_delivery(url(2), html(2, " Edited."))
    ]
    let_go: list[tuple[bool, set[int]]] = []
    real = batch._Held.let_go

    def spy(self, keys=None):
        let_go.append(
            (connection.in_atomic_block, set(self.keys if keys is None else keys))
        )
        return real(self, keys)

    with mock.patch.object(batch._Held, "let_go", spy):
        run_as_a_worker(own)

    # The delivery left to its own job at once, the recorded one once recorded:
    # both while the transaction, and the jobs' rows, were still held.
    assert (True, {changed.pk}) in let_go
    assert (True, {recorded.pk}) in let_go
    assert untouched(changed)
    assert not locks.keys_held(lock=locks.DELIVERY_RUNS)


def test_an_error_deciding_another_delivery_leaves_it_to_its_own_job():
    site_crawled(3)
    own, broken, plain = recrawled(range(3))
    real = batch.delivery_read_unread

    def read(delivery, page, **options):
        if delivery.pk == broken.pk:
            raise ValueError("a defect met reading it")
        return real(delivery, page, **options)

    with mock.patch.object(batch, "delivery_read_unread", read):
        assert run_as_a_worker(own) == Delivery.Outcome.UNCHANGED

    assert untouched(broken)
    assert Delivery.objects.get(pk=plain.pk).outcome == Delivery.Outcome.UNCHANGED


def test_a_database_error_in_the_batch_leaves_the_run_s_delivery_to_go_on_alone():
    site_crawled(3)
    own, *others = recrawled(range(3))

    deadlock = OperationalError("deadlock detected")
    with mock.patch.object(batch, "rows_update", side_effect=deadlock):
        assert run_as_a_worker(own) == Delivery.Outcome.UNCHANGED

    done = Delivery.objects.get(pk=own.pk)
    assert (done.state, done.attempts, done.error) == ("done", 1, "")
    assert all(untouched(delivery) for delivery in others)
    assert not locks.keys_held(lock=locks.DELIVERY_RUNS)
