"""A delivery's job carries the waiting deliveries after its own
(``ingest.delivery.carry``): taken as a worker takes a job, each run on its own,
then taken off the queue; never a job another worker took, never another task's."""

from __future__ import annotations

from unittest import mock

import pytest
from django.db import OperationalError
from django.utils import timezone
from django_q.models import OrmQ
from django_q.tasks import async_task

from ingest.delivery import carry
from ingest.delivery.models import Delivery
from sources.models import PageVersion, Source
from tests.ingest.delivery.jobs import (
    job_of,
    run_as_a_worker,
    taken_by_a_worker,
    untouched,
)
from tests.world import SITE, page_html, receive_delivery

pytestmark = pytest.mark.django_db(transaction=True)
OTHER_TASK = "ingest.tasks.recrawl_due_task"


@pytest.fixture(autouse=True)
def source(transactional_db) -> Source:
    source = Source.objects.create(name="Example docs", seed_urls=f"{SITE}/")
    OrmQ.objects.all().delete()  # the rescope its creation queued
    return source


def new_pages(count: int, start: int = 0) -> list[Delivery]:
    return [
        receive_delivery(
            f"{SITE}/p{n}/", page_html(f"Page {n}", ("About", f"Topic {n}."))
        )
        for n in range(start, start + count)
    ]


def test_with_delivery_carry_1_a_job_runs_its_own_delivery_alone(settings):
    settings.DELIVERY_CARRY = 1
    first, *waiting = new_pages(2)

    assert run_as_a_worker(first) == Delivery.Outcome.EMBEDDED

    assert all(untouched(delivery) for delivery in waiting)


def test_a_job_runs_the_waiting_deliveries_after_its_own_each_once():
    first, *waiting = new_pages(4)

    assert run_as_a_worker(first) == Delivery.Outcome.EMBEDDED

    assert not OrmQ.objects.exists(), "every job it carried left the queue"
    for delivery in [first, *waiting]:
        done = Delivery.objects.get(pk=delivery.pk)
        assert (done.state, done.outcome, done.attempts) == ("done", "embedded", 1)
        assert PageVersion.objects.filter(page_id=done.page_id).count() == 1


def test_a_job_of_another_task_ends_the_carrying_and_is_left_to_the_cluster():
    first, before = new_pages(2)
    async_task(OTHER_TASK)
    (after,) = new_pages(1, start=2)
    other = next(job for job in OrmQ.objects.all() if job.task["func"] == OTHER_TASK)

    run_as_a_worker(first)

    assert Delivery.objects.get(pk=before.pk).outcome == Delivery.Outcome.EMBEDDED
    assert OrmQ.objects.get(pk=other.pk).lock == other.lock, "left as it was"
    assert untouched(after)


def test_a_job_another_worker_took_is_not_carried():
    first, taken, waiting = new_pages(3)
    taken_by_a_worker(taken)

    run_as_a_worker(first)

    assert Delivery.objects.get(pk=taken.pk).state == Delivery.State.QUEUED
    assert job_of(taken).lock > timezone.now()
    assert Delivery.objects.get(pk=waiting.pk).state == Delivery.State.DONE


@pytest.mark.parametrize(
    ("share", "timeout", "seconds", "done"),
    [
        (50, 300, 2.0, 4),
        (2, 300, 2.0, 2),
        (1, 300, 2.0, 1),
        (50, 0, 2.0, 1),
        (50, 300, 0.0, 1),
    ],
    ids=[
        "the default",
        "DELIVERY_CARRY 2",
        "DELIVERY_CARRY 1",
        "no time left of Q_TIMEOUT",
        "no time left of CARRY_SECONDS",
    ],
)
def test_a_job_carries_at_most_its_share_within_its_time(
    settings, monkeypatch, share, timeout, seconds, done
):
    settings.DELIVERY_CARRY, settings.Q_TIMEOUT = share, timeout
    monkeypatch.setattr(carry, "CARRY_SECONDS", seconds)
    first, *waiting = new_pages(4)

    run_as_a_worker(first)

    ran = [d for d in waiting if Delivery.objects.get(pk=d.pk).state == "done"]
    assert len(ran) == done - 1
    assert all(untouched(d) for d in waiting if d not in ran)


def test_a_carried_run_cut_off_leaves_its_job_to_run_again():
    first, cut, waiting = new_pages(3)
    real = carry.delivery_process

    def process(*, delivery_id):
        if delivery_id == cut.pk:
            raise OperationalError("the database system is shutting down")
        return real(delivery_id=delivery_id)

    with (
        mock.patch.object(carry, "delivery_process", process),
        pytest.raises(OperationalError) as raised,
    ):
        run_as_a_worker(first)

    # The failure is recorded on the first delivery's job: it names the run.
    assert raised.value.__notes__ == [
        f"in the run of delivery {cut.pk}, carried by the job of delivery "
        f"{first.pk} (whose own run had ended)"
    ]
    # Its job stays on the queue, taken: offered again after Q_RETRY (or the
    # sweep queues the delivery again sooner); nothing after it was taken.
    assert job_of(cut).lock > timezone.now()
    assert untouched(waiting)
