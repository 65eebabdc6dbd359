"""Rows read and written by hand-written SQL, as the ORM reads and writes them.

The hot paths of a request (token authentication, a search's cited rows, the
webhook's delivery and its job, a question's log) use SQL written once, because
compiling the ORM's query took longer than running it. These helpers keep what the
ORM would have done: names quoted from ``_meta`` by ``psycopg.sql``, values only as
parameters, each field's own decoding of what it read, the fields not read
deferred, and every column an INSERT does not name filled by the database.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from functools import cache, cached_property
from typing import Generic, TypeVar
from uuid import UUID

from django.db import connection, models
from django.db.models.fields import NOT_PROVIDED, AutoFieldMixin
from psycopg.sql import SQL, Composable, Identifier, Placeholder

M = TypeVar("M", bound=models.Model)
COMMA = SQL(", ")


class Columns(Generic[M]):
    """Some fields of ``model``, read under a table alias: the SELECT list and the
    instance made from the values it read come from this one object, so the two
    cannot disagree on which value is which.

    The fields are read in the model's order, whatever order they are given in:
    ``Model.from_db`` takes the values of a partial row in that order.
    """

    def __init__(self, model: type[M], fields: Iterable[models.Field], alias: str):
        wanted = set(fields)
        concrete = model._meta.concrete_fields
        if not wanted <= set(concrete):
            raise ValueError(f"not concrete fields of {model.__name__}: {wanted}")
        self.model = model
        self.fields = tuple(f for f in concrete if f in wanted)
        self.sql = COMMA.join(Identifier(alias, _column(f)) for f in self.fields)
        self._attnames = [f.attname for f in self.fields]
        self._decoders = [getattr(f, "from_db_value", None) for f in self.fields]

    def __len__(self) -> int:
        return len(self.fields)

    def made(self, values: Sequence) -> M:
        """An instance from the values of a row read by :attr:`sql`; the model's
        other fields are deferred."""
        if len(values) != len(self.fields):
            raise ValueError(
                f"{len(values)} values for the {len(self.fields)} columns of "
                f"{self.model.__name__}"
            )
        decoded = [
            v if decode is None else decode(v, None, connection)
            for decode, v in zip(self._decoders, values, strict=True)
        ]
        return self.model.from_db(connection.alias, self._attnames, decoded)


class Row:
    """The columns of several models side by side in one SELECT list, and each
    model made from its own part of a row read by it."""

    def __init__(self, *parts: Columns):
        self.sql = COMMA.join(part.sql for part in parts)
        self._starts: dict[Columns, int] = {}
        self.width = 0
        for part in parts:
            self._starts[part] = self.width
            self.width += len(part)

    def made(self, part: Columns[M], row: Sequence) -> M:
        """The instance of ``part``'s model in a row read by :attr:`sql`."""
        if len(row) != self.width:
            raise ValueError(f"a row of {len(row)} values, not {self.width}")
        start = self._starts[part]
        return part.made(row[start : start + len(part)])


class Insert:
    """One hand-written INSERT into ``model``'s table, naming ``fields``.

    The database fills every column it does not name, so each such column has a
    ``db_default``, allows NULL, is generated, or is the automatic primary key;
    :meth:`unfilled` names those that are none of these
    (tests/kbsite/test_raw_inserts.py checks every INSERT of the project).

    The statement is ``template`` composed with ``psycopg.sql``: ``{table}``,
    ``{columns}`` (those of ``fields``, in order), ``{values}`` (a row of
    placeholders, one for each field unless ``values`` gives its SQL, taking the
    field's value as its one parameter), any field's name for its column, and
    ``parts``: other composed SQL (another table's name). :meth:`params` puts a
    row's values in the order of its columns.
    """

    def __init__(
        self,
        model: type[models.Model],
        fields: Sequence[str],
        template: str,
        *,
        values: Mapping[str, Composable] | None = None,
        **parts: Composable,
    ):
        self.model = model
        self.fields = tuple(_field(model, name) for name in fields)
        self._names = dict.fromkeys(fields).keys()
        self.template = template
        self.values = dict(values or {})
        self.parts = parts
        unknown = set(self.values) - set(fields)
        if unknown:
            raise ValueError(f"values for fields the INSERT does not name: {unknown}")

    @cached_property
    def sql(self) -> str:
        """The statement, for one row."""
        return self.statement()

    def statement(self, *, rows: int = 1, **parts: Composable) -> str:
        """The statement for ``rows`` rows, with these ``parts`` too."""
        row = COMMA.join(self.values.get(f.name, Placeholder()) for f in self.fields)
        names = {f.name: Identifier(_column(f)) for f in self._concrete()}
        composed = SQL(self.template).format(
            **names,
            table=table(self.model),
            columns=COMMA.join(Identifier(_column(f)) for f in self.fields),
            values=COMMA.join([SQL("({})").format(row)] * rows),
            **self.parts,
            **parts,
        )
        return composed.as_string()

    def params(self, **values: object) -> list:
        """The parameters of one row, from its fields' values by name."""
        if values.keys() != self._names:
            raise ValueError(
                f"values for {sorted(values)}, not for {sorted(self._names)}"
            )
        return [values[name] for name in self._names]

    def unfilled(self) -> list[str]:
        """The model's columns that this INSERT leaves to a database unable to
        fill them: a row it writes would break their NOT NULL."""
        named = set(self.fields)
        return [
            _column(f)
            for f in self._concrete()
            if f not in named
            and not f.null
            and f.db_default is NOT_PROVIDED
            and not f.generated
            and not (f.primary_key and isinstance(f, AutoFieldMixin))
        ]

    def _concrete(self) -> list[models.Field]:
        return [f for f in self.model._meta.concrete_fields if f.column]

    def __repr__(self) -> str:
        return f"<Insert into {self.model._meta.label}>"


