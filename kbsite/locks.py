"""Every PostgreSQL advisory lock of the project, and the statements that take them.

An advisory lock is the database server's, not a process's: workers, nodes and
commands exclude one another through it whichever machine they run on. Each lock
the project takes is an entry of :data:`REGISTRY` below: a name, its number and
what it guards. Callers name an entry and never write a lock statement; no other
module of the project runs one (``tests/kbsite/test_locks.py`` reads the source tree).

The numbers are those of the releases before this registry existed (most spell
ASCII: 0x6B62646C is "kbdl"), so a node still running an older release and one
running this one take the same locks and still exclude each other. Never renumber
an entry: a rolling upgrade would run a job twice at once. A new lock takes a
number no entry has (the test refuses two entries sharing one).

An entry is one of two kinds:

- a key: one lock, its number a bigint (``pg_advisory_lock(key)``);
- a space: one lock per int4 key in it (``pg_advisory_lock(space, key)``), such as
  a delivery's run keyed by the delivery's id. A key is taken modulo 2^32 as a
  signed int4 (:func:`space_key`): keys 2^32 apart share a lock, and their holders
  take turns.

PostgreSQL keeps the two kinds apart (a key's lock has ``objsubid`` 1 in
``pg_locks``, a space's 2), and the registry keeps every number distinct anyway.
A session lock lasts until it is let go or its session ends (a worker that dies
holds nothing); a transaction lock, until the transaction ends.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

from django.db import connection
from django.db.models import BooleanField, Func, Value
from psycopg.sql import SQL, Identifier, Placeholder


@dataclass(frozen=True)
class AdvisoryLock:
    """An entry of the registry: ``number`` is the lock's bigint key, or with
    ``space`` the int4 space of a family of locks, one per key."""

    name: str
    number: int
    guards: str
    space: bool = False


PUSH_SENDER = AdvisoryLock(
    "push sender",
    0x6B62_7075,  # "kbpu"
    "the one process sending pushes to Crawlbase, so that CRAWLBASE_PUSH_RATE "
    "holds across workers (ingest.pushing.services; a session lock, tried)",
)
RECRAWL_PLANNER = AdvisoryLock(
    "recrawl planner",
    0x6B62_706C,  # "kbpl"
    "one planner of due pages at a time (ingest.planning.recrawl; a transaction "
    "lock, tried)",
)
WORD_COUNTS = AdvisoryLock(
    "word counts",
    0x6B62_5F6C_6578,  # "kb_lex"
    "the refresh of the word counts: two workers take turns "
    "(retrieval.statistics; a transaction lock, waited for)",
)
VECTOR_PRUNE = AdvisoryLock(
    "vector prune",
    0x6B_625F_7072_756E,  # "kb_prun"
    "a prune of unused vectors holds it alone, a swap of chunks shared, so that no "
    "prune runs between a swap's check of its vectors and its commit "
    "(retrieval.indexing; a transaction lock, waited for)",
)
DELIVERY_RUNS = AdvisoryLock(
    "delivery runs",
    0x6B62_646C,  # "kbdl"
    "a delivery's run, keyed by the delivery's id: one run at a time, and the "
    "sweep tells a lost job from a live one (ingest.delivery.claim; session locks, "
    "tried)",
    space=True,
)
NOTIFY_SENDERS = AdvisoryLock(
    "notification senders",
    0x6B62_6E74,  # "kbnt"
    "the NOTIFY_MAX_WORKERS slots of notification senders, keyed 0, 1, ... "
    "(ingest.notify.slots; session locks, tried)",
    space=True,
)
DAY_PLANS = AdvisoryLock(
    "day plans",
    0x6B62_6470,  # "kbdp"
    "a source's day plan, keyed by the source's id: planned once however many "
    "planners run (sources.replan; transaction locks, waited for)",
    space=True,
)

REGISTRY: tuple[AdvisoryLock, ...] = (
    PUSH_SENDER,
    RECRAWL_PLANNER,
    WORD_COUNTS,
    VECTOR_PRUNE,
    DELIVERY_RUNS,
    NOTIFY_SENDERS,
    DAY_PLANS,
)

# A space's keys are int4s.
_KEYS = 2**32

_TRY = "pg_try_advisory_lock"
_RELEASE = "pg_advisory_unlock"
_XACT_WAIT = "pg_advisory_xact_lock"
_XACT_WAIT_SHARED = "pg_advisory_xact_lock_shared"
_XACT_TRY = "pg_try_advisory_xact_lock"
# The keys of a space's locks (objsubid 2) granted in this database, to any
# session.
_KEYS_HELD = (
    "SELECT objid::bigint FROM pg_locks WHERE locktype = 'advisory' "
    "AND classid = %s::oid AND objsubid = 2 AND granted AND database = "
    "(SELECT oid FROM pg_database WHERE datname = current_database())"
)


def space_key(key: int) -> int:
    """The int4 a space's lock is taken with for ``key``: ``key`` modulo 2^32,
    signed."""
    key %= _KEYS
    return key - _KEYS if key >= _KEYS // 2 else key


def session_lock_try(*, lock: AdvisoryLock, key: int | None = None) -> bool:
    """Take the session's ``lock`` (its ``key``, for a space) without waiting:
    whether this session holds it now. It lasts until :func:`session_lock_release`
    or the session's end."""
    return _run(_TRY, lock, key)


