"""Getting each delivery's job onto the queue, and back onto it: on arrival, on
retry, on an editor's re-queue, and when a job was lost."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from django_q.brokers import get_broker
from django_q.brokers.orm import ORM
from django_q.conf import Conf
from django_q.models import OrmQ, Schedule
from django_q.tasks import async_task, schedule

from ingest.delivery import sql
from ingest.delivery.claim import deliveries_held
from ingest.delivery.models import Delivery
from ingest.reading import wire
from sources.scope import source_for_url

logger = logging.getLogger(__name__)

TASK = "ingest.tasks.delivery_process_task"
ERROR_CHARS = 300
# A double-quoted span, or a quote with no partner before the line ends.
QUOTED = re.compile(r'"([^"]*)(?:"|$)')
# What PostgreSQL quotes besides values: names of at most 63 bytes.
IDENTIFIER = re.compile(r"[A-Za-z_][\w$.]{0,62}")


def delivery_receive(
    *, parsed: wire.ParsedDelivery, raw: bytes, content_type: str
) -> tuple[int, bool]:
    """Store a delivery and queue its job in one transaction, once per rid: the
    delivery's id, and whether it was new.

    With the ORM broker the job row is written by the same transaction as the
    delivery: both are kept or neither is. A repeated rid is claimed by
    ``ON CONFLICT DO NOTHING``: no failed INSERT, so no body in the database's log.
    """
    now = timezone.now()
    delivery = sql.NewDelivery(
        rid=parsed.rid,
        url=parsed.url,
        original_status=parsed.original_status,
        crawler_status=parsed.crawler_status,
        content_type=content_type[:200],
        etag=parsed.etag[:200],
        last_modified=parsed.last_modified[:100],
        site_modified_at=parsed.site_modified_at,
        requested_url=parsed.requested_url[:2048],
        body=raw,
        body_bytes=len(raw),
        received_at=now,
        queued_at=now,
        state=Delivery.State.QUEUED,
    )
    with transaction.atomic():
        delivery_id = sql.delivery_insert(delivery=delivery)
        if delivery_id is not None:
            delivery_enqueue(delivery_id=delivery_id, rid=parsed.rid)
            return delivery_id, True
    existing = Delivery.objects.filter(rid=parsed.rid).values_list("pk", flat=True)
    return existing.get(), False


class _RowBroker(ORM):
    """django-q2's ORM broker, writing a job's row with one INSERT instead of a
    model save. A delivery's job is queued for every webhook call, inside its
    transaction, and the model's save machinery was a fifth of the web workers' CPU
    time under load; the row written is the same."""

    def enqueue(self, task) -> int:
        return sql.job_insert(
            using=Conf.ORM, key=self.list_key, payload=task, lock=timezone.now()
        )


def delivery_enqueue(*, delivery_id: int, rid: str) -> None:
    async_task(
        TASK,
        delivery_id,
        task_name=f"delivery {delivery_id} ({rid})",
        broker=_RowBroker(),
    )


def delivery_requeue(*, delivery: Delivery) -> bool:
    """Put a failed (or stuck) delivery back on the queue, with fresh attempts; or
    one that was out of scope, once a source covers its URL."""
    out_of_scope = delivery.outcome == Delivery.Outcome.OUT_OF_SCOPE
    if out_of_scope and source_for_url(delivery.url) is None:
        return False
    with transaction.atomic():
        if not delivery.mark_requeued():
            return False
        delivery_enqueue(delivery_id=delivery.pk, rid=delivery.rid)
    return True


def error_summary(exc: BaseException) -> str:
    """What to record and log of an error: its type and the first line of its
    message, with no value the message quotes. Database errors quote the value
    that failed (page text, for a delivery) in the message, and the statement in
    the lines after it (DETAIL, LINE, CONTEXT)."""
    lines = str(exc).strip().split("\n", 1)
    line = _elide_values(lines[0])
    if len(line) > ERROR_CHARS:
        line = line[: ERROR_CHARS - 1] + "…"
    name = error_name(exc)
    return f"{name}: {line}" if line else name


def error_name(exc: BaseException) -> str:
    """The error's type, by module and name: safe to log, it quotes nothing."""
    return f"{type(exc).__module__}.{type(exc).__qualname__}"


