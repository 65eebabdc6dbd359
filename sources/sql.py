"""The sources app's statements written by hand, but the rule of who sees what.

A page's boilerplate counts go up in one statement, so that two pages adding the
same shape lose no update; a day's plan re-times a source's pages in one
statement, under the source's advisory lock (``kbsite.locks``). So that a model
change breaks these in a test and not at run time, they are composed here only:
table and column names from the models' ``_meta`` through ``psycopg.sql``, values
always as parameters, and every column an INSERT does not name left to its
``db_default`` (tests/kbsite/test_raw_inserts.py). Callers give values and never SQL.

The rule of who sees which source has its own module (``sources.access``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache

from django.db import connection
from psycopg.sql import SQL

from kbsite.sqlrows import Insert, column, table
from sources.models import LineShape, Page, Source

# -- boilerplate counts -------------------------------------------------------------

# One page more with each of these shapes: one statement, and no lost update when
# two pages add the same shape at once.
SHAPES_INSERT = Insert(
    LineShape,
    ("source", "shape", "pages", "example"),
    "INSERT INTO {table} ({columns}) VALUES {values} "
    "ON CONFLICT ({source}, {shape}) DO UPDATE SET {pages} = {table}.{pages} + 1",
)


def line_shapes_count_up(*, source_id: int, examples: Mapping[int, str]) -> None:
    """One page more of the source with each of these shapes (shape → an example
    line, kept for a shape the source did not have)."""
    params = []
    for shape in sorted(examples):  # locks taken in shape order: no deadlocks
        params += SHAPES_INSERT.params(
            source=source_id, shape=shape, pages=1, example=examples[shape]
        )
    with connection.cursor() as cursor:
        cursor.execute(SHAPES_INSERT.statement(rows=len(examples)), params)


@dataclass(frozen=True)
class CommonShapes:
    """A source's line shapes on enough of its live pages to be boilerplate, and
    how many live pages it had when they were counted."""

    shapes: frozenset[int]
    live: int


def common_shapes_count(
    *, source_id: int, min_pages: int, min_share: int, keep_share: int
) -> CommonShapes:
    """The source's shapes on at least ``min_pages`` pages and ``min_share`` % of its
    live pages (``keep_share`` % for a shape its stored set strips already), with
    the live pages, in one statement: the shares are of the pages it counted."""
    with connection.cursor() as cursor:
        cursor.execute(
            _common_shapes(),
            {
                "source": source_id,
                "live": Page.Status.LIVE.value,
                "min_pages": min_pages,
                "min_share": min_share,
                "keep_share": keep_share,
            },
        )
        row = cursor.fetchone()
    if row is None:  # the source was deleted meanwhile: nothing is its boilerplate
        return CommonShapes(shapes=frozenset(), live=0)
    live, shapes = row
    return CommonShapes(shapes=frozenset(shapes), live=live)


@cache
def _common_shapes() -> str:
    return (
        SQL(
            "SELECT counted.live, ARRAY("
            " SELECT s.{shape} FROM {shapes} s"
            " WHERE s.{shape_source} = %(source)s AND s.{pages} >= %(min_pages)s"
            " AND s.{pages} * 100 >= counted.live * CASE"
            " WHEN s.{shape} = ANY(src.{common}) THEN %(keep_share)s"
            " ELSE %(min_share)s END) "
            "FROM {sources} src, (SELECT count(*) AS live FROM {page_table}"
            " WHERE {page_source} = %(source)s AND {status} = %(live)s) counted "
            "WHERE src.{id} = %(source)s"
        )
        .format(
            shape=column(LineShape, "shape"),
            shapes=table(LineShape),
            shape_source=column(LineShape, "source"),
            pages=column(LineShape, "pages"),
            common=column(Source, "common_shapes"),
            sources=table(Source),
            page_table=table(Page),
            page_source=column(Page, "source"),
            status=column(Page, "status"),
            id=column(Source, "pk"),
        )
        .as_string()
    )


# -- near-duplicates ----------------------------------------------------------------


def near_duplicate_candidates(
    *, page_id: int | None, source_id: int, bands: Sequence[int], limit: int
) -> list[tuple[int, bytes | None]]:
    """(id, signature) of up to ``limit`` other live pages of the source sharing a
    band with ``bands``, by URL.

    The pages sharing a band are found first, by the bands' index, and only then
    ordered and cut; only the ones kept have their signatures read (a site of many
    identical pages makes many candidates). Asked as one query with its LIMIT,
    the planner walks the URL index in order and tests every page's bands,
    expecting to meet a few hundred matches early; a new page usually has none,
    so it read the whole source (55 ms a page at 100,000 pages, against under a
    millisecond by the index)."""
    with connection.cursor() as cursor:
        cursor.execute(
            _near_duplicate_candidates(),
            {
                "bands": list(bands),
                "source": source_id,
                "live": Page.Status.LIVE.value,
                "page": page_id or 0,  # ids start at 1
                "limit": limit,
            },
        )
        return [(pk, None if sig is None else bytes(sig)) for pk, sig in cursor]


@cache
def _near_duplicate_candidates() -> str:
    return (
        SQL(
            "WITH sharing AS MATERIALIZED ("
            " SELECT {id}, {url} FROM {pages}"
            " WHERE {bands} && %(bands)s::bigint[] AND {source} = %(source)s"
            " AND {status} = %(live)s AND {id} <> %(page)s), "
            "cut AS (SELECT {id}, {url} FROM sharing ORDER BY {url} LIMIT %(limit)s) "
            "SELECT p.{id}, p.{minhash} FROM cut JOIN {pages} p ON p.{id} = cut.{id} "
            "ORDER BY cut.{url}"
        )
        .format(
            id=column(Page, "pk"),
            minhash=column(Page, "minhash"),
            url=column(Page, "url"),
            pages=table(Page),
            bands=column(Page, "minhash_bands"),
            source=column(Page, "source"),
            status=column(Page, "status"),
        )
        .as_string()
    )


# -- schedules ----------------------------------------------------------------------


def pages_next_crawl_set(*, ids: Sequence[int], due: Sequence[datetime]) -> int:
    """Page ``ids[i]`` due at ``due[i]``, for each i, in one statement; returns how
    many pages were found."""
    with connection.cursor() as cursor:
        cursor.execute(_next_crawl_update(), [list(ids), list(due)])
        return cursor.rowcount


@cache
def _next_crawl_update() -> str:
    return (
        SQL(
            "UPDATE {pages} p SET {next_crawl_at} = v.due "
            "FROM unnest(%s::bigint[], %s::timestamptz[]) AS v(id, due) "
            "WHERE p.{id} = v.id"
        )
        .format(
            pages=table(Page),
            next_crawl_at=column(Page, "next_crawl_at"),
            id=column(Page, "pk"),
        )
        .as_string()
    )
