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
from datetime import datetime
from functools import cache

from django.db import connection
from psycopg.sql import SQL

from kbsite.sqlrows import Insert, column, table
from sources.models import LineShape, Page

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
