"""Which runs may send notifications: at most NOTIFY_MAX_WORKERS at once, in every
worker of every node together, so that receivers that hang can hold no more
workers than that while crawls and deliveries take the rest.

A run holds one of NOTIFY_MAX_WORKERS advisory locks of its database session (its
slot) while it sends. A run that finds every slot taken returns at once instead of
waiting in a worker: what is due is left to the run at work, or to the next
scheduled one (every minute). The lock goes with the session, so a worker killed
in the middle of a send (by Q_TIMEOUT, or a crash) frees its slot.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.db import Error, connection

from kbsite import locks


@contextmanager
def sender_slot() -> Iterator[int | None]:
    """A free slot, held for the block; None if every slot is taken."""
    slot = next(
        (
            number
            for number in range(settings.NOTIFY_MAX_WORKERS)
            if locks.session_lock_try(lock=locks.NOTIFY_SENDERS, key=number)
        ),
        None,
    )
    if slot is None:
        yield None
        return
    # Django closes a connection older than CONN_MAX_AGE when some code asks it
    # to (django-q2's broker does, to queue a job): the slot would go with it.
    close_at, connection.close_at = connection.close_at, None
    try:
        yield slot
    finally:
        connection.close_at = close_at
        try:
            locks.session_lock_release(lock=locks.NOTIFY_SENDERS, key=slot)
        except Error:
            pass  # the session is gone (the database restarted), and its lock too


def slots_taken() -> set[int]:
    """The slots some session of this database holds."""
    return locks.keys_held(lock=locks.NOTIFY_SENDERS)
