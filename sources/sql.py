"""Every statement of the sources app written by hand, in one place.

Who may see which source is one SELECT that the admin's querysets and a search
both run (a search counting the public sources too), so that the two cannot
disagree; a page's boilerplate counts go up in one statement, so that two pages
adding the same shape lose no update; a day's plan re-times a source's pages in
one statement, under the source's advisory lock (``kbsite.locks``). So that a
model change breaks these in a test and not at run time, they are composed here
only: table and column names from the models' ``_meta`` through ``psycopg.sql``,
values always as parameters, and every column an INSERT does not name left to its
``db_default`` (tests/test_raw_inserts.py). Callers give values and never SQL.

``sources.models`` reads this module inside its functions, not at import: the
statements are composed from its models.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import cache

from django.contrib.auth import get_user_model
from django.db import connection
from psycopg.sql import SQL, Composable, Composed, Identifier

from kbsite.sqlrows import Insert, column, many_to_many, table
from sources.models import Caller, LineShape, Page, Source, caller_check

# -- who sees which source ----------------------------------------------------------


def visible_source_ids_select(*, user: Caller, public: bool) -> tuple[str, list]:
    """SELECT of the ids of the sources ``user`` (not a superuser) may see, with
    its parameters: ``public`` for whose text they may read (public sources
    count), else which they manage in the admin. ``SourceQuerySet`` takes it as a
    subquery."""
    params = _member(user)
    return _visible_statement(bool(params), public, ordered=False), params


def visible_source_ids(*, user: Caller, public: bool) -> list[int]:
    """The ids of the sources ``user`` (not a superuser) may see, in order."""
    params = _member(user)
    with connection.cursor() as cursor:
        cursor.execute(_visible_statement(bool(params), public, ordered=True), params)
        return [row[0] for row in cursor.fetchall()]


def _member(user: Caller) -> list:
    """The parameters of the SELECT: a signed-in user's id, as a member of groups;
    none for an anonymous visitor (and for the system, which never gets here: it
    sees every source). No caller at all is a TypeError."""
    if caller_check(user).is_authenticated:
        return [user.pk]
    return []


@cache
def _visible_statement(member: bool, public: bool, *, ordered: bool) -> str:
    statement = _visible(member, public)
    if ordered:
        statement = SQL("{} ORDER BY 1").format(statement)
    return statement.as_string()


def _visible(member: bool, public: bool) -> Composed:
    """The one definition of who sees what. A ``member`` (a signed-in user, whose
    id is the one parameter) sees the sources with no allowed groups and those of
    their groups; with ``public``, everyone sees the public sources too. So an
    anonymous reader sees the public sources and nothing else, and no source for
    the admin."""
    conditions: list[Composable] = []
    if public:
        conditions.append(column(Source, "public", "s"))
    if member:
        conditions += _open_or_in_a_group()
    condition = SQL(" OR ").join(conditions) if conditions else SQL("FALSE")
    return SQL("SELECT {} FROM {} s WHERE ({})").format(
        column(Source, "pk", "s"), table(Source), condition
    )


def _open_or_in_a_group() -> list[Composable]:
    """A signed-in user's sources: those with no allowed groups, and those of the
    groups of the user whose id is the statement's parameter."""
    allowed, source, group = many_to_many(Source, "allowed_groups")
    membership, user, member_group = many_to_many(get_user_model(), "groups")
    source_id = column(Source, "pk", "s")
    open_to_all = SQL("{} NOT IN (SELECT {} FROM {})").format(
        source_id, Identifier(source), Identifier(allowed)
    )
    in_a_group = SQL(
        "{} IN (SELECT {} FROM {} a JOIN {} m ON {} = {} WHERE {} = %s)"
    ).format(
        source_id,
        Identifier("a", source),
        Identifier(allowed),
        Identifier(membership),
        Identifier("m", member_group),
        Identifier("a", group),
        Identifier("m", user),
    )
    return [open_to_all, in_a_group]


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
