"""Every statement of the ingest app written by hand, in one place.

The webhook stores each delivery and its job with one INSERT apiece (a repeated
delivery meets ``ON CONFLICT`` rather than a failed INSERT, and the job's model
save was a fifth of the web workers' CPU time under load); pushes, crawl hosts
and re-queued crawl URLs are written by one statement each so that concurrent
writers meet in ``ON CONFLICT`` rather than in a lost update. (The advisory locks
of runs, the sender and the planner are taken by ``kbsite.locks``.) So that a
model change breaks these in a test and not at run time, they are composed here
only: table and column names from the models' ``_meta`` through ``psycopg.sql``,
values always as parameters, every column an INSERT does not name left to its
``db_default`` (tests/kbsite/test_raw_inserts.py), and a row of several values returned
by name. Callers give values and never SQL.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import TypeVar

from django.db import connection, connections
from django_q.models import OrmQ
from psycopg.sql import SQL

from ingest.models import CrawlHost, CrawlUrl, Delivery, Push
from kbsite.sqlrows import Insert, column, table
from sources.models import Page

T = TypeVar("T")

# -- deliveries and their jobs ------------------------------------------------------

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


# -- pushes -------------------------------------------------------------------------

# A push queued for each chosen page (its id and url, in the order given) unless
# one is in flight (the condition of push_one_in_flight_per_page); the rest of the
# row is the database's defaults. Answers (queued, chosen): a page deleted since
# it was chosen is neither.
PUSHES_INSERT = Insert(
    Push,
    ("page", "url"),
    "WITH chosen AS ({chosen}), added AS ("
    "INSERT INTO {table} ({columns}) SELECT chosen.id, chosen.url FROM chosen "
    "ON CONFLICT ({page}) WHERE {state} IN ('queued', 'sent') DO NOTHING "
    "RETURNING 1) "
    "SELECT (SELECT count(*) FROM added) AS queued, "
    "(SELECT count(*) FROM chosen) AS chosen",
    chosen=SQL(
        "SELECT p.{id} AS id, p.{url} AS url "
        "FROM unnest(%s::bigint[]) WITH ORDINALITY AS v(id, i) "
        "JOIN {pages} p ON p.{id} = v.id ORDER BY v.i"
    ).format(id=column(Page, "pk"), url=column(Page, "url"), pages=table(Page)),
)


@dataclass(frozen=True)
class PushesQueued:
    queued: int  # pushes added
    chosen: int  # pages found, a push added or one in flight


def pushes_insert(*, page_ids: Sequence[int]) -> PushesQueued:
    """Queue a push for each of these pages with none in flight, in one statement,
    in their order: the first page's push is the first sent."""
    with connection.cursor() as cursor:
        cursor.execute(PUSHES_INSERT.sql, [list(page_ids)])
        return _one(cursor, PushesQueued)


def _one(cursor, row_type: type[T]) -> T:
    """The cursor's one row as ``row_type``, each value by its column's name."""
    names = [described.name for described in cursor.description]
    expected = [f.name for f in fields(row_type)]  # type: ignore[arg-type]
    if sorted(names) != sorted(expected):
        raise ValueError(f"columns {names} are not the fields {expected}")
    return row_type(**dict(zip(names, cursor.fetchone(), strict=True)))


# -- the built-in crawler -----------------------------------------------------------

# A host met for the first time; its robots.txt and delay are not known yet.
HOST_INSERT = Insert(
    CrawlHost,
    ("origin", "next_fetch_at"),
    "INSERT INTO {table} ({columns}) VALUES {values} ON CONFLICT ({origin}) DO NOTHING",
)
# A host's robots.txt, stored with the delay it asks for; a known host keeps its
# turn (and any pause).
ROBOTS_INSERT = Insert(
    CrawlHost,
    ("origin", "robots_txt", "robots_status", "robots_fetched_at", "delay",
     "next_fetch_at"),
    "INSERT INTO {table} ({columns}) VALUES {values} "
    "ON CONFLICT ({origin}) DO UPDATE SET {robots_txt} = EXCLUDED.{robots_txt}, "
    "{robots_status} = EXCLUDED.{robots_status}, "
    "{robots_fetched_at} = EXCLUDED.{robots_fetched_at}, {delay} = EXCLUDED.{delay}",
)  # fmt: skip
# Pages put into a crawl of due pages. A row done earlier in the crawl is queued
# again as if new: its result, error and attempts back to their db_default.
REQUEUE_INSERT = Insert(
    CrawlUrl,
    ("crawl", "url", "origin", "kind", "depth", "state", "not_before"),
    "INSERT INTO {table} ({columns}) VALUES {values} "
    "ON CONFLICT ({crawl}, {url}) DO UPDATE SET {state} = EXCLUDED.{state}, "
    "{result} = EXCLUDED.{result}, {error} = EXCLUDED.{error}, "
    "{attempts} = EXCLUDED.{attempts}, {not_before} = EXCLUDED.{not_before}, "
    "{done_at} = NULL, {delivery} = NULL WHERE {table}.{state} = %s",
)


def host_insert(*, origin: str, next_fetch_at: datetime) -> None:
    """A row for ``origin``, first asked at ``next_fetch_at``, unless it has one."""
    with connection.cursor() as cursor:
        cursor.execute(
            HOST_INSERT.sql,
            HOST_INSERT.params(origin=origin, next_fetch_at=next_fetch_at),
        )


def host_robots_store(
    *, origin: str, text: str, status: int, fetched_at: datetime, delay: float
) -> None:
    """The robots.txt of ``origin`` as fetched then, and the delay it asks for; a
    host met for the first time may be asked at once."""
    row = ROBOTS_INSERT.params(
        origin=origin,
        robots_txt=text,
        robots_status=status,
        robots_fetched_at=fetched_at,
        delay=delay,
        next_fetch_at=fetched_at,
    )
    with connection.cursor() as cursor:
        cursor.execute(ROBOTS_INSERT.sql, row)


def crawl_pages_requeue(
    *, crawl_id: int, origins: Mapping[str, str], not_before: datetime
) -> int:
    """Queue these URLs (each with its origin) in the crawl as pages of depth 0,
    not before then: new rows, or rows done earlier in it queued again, in one
    statement. Returns how many are now queued."""
    params = []
    for url, origin in origins.items():
        params += REQUEUE_INSERT.params(
            crawl=crawl_id, url=url, origin=origin, kind=CrawlUrl.Kind.PAGE,
            depth=0, state=CrawlUrl.State.QUEUED, not_before=not_before,
        )  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(
            REQUEUE_INSERT.statement(rows=len(origins)), [*params, CrawlUrl.State.DONE]
        )
        return cursor.rowcount