def _elide_values(line: str) -> str:
    """``line`` with its first quoted value that is not a name, and everything
    after it to the last quote of the line, shown as ``"…"``. An identifier
    (``"t_v_key"``) stays; a value may hold quotes of its own, or go on past the
    line's end."""
    for match in QUOTED.finditer(line):
        if not IDENTIFIER.fullmatch(match.group(1)):
            end = line.rfind('"')
            rest = line[end + 1 :] if end > match.start() else ""
            return f'{line[: match.start()]}"…"{rest}'
    return line


def delivery_retry_later(
    *, delivery: Delivery, error: str, cut_off: bool = False
) -> Delivery.State | None:
    """After an error: queued again after a backoff (DELIVERY_RETRY_SECONDS, ×4 per
    attempt), at once if the run was ``cut_off`` (it lost its database connection),
    or failed once DELIVERY_MAX_ATTEMPTS attempts are spent. None if another run
    has taken the delivery up since this one claimed it."""
    if not connection.in_atomic_block:
        # After the database restarted under the job, its connection is dead, and
        # Django reconnects only between requests: take a new one, or the retry
        # would fail too and leave the delivery processing until the sweep.
        connection.close_if_unusable_or_obsolete()
    if delivery.attempts >= settings.DELIVERY_MAX_ATTEMPTS:
        delivery.mark_failed(error=error)
        return Delivery.State.FAILED
    # A run cut off by the database's restart says nothing of the delivery, and
    # the database answers again (this retry is recorded): no backoff.
    seconds = 0 if cut_off else settings.DELIVERY_RETRY_SECONDS
    delay = timedelta(seconds=seconds * 4 ** (delivery.attempts - 1))
    at = timezone.now() + delay
    with transaction.atomic():
        if not delivery.mark_retry(error=error, at=at):
            return None
        if delay:
            schedule(
                TASK,
                delivery.pk,
                name=f"retry delivery {delivery.pk} #{delivery.attempts}",
                schedule_type=Schedule.ONCE,
                next_run=at,
            )
        else:
            delivery_enqueue(delivery_id=delivery.pk, rid=delivery.rid)
    return Delivery.State.QUEUED


def connection_lost() -> bool:
    """Whether this process's connection is gone, after a database error: closed
    under the run, or it could not connect again, or it no longer answers (then
    it is closed, so that the next statement opens a new one)."""
    if connection.in_atomic_block:
        return False
    if connection.connection is None:
        return True
    if connection.errors_occurred and not connection.is_usable():
        connection.close()
        return True
    return False


def deliveries_bodies_expire() -> int:
    """Drop the bodies of out-of-scope deliveries kept long enough; how many."""
    expired = Delivery.objects.bodies_expired(now=timezone.now())
    return expired.update(body=None)


def deliveries_requeue_stalled() -> int:
    """Queue again every delivery whose job is gone, so that each acknowledged
    delivery reaches an outcome (run every minute, and by the cluster as soon as
    the database answers again after an outage). Returns how many were queued
    again; those out of attempts are marked failed instead.

    A delivery is left alone while a live run holds it (``ingest.delivery.claim``), or
    while a job of it is waiting on the queue. A claimed one no run holds lost its
    run: a job of it taken by a worker is a copy that will find it free or done.
    A queued one also keeps a job a worker took since the database last started;
    one taken before may have failed in the outage, unable to acknowledge it, and
    the queue would offer it again only after Q_RETRY."""
    started = sql.postmaster_started_at()
    stalled = list(Delivery.objects.stalled(now=timezone.now(), restarted_at=started))
    if not stalled:
        return 0
    held = deliveries_held(delivery.pk for delivery in stalled)
    jobs = _delivery_jobs(started=started)
    requeued = 0
    for delivery in stalled:
        if delivery.pk in held or jobs.keeps(delivery):
            continue
        if delivery.attempts >= settings.DELIVERY_MAX_ATTEMPTS:
            delivery.mark_failed(error="its job was lost and no attempts are left")
            continue
        with transaction.atomic():
            if delivery.mark_requeued_stalled():
                delivery_enqueue(delivery_id=delivery.pk, rid=delivery.rid)
                requeued += 1
    if requeued:
        logger.warning("queued %d stalled deliveries again", requeued)
    return requeued


