"""The statement that queues pushes, written by hand: concurrent planners meet in
``ON CONFLICT`` rather than in a lost update. Composed as ``kbsite.sqlrows`` says:
from the models' names, with values as parameters; a row of several values is
returned by name. Callers give values, never SQL.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import TypeVar

from django.db import connection
from psycopg.sql import SQL

from ingest.pushing.models import Push
from kbsite.sqlrows import Insert, column, table
from sources.models import Page

T = TypeVar("T")


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