class Recordset:
    """The values of many rows as one parameter of a statement: a JSON array read
    by ``jsonb_to_recordset`` as ``v``, one typed column per field of
    ``model`` (and per ``extra`` name, with its SQL type). The statement's text is
    the same however many rows there are, where a VALUES list or Django's
    ``bulk_update`` (a CASE per field, a WHEN per row) writes a new one each time.

    :attr:`sql` is the recordset for a FROM clause; :meth:`param`, its parameter.
    """

    def __init__(
        self,
        model: type[models.Model],
        fields: Sequence[str],
        *,
        extra: Mapping[str, str] | None = None,
    ):
        self.fields = tuple(_field(model, name) for name in fields)
        self._names = {
            name: _column(f) for name, f in zip(fields, self.fields, strict=True)
        }
        self._extra = dict(extra or {})
        typed = [
            SQL("{} {}").format(Identifier(_column(f)), SQL(_db_type(f)))
            for f in self.fields
        ] + [SQL("{} {}").format(Identifier(n), SQL(t)) for n, t in self._extra.items()]
        self.sql = SQL("jsonb_to_recordset(%s::jsonb) AS v({})").format(
            COMMA.join(typed)
        )

    def param(self, rows: Iterable[Mapping[str, object]]) -> str:
        """The parameter: each row's values by field name (and ``extra`` name)."""
        names = {**self._names, **{name: name for name in self._extra}}
        records = []
        for row in rows:
            if row.keys() != names.keys():
                raise ValueError(f"values for {sorted(row)}, not {sorted(names)}")
            records.append({names[name]: value for name, value in row.items()})
        return json.dumps(records, default=_json_value)


def rows_update(instances: Sequence[models.Model], fields: Sequence[str]) -> int:
    """Write ``fields`` of each instance (all of one model) to its row, in one
    statement whatever their number: how many rows were updated."""
    if not instances:
        return 0
    recordset, sql = _rows_update(type(instances[0]), tuple(fields))
    attnames = [f.attname for f in recordset.fields[1:]]
    rows = [
        {"pk": obj.pk}
        | {name: getattr(obj, a) for name, a in zip(fields, attnames, strict=True)}
        for obj in instances
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, [recordset.param(rows)])
        return cursor.rowcount


@cache
def _rows_update(
    model: type[models.Model], fields: tuple[str, ...]
) -> tuple[Recordset, str]:
    """The recordset of ``rows_update`` and its statement."""
    recordset = Recordset(model, ("pk", *fields))
    columns = [Identifier(_column(f)) for f in recordset.fields[1:]]
    template = SQL("UPDATE {table} AS t SET {set} FROM {rows} WHERE t.{key} = v.{key}")
    sql = template.format(
        table=table(model),
        set=COMMA.join(SQL("{c} = v.{c}").format(c=c) for c in columns),
        rows=recordset.sql,
        key=Identifier(_column(recordset.fields[0])),
    )
    return recordset, sql.as_string()


def _db_type(field: models.Field) -> str:
    db_type = field.db_type(connection)
    if db_type is None:
        raise ValueError(f"{field} has no column type")
    return db_type


def _json_value(value: object) -> object:
    """A value JSON has no type for, as PostgreSQL reads it from text."""
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, timedelta):
        return f"{value.days} days {value.seconds} seconds {value.microseconds} us"
    if isinstance(value, Decimal | UUID):
        return str(value)
    if isinstance(value, bytes | memoryview):
        raise TypeError("bytes do not travel as JSON: write them by a parameter")
    raise TypeError(f"no JSON for {type(value).__name__}")


def table(model: type[models.Model]) -> Identifier:
    """The name of ``model``'s table."""
    return Identifier(model._meta.db_table)


def column(model: type[models.Model], name: str, alias: str = "") -> Identifier:
    """The name of the column of ``model``'s field ``name`` (``pk`` for the primary
    key), under ``alias`` if given."""
    field = _field(model, name)
    return Identifier(alias, _column(field)) if alias else Identifier(_column(field))


def _field(model: type[models.Model], name: str) -> models.Field:
    field = model._meta.pk if name == "pk" else model._meta.get_field(name)
    if not isinstance(field, models.Field) or not field.column:
        raise ValueError(f"{model.__name__}.{name} has no column")
    return field


def _column(field: models.Field) -> str:
    assert field.column is not None, field
    return field.column


def many_to_many(model: type[models.Model], name: str) -> tuple[str, str, str]:
    """(table, column of ``model``'s side, column of the other side) of one of its
    many-to-many fields."""
    field = model._meta.get_field(name)
    assert isinstance(field, models.ManyToManyField)
    return field.m2m_db_table(), field.m2m_column_name(), field.m2m_reverse_name()
