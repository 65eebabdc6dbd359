"""The built-in crawler's statements written by hand: crawl hosts and re-queued
crawl URLs are written by one statement each, so that concurrent workers meet in
``ON CONFLICT`` rather than in a lost update. Composed as ``kbsite.sqlrows`` says:
from the models' names, with values as parameters; callers give values, never SQL.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from django.db import connection

from ingest.crawl.models import CrawlHost, CrawlUrl
from kbsite.sqlrows import Insert

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
