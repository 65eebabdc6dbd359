"""Which run has a delivery: at most one at a time, and whether one is alive.

A run holds an advisory lock of its database session on the delivery, taken before
its claim and let go once it has recorded an outcome, or before it hands the
delivery back to the queue (so that the job it queues can take it at once). A
second copy of the job (django-q2 delivers at least once) finds the lock taken and
leaves the delivery alone. The lock goes with the run's session: a worker that dies,
or whose database restarted, holds nothing, which is how the sweep tells a delivery
left ``processing`` by a lost job from one a live worker is running.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from django.db import Error, connection
from django.utils import timezone

from ingest.delivery.models import Delivery
from kbsite import locks


@contextmanager
def delivery_held(delivery_id: int) -> Iterator[Delivery | None]:
    """Take the delivery for this run, for the block: the delivery if it is this
    run's; None if it does not exist, another run holds it or it is not to be run
    any more."""
    delivery = _read_and_take(delivery_id)
    if delivery is None:
        yield None
        return
    # Django closes a connection older than CONN_MAX_AGE when some code asks it
    # to (django-q2's broker does, to queue a job): the lock would go with it.
    close_at, connection.close_at = connection.close_at, None
    try:
        yield delivery if delivery.mark_claimed(at=timezone.now()) else None
    finally:
        connection.close_at = close_at
        _let_go(delivery_id)


def deliveries_held(ids: Iterable[int]) -> set[int]:
    """Those of these deliveries a live run holds, in whichever session."""
    # A delivery's key is its id as an int4: ids 2^32 apart share one lock, and a
    # run of either makes the other's job wait for the next sweep, never run twice.
    keys = locks.keys_held(lock=locks.DELIVERY_RUNS)
    return {pk for pk in ids if locks.space_key(pk) in keys}


def _read_and_take(pk: int) -> Delivery | None:
    """The delivery, read in the statement that takes its lock (one round trip
    for both), if it exists and the lock was free. The row may be older than the
    lock: the claim that follows is conditional on what was read."""
    lock = locks.session_lock_try_expression(lock=locks.DELIVERY_RUNS, key=pk)
    deliveries = Delivery.objects.select_related("push").annotate(taken=lock)
    delivery = deliveries.filter(pk=pk).first()
    return delivery if getattr(delivery, "taken", False) else None


def _let_go(pk: int) -> None:
    try:
        locks.session_lock_release(lock=locks.DELIVERY_RUNS, key=pk)
    except Error:
        pass  # the session is gone (the database restarted), and its lock with it
