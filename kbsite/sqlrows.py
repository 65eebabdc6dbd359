"""Rows read by hand-written SQL, made into models as the ORM makes them.

The hot paths of a request (token authentication, a search's cited rows) read their
rows with SQL written once, because compiling the ORM's query took longer than
running it. These helpers keep what the ORM would have done: quoted column names,
each field's own decoding of its value, and the fields not read deferred.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from django.db import connection, models

M = TypeVar("M", bound=models.Model)


def column(field: models.Field, alias: str) -> str:
    """``alias."column"`` of a concrete field."""
    assert field.column is not None
    return f"{alias}.{connection.ops.quote_name(field.column)}"


def columns(fields: Sequence[models.Field], alias: str) -> str:
    """``alias."column", …`` for these fields, in their order."""
    return ", ".join(column(f, alias) for f in fields)


def model_from_row(model: type[M], fields: Sequence[models.Field], values) -> M:
    """An instance of ``model`` from the values of these fields (as read by
    :func:`columns`); the model's other fields are deferred."""
    decoded = [
        f.from_db_value(v, None, connection) if hasattr(f, "from_db_value") else v
        for f, v in zip(fields, values, strict=True)
    ]
    return model.from_db(connection.alias, [f.attname for f in fields], decoded)


def many_to_many(model: type[models.Model], name: str) -> tuple[str, str, str]:
    """(table, column of ``model``'s side, column of the other side) of one of its
    many-to-many fields."""
    field = model._meta.get_field(name)
    assert isinstance(field, models.ManyToManyField)
    return field.m2m_db_table(), field.m2m_column_name(), field.m2m_reverse_name()