def session_lock_release(*, lock: AdvisoryLock, key: int | None = None) -> bool:
    """Let go of a lock :func:`session_lock_try` took: whether it was held."""
    return _run(_RELEASE, lock, key)


def session_lock_try_expression(*, lock: AdvisoryLock, key: int | None = None) -> Func:
    """:func:`session_lock_try` as a boolean expression of a query, so that a row is
    read in the statement that takes its lock (one round trip for both)."""
    values = [Value(arg) for arg in _args(lock, key)]
    return Func(*values, function=_TRY, output_field=BooleanField())


def session_locks_try(*, lock: AdvisoryLock, keys: Iterable[int]) -> set[int]:
    """:func:`session_lock_try` for several keys of the space ``lock`` in one
    statement: those of ``keys`` whose lock this session holds now."""
    wanted = {key: space_key(key) for key in _space_keys(lock, keys)}
    if not wanted:
        return set()
    with connection.cursor() as cursor:
        cursor.execute(_many(_TRY), [sorted(set(wanted.values())), lock.number])
        taken = {row[0] for row in cursor.fetchall()}
    return {key for key, held in wanted.items() if held in taken}


def session_locks_release(*, lock: AdvisoryLock, keys: Iterable[int]) -> None:
    """Let go of the locks :func:`session_locks_try` took, one release per key."""
    # Once per lock: keys 2^32 apart, taken together, took it once.
    wanted = sorted({space_key(key) for key in _space_keys(lock, keys)})
    if wanted:
        with connection.cursor() as cursor:
            cursor.execute(_many(_RELEASE), [lock.number, wanted])


def xact_lock_wait(
    *, lock: AdvisoryLock, key: int | None = None, shared: bool = False
) -> None:
    """Wait for ``lock`` and hold it until the transaction ends; ``shared``: beside
    other shared holders, never beside the exclusive one."""
    _run(_XACT_WAIT_SHARED if shared else _XACT_WAIT, lock, key)


def xact_lock_try(*, lock: AdvisoryLock, key: int | None = None) -> bool:
    """Take ``lock`` until the transaction ends, without waiting: whether this
    transaction holds it now."""
    return _run(_XACT_TRY, lock, key)


def keys_held(*, lock: AdvisoryLock) -> set[int]:
    """The keys (as :func:`space_key` gives them) of the space ``lock`` whose lock
    some session of this database holds."""
    _space_keys(lock, ())
    with connection.cursor() as cursor:
        cursor.execute(_KEYS_HELD, [lock.number])
        return {space_key(row[0]) for row in cursor.fetchall()}


def _space_keys(lock: AdvisoryLock, keys: Iterable[int]) -> list[int]:
    """``keys`` of ``lock``, which must be a space of keys."""
    if not lock.space:
        raise TypeError(f"{lock.name} is a key, not a space of keys")
    return list(keys)


def _run(function: str, lock: AdvisoryLock, key: int | None) -> bool:
    args = _args(lock, key)
    with connection.cursor() as cursor:
        cursor.execute(_statement(function, len(args)), args)
        return bool(cursor.fetchone()[0])


def _args(lock: AdvisoryLock, key: int | None) -> list[int]:
    """The lock function's arguments: a key's number, or a space's and the key."""
    if lock.space and key is None:
        raise TypeError(f"{lock.name} is a space: a key in it is required")
    if not lock.space and key is not None:
        raise TypeError(f"{lock.name} is a key: it takes no key of its own")
    return [lock.number] if key is None else [lock.number, space_key(key)]


@cache
def _statement(function: str, args: int) -> str:
    placeholders = SQL(", ").join([Placeholder()] * args)
    return SQL("SELECT {}({})").format(Identifier(function), placeholders).as_string()


# Several keys of one space in one statement: taken without waiting (those taken
# are read back), or let go of, once each.
_MANY = {
    _TRY: "SELECT k FROM unnest(%s::int4[]) AS keys(k) WHERE {}(%s, k)",
    _RELEASE: "SELECT {}(%s, k) FROM unnest(%s::int4[]) AS keys(k)",
}


@cache
def _many(function: str) -> str:
    return SQL(_MANY[function]).format(Identifier(function)).as_string()
