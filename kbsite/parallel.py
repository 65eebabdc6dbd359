"""Database work on a second connection while the caller's goes on.

A search's keyword query and its vector scan need each other's results only at
the end; run one beside the other, each on its own connection, and each takes a
core of the database server instead of waiting for the other. A search's log row
is needed by nobody waiting: it is written after the answer has gone. The work
runs with the caller's context variables, so it reads from the database the
caller reads from (a replica, ``kbsite.replicas``).
"""

from __future__ import annotations

import contextvars
import logging
import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from functools import cache
from threading import Barrier
from typing import TypeVar

from django.conf import settings
from django.db import close_old_connections, connection, connections

T = TypeVar("T")

logger = logging.getLogger(__name__)
# Work started by ``after`` and not finished yet.
_pending: set[Future] = set()


def beside(work: Callable[..., T], /, *args, **kwargs) -> Callable[[], T]:
    """Start ``work(*args, **kwargs)`` on a pool thread and return what waits for
    its result (raising what it raised).

    Inside a transaction the work runs here, when its result is asked for: another
    connection would not see the transaction's own writes.
    """
    if connection.in_atomic_block:
        return lambda: work(*args, **kwargs)
    return _submit(work, args, kwargs).result


def after(work: Callable[..., object], /, *args, **kwargs) -> None:
    """Start ``work(*args, **kwargs)`` on a pool thread and do not wait for it; an
    error it raises is logged. Inside a transaction it runs here, now."""
    if connection.in_atomic_block:
        work(*args, **kwargs)
        return
    future = _submit(work, args, kwargs)
    _pending.add(future)
    future.add_done_callback(_finished)


def _submit(work: Callable[..., T], args, kwargs) -> Future[T]:
    context = contextvars.copy_context()
    return _pool().submit(context.run, _on_own_connection, work, args, kwargs)


def _finished(future: Future) -> None:
    _pending.discard(future)
    error = future.exception()
    if error is not None:
        logger.error("work after the answer failed", exc_info=error)


def settle(timeout: float = 30) -> None:
    """Wait for the work ``after`` started (a test before it looks at the rows)."""
    wait(list(_pending), timeout=timeout)


def connections_close() -> None:
    """Close the database connection of every pool thread (as a test run does
    before it drops its database)."""
    threads = _threads()
    barrier = Barrier(threads)

    def close() -> None:
        connections.close_all()
        barrier.wait(timeout=30)  # so that each thread takes one of these

    for done in [_pool().submit(close) for _ in range(threads)]:
        done.result()


@cache
def _threads() -> int:
    # One for each request a web process serves at once.
    return settings.WEB_THREADS


@cache
def _pool() -> ThreadPoolExecutor:
    # Made on first use, in the process that uses it (never before a fork).
    return ThreadPoolExecutor(max_workers=_threads(), thread_name_prefix="beside")


def _on_own_connection(work: Callable[..., T], args, kwargs) -> T:
    # The thread keeps its connection between tasks, as a web thread does between
    # requests: dropped once too old or broken, checked before reuse.
    close_old_connections()
    try:
        return work(*args, **kwargs)
    finally:
        close_old_connections()


def _forgotten_in_child() -> None:
    # A forked process has none of the pool's threads: it makes its own.
    _pool.cache_clear()
    _pending.clear()


os.register_at_fork(after_in_child=_forgotten_in_child)