@dataclass(frozen=True)
class _Jobs:
    """The deliveries with a job on the queue: waiting for a worker, or taken by
    one since the database started."""

    waiting: frozenset[int]
    taken: frozenset[int]

    def keeps(self, delivery: Delivery) -> bool:
        if delivery.state == Delivery.State.PROCESSING:
            return delivery.pk in self.waiting
        return delivery.pk in self.waiting or delivery.pk in self.taken


def _delivery_jobs(*, started: datetime) -> _Jobs:
    """Read after the deliveries, so that a job queued in between is seen;
    ``started``: when the database last started."""
    # The broker's clock: a worker that takes a job sets its lock to now + Q_RETRY.
    now = timezone.now()
    taken_since = started + timedelta(seconds=settings.Q_RETRY)
    waiting: set[int] = set()
    taken: set[int] = set()
    rows = OrmQ.objects.filter(key=get_broker().list_key).only("payload", "lock")
    for job in rows.iterator():
        delivery_id = job_delivery(job.payload)
        if delivery_id is None:
            continue
        if job.lock <= now:
            waiting.add(delivery_id)
        elif job.lock >= taken_since:
            taken.add(delivery_id)
    return _Jobs(waiting=frozenset(waiting), taken=frozenset(taken))


def job_delivery(payload: str) -> int | None:
    """The delivery a job of the queue runs, from its payload; None for a job of
    another task (or one whose payload cannot be read: the queue's to handle)."""
    try:
        task = OrmQ(payload=payload).task
    except Exception:  # unsigned, or signed with another key
        return None
    if not isinstance(task, dict) or task.get("func") != TASK or task.get("kwargs"):
        return None
    args: tuple = task.get("args") or ()
    return args[0] if len(args) == 1 and isinstance(args[0], int) else None


def delivery_jobs_waiting(limit: int) -> dict[int, int]:
    """The deliveries of up to ``limit`` jobs waiting on the queue, oldest first,
    whose rows no other transaction holds: delivery id → job id. The rows stay
    locked until the caller's transaction ends."""
    rows = (
        OrmQ.objects.select_for_update(skip_locked=True)
        .filter(key=get_broker().list_key, lock__lt=timezone.now())
        .order_by("pk")
        .only("payload")[:limit]
    )
    jobs: dict[int, int] = {}
    for job in rows:
        delivery_id = job_delivery(job.payload)
        if delivery_id is not None:
            jobs.setdefault(delivery_id, job.pk)
    return jobs


def delivery_job_take(*, done: int | None = None) -> tuple[int, int] | None:
    """Take the oldest job waiting on the queue, as a worker of the cluster takes
    one (its lock moved Q_RETRY seconds on, so that it runs again should this
    run die), if it is a delivery's: (its id, the delivery's id). None when no
    job waits, or the oldest is another task's (left to the cluster, untouched).
    The job ``done``, if given, is taken off the queue in the same statement."""
    now = timezone.now()
    until = now + timedelta(seconds=settings.Q_RETRY)
    taken = sql.job_take(key=get_broker().list_key, now=now, until=until, done=done)
    if taken is None:
        return None
    job_id, payload, lock = taken
    delivery_id = job_delivery(payload)
    if delivery_id is None:
        # As it was: not ours to run.
        OrmQ.objects.filter(pk=job_id).update(lock=lock)
        return None
    return job_id, delivery_id


def delivery_job_done(job_id: int) -> None:
    """Take a job off the queue once its run is over, as the cluster does."""
    OrmQ.objects.filter(pk=job_id).delete()
