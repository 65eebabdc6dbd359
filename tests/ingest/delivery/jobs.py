"""Delivery jobs on the queue as the tests of recording and carrying them see
them: taken and run as a worker of the cluster takes and runs one."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.utils import timezone
from django_q.models import OrmQ

from ingest.delivery.models import Delivery
from ingest.delivery.queue import TASK
from ingest.tasks import delivery_process_task


def delivery_jobs() -> list[OrmQ]:
    return [job for job in OrmQ.objects.all() if job.task["func"] == TASK]


def job_of(delivery: Delivery) -> OrmQ | None:
    jobs = delivery_jobs()
    return next((job for job in jobs if job.task["args"] == (delivery.pk,)), None)


def taken_by_a_worker(delivery: Delivery) -> OrmQ:
    """The delivery's job, its lock moved on as the cluster's pusher takes it."""
    job = job_of(delivery)
    assert job is not None, "the delivery has no job on the queue"
    until = timezone.now() + timedelta(seconds=settings.Q_RETRY)
    OrmQ.objects.filter(pk=job.pk).update(lock=until)
    return job


def run_as_a_worker(delivery: Delivery) -> str | None:
    """The delivery's job as a worker runs it: taken first, acknowledged after."""
    job = taken_by_a_worker(delivery)
    result = delivery_process_task(delivery.pk)
    OrmQ.objects.filter(pk=job.pk).delete()
    return result


def untouched(delivery: Delivery) -> bool:
    """Still waiting for its own job, which is still waiting for a worker."""
    now, job = Delivery.objects.get(pk=delivery.pk), job_of(delivery)
    return (
        (now.state, now.attempts) == (Delivery.State.QUEUED, 0)
        and job is not None
        and job.lock <= timezone.now()
    )
