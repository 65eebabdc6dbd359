"""Who sees which source: the one statement of the rule.

The admin's querysets and a search both read through it (``SourceQuerySet``'s
``visible_to`` and ``searchable_by``, ``source_ids_searchable_by``), a search
counting the public sources too, so that the two cannot disagree. The statement is
composed as the app's others are (``sources.sql``): table and column names from
the models' ``_meta`` through ``psycopg.sql``, the member's id as a parameter.

``sources.models`` reads this module, so this module imports no model module:
the source and user models are looked up in the app registry when the statement
is first composed. Which caller gets here is ``sources.models``' to decide (the
system and superusers see every source without a query; no caller is refused
there); this module knows only a signed-in member's id, or none.
"""

from __future__ import annotations

from functools import cache

from django.apps import apps
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Model
from psycopg.sql import SQL, Composable, Composed, Identifier

from kbsite.sqlrows import column, many_to_many, table


def visible_source_ids_select(
    *, member_id: int | None, public: bool
) -> tuple[str, list]:
    """SELECT of the ids of the sources the member ``member_id`` (None: a visitor
    who is not signed in) may see, with its parameters: ``public`` for whose text
    they may read (public sources count), else which they manage in the admin.
    ``SourceQuerySet`` takes it as a subquery."""
    params = _params(member_id)
    return _visible_statement(bool(params), public, ordered=False), params


def visible_source_ids(*, member_id: int | None, public: bool) -> list[int]:
    """The ids of the sources the member ``member_id`` (None: a visitor who is not
    signed in) may see, in order."""
    params = _params(member_id)
    with connection.cursor() as cursor:
        cursor.execute(_visible_statement(bool(params), public, ordered=True), params)
        return [row[0] for row in cursor.fetchall()]


def _params(member_id: int | None) -> list[int]:
    return [] if member_id is None else [member_id]


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
    source = apps.get_model("sources", "Source")
    conditions: list[Composable] = []
    if public:
        conditions.append(column(source, "public", "s"))
    if member:
        conditions += _open_or_in_a_group(source)
    condition = SQL(" OR ").join(conditions) if conditions else SQL("FALSE")
    return SQL("SELECT {} FROM {} s WHERE ({})").format(
        column(source, "pk", "s"), table(source), condition
    )


def _open_or_in_a_group(source: type[Model]) -> list[Composable]:
    """A signed-in user's sources: those with no allowed groups, and those of the
    groups of the user whose id is the statement's parameter."""
    allowed, source_column, group = many_to_many(source, "allowed_groups")
    membership, user, member_group = many_to_many(get_user_model(), "groups")
    source_id = column(source, "pk", "s")
    open_to_all = SQL("{} NOT IN (SELECT {} FROM {})").format(
        source_id, Identifier(source_column), Identifier(allowed)
    )
    in_a_group = SQL(
        "{} IN (SELECT {} FROM {} a JOIN {} m ON {} = {} WHERE {} = %s)"
    ).format(
        source_id,
        Identifier("a", source_column),
        Identifier(allowed),
        Identifier(membership),
        Identifier("m", member_group),
        Identifier("a", group),
        Identifier("m", user),
    )
    return [open_to_all, in_a_group]
