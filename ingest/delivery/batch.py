"""Unchanged deliveries recorded together.

A recrawl of a site that did not change is hundreds of deliveries that each only
move a page's check times: a 304, or the body and rules the live page was read
from. A run whose own delivery is one of these takes up to ``DELIVERY_BATCH`` - 1
more waiting jobs of the queue whose deliveries are the same, and records all of
them in one transaction: the pages verified by one UPDATE, the deliveries done by
another, their jobs taken off the queue by a DELETE. None of those jobs then runs.

Each delivery is still claimed on its own: its run's lock (``ingest.delivery.claim``)
and an update conditional on the delivery as read, so none is applied twice, and
each page is changed under its row lock only if it shows no newer crawl. A job is
taken only with the lock on its delivery and its page: one that another run
holds, a page asked for twice, or a delivery that turns out to need reading stays
on the queue for its own job, untouched. Should the transaction fail, nothing of
it holds and every job it would have taken is still waiting.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.conf import settings
from django.db import DatabaseError, transaction
from django.utils import timezone
from django_q.models import OrmQ

from ingest.delivery import sql
from ingest.delivery.content import page_lock, pages_locking
from ingest.delivery.finish import VERIFIED, VERIFIED_FIELDS, decision_write
from ingest.delivery.models import Delivery
from ingest.delivery.outcome import (
    Change,
    Decision,
    Read,
    Reading,
    decide,
    delivery_read_unread,
)
from ingest.delivery.queue import delivery_jobs_waiting, error_name
from ingest.pushing.models import Push
from kbsite import locks
from kbsite.sqlrows import rows_update
from sources.models import Page
from sources.scope import ScopeMap

logger = logging.getLogger(__name__)

Outcome = Delivery.Outcome
# What a delivery recorded with others may read: nothing of its content.
READS = {Read.NOT_MODIFIED, Read.SAME_READING}
# What it may decide: a check that found the page's content, or a crawl older than
# the one the page shows (recorded, the page left as it is).
DECIDED = VERIFIED | {Change.NOTHING}


class Unsettled(Exception):
    """A delivery of the batch was not as its run read it: nothing is recorded."""


@dataclass
class _Member:
    delivery: Delivery
    page: Page  # locked
    reading: Reading
    decision: Decision
    job: int | None  # its job on the queue; None for the run's own delivery

    def __post_init__(self) -> None:
        self.seen = self.delivery.attempts  # as read


def batch_eligible(reading: Reading) -> bool:
    """Whether a delivery read so may be recorded with others."""
    return settings.DELIVERY_BATCH > 1 and reading.kind in READS


def deliveries_settle(
    delivery: Delivery, page: Page, reading: Reading, scope: ScopeMap
) -> Outcome | None:
    """Record ``delivery`` (claimed by this run, read as ``batch_eligible``) for
    ``page``, the one it was asked for, with the waiting deliveries like it; its
    outcome. None if, under the page's lock, it is not one to record so (its run
    goes on alone: nothing was written)."""
    try:
        with _held_by_this_run() as held, transaction.atomic():
            locked = page_lock(page, original_of=reading.asks_for_original)
            decision = decide(delivery, locked, reading)
            if decision is None or decision.change not in DECIDED:
                return None
            own = _Member(delivery, locked, reading, decision, job=None)
            others = _others_take(
                limit=settings.DELIVERY_BATCH - 1, own=own, scope=scope, held=held
            )
            # Let go while the jobs' rows are still locked, so that a worker
            # taking one once this transaction ends finds its delivery free (and
            # done, if it was recorded). After a database error the transaction
            # is spoilt: they go after its rollback.
            try:
                _record([own, *others])
            except Unsettled:
                held.let_go()
                raise
            held.let_go()
    except Unsettled:
        return None  # rolled back: every job it took is waiting again
    except DatabaseError as exc:
        # A deadlock, say, met by the batch: the delivery goes on alone.
        logger.warning(
            "delivery %s: recording it with others failed, alone now: %s",
            delivery.pk, error_name(exc),
        )  # fmt: skip
        return None
    if others:
        logger.info(
            "delivery %s (rid %s) recorded %d more deliveries with its own",
            delivery.pk, delivery.rid, len(others),
        )  # fmt: skip
    return decision.outcome


class _Held:
    """The deliveries whose run locks a batch took."""

    def __init__(self) -> None:
        self.keys: set[int] = set()

    def let_go(self, keys: set[int] | None = None) -> None:
        """Let go of ``keys`` (all by default)."""
        keys = self.keys if keys is None else keys & self.keys
        if keys:
            locks.session_locks_release(lock=locks.DELIVERY_RUNS, keys=keys)
            self.keys -= keys


@contextmanager
def _held_by_this_run() -> Iterator[_Held]:
    """The deliveries whose locks the block takes: those it has not let go of
    are let go of at its end, after its transaction."""
    held = _Held()
    try:
        yield held
    finally:
        try:
            held.let_go()
        except DatabaseError:
            pass  # the session is gone (the database restarted), its locks with it


def _others_take(
    *, limit: int, own: _Member, scope: ScopeMap, held: _Held
) -> list[_Member]:
    """Up to ``limit`` waiting jobs, oldest first, whose deliveries this run may
    record with its own: their rows (and their pages') locked until the
    transaction ends, their deliveries' run locks added to ``held``."""
    jobs = delivery_jobs_waiting(limit)
    if not jobs:
        return []
    held.keys |= locks.session_locks_try(lock=locks.DELIVERY_RUNS, keys=jobs)
    waiting = Delivery.objects.select_related("push").filter(
        pk__in=held.keys,
        state__in=Delivery.WAITING,
        attempts__lt=settings.DELIVERY_MAX_ATTEMPTS,
    )
    deliveries = {d.pk: d for d in waiting}
    urls = {d.url for d in deliveries.values()}
    pages = pages_locking(original_of=True, skip_locked=True).filter(
        url__in=urls, status=Page.Status.LIVE
    )
    by_url = {p.url: p for p in pages}
    taken = {own.page.pk}
    others = []
    for delivery_id, job in jobs.items():
        delivery = deliveries.get(delivery_id)
        page = by_url.get(delivery.url) if delivery else None
        if delivery is None or page is None or page.pk in taken:
            continue
        try:
            member = _member(delivery, page, job, scope)
        except Exception:  # left to its own job, whose run will say why
            logger.exception("delivery %s: not recorded with others", delivery_id)
            continue
        if member is not None:
            taken.add(page.pk)
            others.append(member)
    # Those left to their own jobs at once.
    held.let_go(held.keys - {member.delivery.pk for member in others})
    return others


def _member(
    delivery: Delivery, page: Page, job: int, scope: ScopeMap
) -> _Member | None:
    """``delivery`` and what it does to ``page`` (locked, live), if it may be
    recorded with others: it is for the page it was asked for, its source's by
    its URL, and it settles with nothing read."""
    owner = scope.source_for(delivery.url)
    if owner is None or owner.pk != page.source_id:
        return None
    push = delivery.push if delivery.push_id else None
    if push is not None and push.page_id not in (None, page.pk):
        return None  # a pushed URL led here: it is to point to the page
    if delivery.requested_url and delivery.requested_url != delivery.url:
        return None
    reading = delivery_read_unread(delivery, page)
    if reading is None or reading.kind not in READS:
        return None
    decision = decide(delivery, page, reading)
    if decision is None or decision.change not in DECIDED:
        return None
    return _Member(delivery, page, reading, decision, job)


def _record(members: list[_Member]) -> None:
    """Write every member's decision, in the caller's transaction: the pages, the
    deliveries, their pushes, and the jobs taken off the queue."""
    now = timezone.now()
    verified = []
    settled = []
    for member in members:
        delivery, page, decision = member.delivery, member.page, member.decision
        if decision.change in VERIFIED:
            decision_write(delivery, page, member.reading, decision)
            verified.append(page)
        own = member.job is None
        settled.append(
            sql.Settled(
                pk=delivery.pk,
                outcome=decision.outcome,
                error=decision.note,
                page=page.pk,
                seen=member.seen,
                attempts=member.seen if own else member.seen + 1,
                claimed_at=(delivery.claimed_at or now) if own else now,
            )
        )
    rows_update(verified, VERIFIED_FIELDS)
    recorded = sql.deliveries_done_together(settled=settled, at=now)
    if len(recorded) != len(settled):
        raise Unsettled(f"{len(settled) - len(recorded)} deliveries moved meanwhile")
    pushes = [m.delivery.push_id for m in members if m.delivery.push_id]
    if pushes:
        Push.objects.filter(pk__in=pushes).update(
            state=Push.State.DELIVERED, delivered_at=now
        )
    jobs = [m.job for m in members if m.job is not None]
    if jobs:
        OrmQ.objects.filter(pk__in=jobs).delete()
