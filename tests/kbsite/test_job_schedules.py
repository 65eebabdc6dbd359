"""django-q2's scheduler on several worker nodes: every cluster runs it, and a tick
of a schedule still queues one job.

Each cluster's sentinel calls ``django_q.scheduler.scheduler`` every 30 s. It reads
the due schedules with ``SELECT … FOR UPDATE`` in one transaction, queues each
job through the ORM broker on that same connection and moves the schedule's next
run past now; a second scheduler waiting on those rows finds, once the first
commits, that they are no longer due (PostgreSQL checks the WHERE clause again on
the row a waiting ``FOR UPDATE`` gets), and skips them.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone
from django_q.brokers import get_broker
from django_q.models import OrmQ, Schedule
from django_q.scheduler import scheduler
from django_q.signals import pre_enqueue

from tests.conftest import at_once

pytestmark = pytest.mark.django_db(transaction=True)

TICKS = 5
CLUSTERS = 6


@pytest.mark.slow  # several clusters' schedulers in threads, tick after tick
def test_schedulers_of_several_clusters_looking_at_once_queue_one_job_per_tick():
    due = timezone.now() - timedelta(seconds=5)
    names = [f"tick {n}" for n in range(TICKS)]
    for name in names:
        Schedule.objects.create(
            name=name, func="math.floor", args="1", schedule_type=Schedule.MINUTES,
            minutes=1, repeats=-1, next_run=due,
        )  # fmt: skip

    def slow_enqueue(sender, task, **kwargs) -> None:
        # The first scheduler holds the rows while the others queue behind it.
        time.sleep(0.05)

    pre_enqueue.connect(slow_enqueue, dispatch_uid="slow_enqueue")
    try:
        at_once(lambda: scheduler(broker=get_broker()), times=CLUSTERS)
    finally:
        pre_enqueue.disconnect(dispatch_uid="slow_enqueue")

    groups = [job.task["group"] for job in OrmQ.objects.all()]
    assert sorted(g for g in groups if g in names) == names, "one job per tick"
    for schedule in Schedule.objects.filter(name__in=names):
        assert schedule.next_run == due + timedelta(minutes=1), schedule.name
