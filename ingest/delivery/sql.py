"""The statements of the webhook and the delivery job written by hand.

The webhook stores each delivery and its job with one INSERT apiece: a repeated
delivery meets ``ON CONFLICT`` rather than a failed INSERT, and the job's model save
was a fifth of the web workers' CPU time under load. Composed as ``kbsite.sqlrows``
says: from the models' names, with values as parameters, every column an INSERT
leaves out filled by its ``db_default`` (tests/kbsite/test_raw_inserts.py);
callers give values, never SQL.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from datetime import datetime

from django.db import Error, connection, connections
from django_q.models import OrmQ
from psycopg.sql import SQL

from ingest.delivery.models import Delivery
from ingest.pushing.models import Push
from kbsite.sqlrows import Insert, Recordset, column, table

# A delivery as it arrives; its counts, outcome and error start as the database's
# defaults. A repeated rid inserts nothing and returns no row.
DELIVERY_INSERT = Insert(
    Delivery,
    ("rid", "url", "original_status", "crawler_status", "content_type", "etag",
     "last_modified", "site_modified_at", "requested_url", "push", "body",
     "body_bytes", "received_at", "queued_at", "state"),
    "INSERT INTO {table} ({columns}) VALUES {values} "
    "ON CONFLICT ({rid}) DO NOTHING RETURNING {id}",
    values={
        "push": SQL("(SELECT {id} FROM {table} WHERE {rid} = %s)").format(
            id=column(Push, "pk"), table=table(Push), rid=column(Push, "rid")
        )
    },
)  # fmt: skip
# A job on django-q2's ORM queue, as its broker writes it.
JOB_INSERT = Insert(
    OrmQ,
    ("key", "payload", "lock"),
    "INSERT INTO {table} ({columns}) VALUES {values} RETURNING {id}",
)


@dataclass(frozen=True, slots=True)
class NewDelivery:
    """The values of a delivery's row as the webhook writes it."""

    rid: str
    url: str
    original_status: int | None
    crawler_status: int | None
    content_type: str
    etag: str
    last_modified: str
    site_modified_at: datetime | None
    requested_url: str
    body: bytes
    body_bytes: int
    received_at: datetime
    queued_at: datetime
    state: str


_NEW_DELIVERY_FIELDS = tuple(f.name for f in fields(NewDelivery))


def delivery_insert(*, delivery: NewDelivery) -> int | None:
    """Store a delivery, linked to the push of its rid if there is one: its id, or
    None when a delivery of that rid is stored already."""
    values = {name: getattr(delivery, name) for name in _NEW_DELIVERY_FIELDS}
    params = DELIVERY_INSERT.params(**values, push=delivery.rid)
    with connection.cursor() as cursor:
        cursor.execute(DELIVERY_INSERT.sql, params)
        row = cursor.fetchone()
    return None if row is None else row[0]


def job_insert(*, using: str, key: str, payload: str, lock: datetime) -> int:
    """Put a job on django-q2's ORM queue ``key`` through the connection ``using``;
    the job's id."""
    params = JOB_INSERT.params(key=key, payload=payload, lock=lock)
    with connections[using].cursor() as cursor:
        cursor.execute(JOB_INSERT.sql, params)
        return cursor.fetchone()[0]


def postmaster_started_at() -> datetime:
    """When the database server last started."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_postmaster_start_time()")
        return cursor.fetchone()[0]


# Deliveries recorded done together (``ingest.delivery.batch``), each only if it is
# as its run read it (waiting, its attempts counted as seen): the ids recorded.
DONE_TOGETHER = Recordset(
    Delivery,
    ("pk", "outcome", "error", "page", "attempts", "claimed_at"),
    extra={"seen": "integer"},
)
_DONE_TOGETHER_SQL = (
    SQL(
        "UPDATE {table} AS t SET {state} = %s, {processed_at} = %s, "
        "{next_attempt_at} = NULL, {body} = NULL, {outcome} = v.{outcome}, "
        "{error} = v.{error}, {page} = v.{page}, {attempts} = v.{attempts}, "
        "{claimed_at} = v.{claimed_at} FROM {rows} "
        "WHERE t.{id} = v.{id} AND t.{state} IN (%s, %s) AND t.{attempts} = v.seen "
        "RETURNING t.{id}"
    )
    .format(
        table=table(Delivery),
        rows=DONE_TOGETHER.sql,
        id=column(Delivery, "pk"),
        **{
            name: column(Delivery, name)
            for name in (
                "state",
                "processed_at",
                "next_attempt_at",
                "body",
                "outcome",
                "error",
                "page",
                "attempts",
                "claimed_at",
            )
        },
    )
    .as_string()
)


@dataclass(frozen=True, slots=True)
class Settled:
    """A delivery's outcome, recorded with others'; ``seen``: its attempts as read
    by the run, ``attempts`` and ``claimed_at`` its claim's."""

    pk: int
    outcome: str
    error: str
    page: int
    seen: int
    attempts: int
    claimed_at: datetime


