"""Reads that go to a streaming replica of the primary: those of a search, an
answer and the Ask page, made inside ``replica_reads()``, and no others.

A Django router sees a model, never the request, the transaction or hand-written
SQL. One that sent every read to a replica would also send there the session of a
user who has just signed in, an API token just made, a throttle's count,
django-q2's task rows and the reads of a transaction that is writing: rows that a
replica may not have yet. So reads go to a replica only where code asks for it, in
a block: ``with replica_reads(): question_answer(…)``. Inside it the index's
models (``retrieval.routers``) and a search's hand-written statements
(``retrieval.sql``) read from the replica chosen for the block, unless the
primary's connection is in a transaction (its reads must see its writes). Work
the block hands to pool threads (``kbsite.parallel``) reads from the same replica.
Writes, the question's log row among them, go to the primary.

How stale a replica may be: it serves what it has replayed, so a page the primary
tombstoned keeps being found there until the replica replays the tombstone, for as
long as it is behind. With DATABASE_REPLICA_MAX_LAG, a replica more than that many
seconds behind (``replica_lag``) is passed over for the primary, which bounds it.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections

logger = logging.getLogger(__name__)

# Seconds a replica that could not be reached is left out before it is tried
# again, and least seconds between two log lines about one replica.
REPLICA_REST_SECONDS = 30
REPLICA_LOG_SECONDS = 60

# Seconds since the primary committed the last transaction this replica has
# replayed; 0 when it has replayed all it received and its WAL receiver runs (an
# idle primary sends no transactions to date the replay by; a receiver that is not
# streaming leaves the received position behind, so that case is dated instead);
# NULL when the server is not a standby (nothing to measure) or has replayed no
# transaction since it started. A role without pg_read_all_stats sees the
# receiver's row without its status: a running receiver counts as streaming.
REPLICA_LAG = """
SELECT CASE
    WHEN NOT pg_is_in_recovery() THEN NULL
    WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn()
        AND EXISTS (SELECT 1 FROM pg_stat_wal_receiver
                    WHERE coalesce(status, 'streaming') = 'streaming')
        THEN 0.0
    ELSE extract(epoch FROM clock_timestamp() - pg_last_xact_replay_timestamp())
END
"""

_reading: ContextVar[str | None] = ContextVar("replica_reading", default=None)
# Monotonic times: until when a replica is left out, when it was last logged.
_resting: dict[str, float] = {}
_logged: dict[str, float] = {}


@contextmanager
def replica_reads() -> Iterator[str]:
    """Reads of the index in the block go to one replica (``replica_choose``);
    yields its alias, or the primary's when none is fit or there are none."""
    token = _reading.set(replica_choose())
    try:
        yield read_alias()
    finally:
        _reading.reset(token)


def read_alias() -> str:
    """Where a read of the index goes now: the replica of the enclosing
    ``replica_reads()`` outside a transaction, else the primary."""
    alias = _reading.get()
    if alias is None or connections[DEFAULT_DB_ALIAS].in_atomic_block:
        return DEFAULT_DB_ALIAS
    return alias


def replica_choose() -> str:
    """A replica at random among those that answer and are no more than
    DATABASE_REPLICA_MAX_LAG seconds behind; the primary if none is, or inside a
    transaction (no replica is asked then)."""
    replicas = list(settings.DATABASE_REPLICAS)
    if not replicas or connections[DEFAULT_DB_ALIAS].in_atomic_block:
        return DEFAULT_DB_ALIAS
    random.shuffle(replicas)
    for alias in replicas:
        if replica_fit(alias, max_lag=settings.DATABASE_REPLICA_MAX_LAG):
            return alias
    return DEFAULT_DB_ALIAS


def replica_fit(alias: str, *, max_lag: float | None) -> bool:
    """Whether ``alias`` may serve a search now: it answers and, with ``max_lag``,
    it is known to be at most that many seconds behind."""
    if time.monotonic() < _resting.get(alias, 0.0):
        return False
    try:
        if max_lag is None:
            _connected(alias)
            return True
        lag = replica_lag(alias)
    except DatabaseError as exc:
        _resting[alias] = time.monotonic() + REPLICA_REST_SECONDS
        rest = f"left out for {REPLICA_REST_SECONDS} s"
        _passed_over(alias, f"cannot be reached ({exc}); {rest}")
        return False
    if lag is None:
        _passed_over(alias, "is no standby, or has replayed nothing: lag unknown")
        return False
    if lag > max_lag:
        limit = f"DATABASE_REPLICA_MAX_LAG {max_lag:g}"
        _passed_over(alias, f"is {lag:.1f} s behind ({limit})")
        return False
    return True


def _connected(alias: str) -> None:
    """A connection to ``alias`` that answered: a kept one is checked first (the
    check Django makes before a request's first query), so that a replica that
    went away is found out here rather than in the middle of a search."""
    connection = connections[alias]
    connection.close_if_health_check_failed()
    connection.ensure_connection()


def replica_lag(alias: str) -> float | None:
    """Seconds ``alias`` is behind its primary (``REPLICA_LAG``); None if not
    known."""
    with connections[alias].cursor() as cursor:
        cursor.execute(REPLICA_LAG)
        (lag,) = cursor.fetchone()
    return None if lag is None else max(float(lag), 0.0)


def _passed_over(alias: str, reason: str) -> None:
    """Say why searches read from the primary, once a minute per replica."""
    now = time.monotonic()
    if now - _logged.get(alias, -REPLICA_LOG_SECONDS) < REPLICA_LOG_SECONDS:
        return
    _logged[alias] = now
    logger.warning("replica %s %s: searches read from the primary", alias, reason)