def deliveries_done_together(*, settled: list[Settled], at: datetime) -> set[int]:
    """Record these deliveries done at ``at`` in one statement, each only if it is
    still waiting as its run saw it: the ids recorded."""
    params: list[str | datetime] = [
        str(Delivery.State.DONE), at, DONE_TOGETHER.param(map(asdict, settled)),
        *(str(state) for state in Delivery.WAITING),
    ]  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(_DONE_TOGETHER_SQL, params)
        return {row[0] for row in cursor.fetchall()}


# The oldest waiting job of a queue that no other transaction holds, taken as a
# cluster's worker takes one: its lock moved on; and a job done (or none: NULL)
# deleted. Returns the job taken, its payload and its lock as it was.
_JOB_TAKE = (
    SQL(
        "WITH done AS (DELETE FROM {table} WHERE {id} = %s), "
        "oldest AS (SELECT {id}, {lock} FROM {table} WHERE {key} = %s "
        "AND {lock} < %s ORDER BY {id} LIMIT 1 FOR UPDATE SKIP LOCKED) "
        "UPDATE {table} AS q SET {lock} = %s FROM oldest "
        "WHERE q.{id} = oldest.{id} RETURNING q.{id}, q.{payload}, oldest.{lock}"
    )
    .format(
        table=table(OrmQ),
        id=column(OrmQ, "pk"),
        **{name: column(OrmQ, name) for name in ("key", "lock", "payload")},
    )
    .as_string()
)


def job_take(
    *, key: str, now: datetime, until: datetime, done: int | None = None
) -> tuple[int, str, datetime] | None:
    """The oldest job of queue ``key`` waiting at ``now``, its lock moved to
    ``until``: (its id, its payload, its lock before); None if none waits. The
    job ``done`` is deleted in the same statement."""
    with connection.cursor() as cursor:
        cursor.execute(_JOB_TAKE, [done, key, now, until])
        row = cursor.fetchone()
    return None if row is None else (row[0], row[1], row[2])


@contextmanager
def commits_unflushed() -> Iterator[None]:
    """The session's commits, for the block, do not wait for the write-ahead log to
    reach the disk (``synchronous_commit`` off); after it, they wait again.

    A commit so made is visible at once, and on the disk once the WAL writer has
    flushed it (within three times ``wal_writer_delay``, 600 ms by default) or any
    later commit that waits, of any session, has. A crash of PostgreSQL in between
    (of the machine, or of the server alone: a backend killed by the kernel's OOM
    killer restarts them all) loses it, with every transaction committed after
    it: the log is replayed in order.

    A delivery's run commits so from its claim to its outcome: what it writes there
    is written again by running it again, and everything that says it ran commits
    after (its outcome itself, then its job taken off the queue), so it is lost
    with them and the run comes again: its job offered again, or the sweep queuing
    a delivery left ``processing``. The commits that could not be redone wait: the
    claim, which counts the attempt that stops a delivery crashing the server
    again and again; what follows the outcome (the links of new content, pushed
    once); a paid embedding request's vectors and spend (``retrieval.indexing``),
    since running it again would pay again.
    """
    with connection.cursor() as cursor:
        cursor.execute("SET synchronous_commit = off")
    try:
        yield
    finally:
        try:
            with connection.cursor() as cursor:
                cursor.execute("RESET synchronous_commit")
        except Error:
            # The session is gone or broken: the setting must not outlive the
            # block on it (the worker's next job may be another task's).
            connection.close()
