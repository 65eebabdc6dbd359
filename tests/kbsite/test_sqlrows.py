"""Rows read by hand-written SQL become the models the ORM would have made."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.db import connection
from django.test import TestCase
from django.test.utils import CaptureQueriesContext
from psycopg import sql

from kbsite.sqlrows import Columns, Recordset, Row, many_to_many, rows_update
from retrieval.models import EmbeddingSpace
from sources.models import Page, Source

READ = {"id", "floor_sample", "created_at"}


class ModelFromRowTests(TestCase):
    def test_values_decode_as_the_orm_decodes_them_and_the_rest_is_deferred(self):
        space = EmbeddingSpace.objects.create(
            name="test/model/8", backend="test", model="model", dimensions=8,
            state=EmbeddingSpace.State.BUILDING, floor_sample={"probes": [0.25]},
        )  # fmt: skip
        fields = [f for f in EmbeddingSpace._meta.concrete_fields if f.name in READ]
        read = Columns(EmbeddingSpace, fields, "s")
        with connection.cursor() as cursor:
            cursor.execute(
                sql.SQL("SELECT {} FROM {} s WHERE s.id = %s").format(
                    read.sql, sql.Identifier(EmbeddingSpace._meta.db_table)
                ),
                [space.pk],
            )
            made = read.made(cursor.fetchone())

        # jsonb reaches Python as text: the field's own decoding makes it a dict.
        assert made.floor_sample == {"probes": [0.25]}
        assert (made.pk, made.created_at) == (space.pk, space.created_at)
        assert not made._state.adding, "it is a row of the database"
        assert "name" in made.get_deferred_fields()
        with self.assertNumQueries(1):
            assert made.name == "test/model/8"

    def test_each_model_of_a_joined_row_is_made_from_its_own_columns(self):
        source = Source.objects.create(
            name="Harbor", seed_urls="https://docs.harbor.example/"
        )
        space = EmbeddingSpace.objects.create(
            name="test/model/8", backend="test", model="model", dimensions=8,
            state=EmbeddingSpace.State.BUILDING,
        )  # fmt: skip
        spaces = Columns(EmbeddingSpace, _fields(EmbeddingSpace, "name", "id"), "e")
        sources = Columns(Source, _fields(Source, "id", "name", "seed_urls"), "s")
        for row in [Row(spaces, sources), Row(sources, spaces)]:
            with connection.cursor() as cursor:
                cursor.execute(
                    sql.SQL(
                        "SELECT {} FROM {} e, {} s WHERE e.id = %s AND s.id = %s"
                    ).format(
                        row.sql,
                        sql.Identifier(EmbeddingSpace._meta.db_table),
                        sql.Identifier(Source._meta.db_table),
                    ),
                    [space.pk, source.pk],
                )
                values = cursor.fetchone()

            made_space, made_source = (
                row.made(spaces, values),
                row.made(sources, values),
            )
            assert (made_space.pk, made_space.name) == (space.pk, "test/model/8")
            assert (made_source.pk, made_source.name) == (source.pk, "Harbor")
            assert made_source.seed_urls == "https://docs.harbor.example/"

    def test_fields_not_of_the_model_are_refused(self):
        with self.assertRaises(ValueError):
            Columns(EmbeddingSpace, _fields(Source, "name"), "e")

    def test_a_row_of_another_width_than_its_columns_is_refused(self):
        spaces = Columns(EmbeddingSpace, _fields(EmbeddingSpace, "id", "name"), "e")
        sources = Columns(Source, _fields(Source, "id"), "s")
        row = Row(spaces, sources)

        with self.assertRaises(ValueError):
            row.made(sources, (1, "test/model/8"))  # the source's id is missing
        with self.assertRaises(ValueError):
            spaces.made((1, "test/model/8", 2))

    def test_many_to_many_names_the_table_and_both_columns(self):
        assert many_to_many(Source, "allowed_groups") == (
            "sources_source_allowed_groups", "source_id", "group_id",
        )  # fmt: skip


def _fields(model, *names):
    return [model._meta.get_field(name) for name in names]


class RowsUpdateTests(TestCase):
    """Each row set to its own values by one statement (``rows_update``)."""

    FIELDS = ["check_hours", "check_changed", "change_rate", "last_verified_at",
              "original_status", "last_error", "etag", "site_modified_at"]  # fmt: skip

    def test_each_row_gets_its_own_values_exactly_and_nothing_else_moves(self):
        source = Source.objects.create(name="Docs", seed_urls="https://d.example/")
        pages = [
            Page.objects.create(source=source, url=f"https://d.example/{n}", title=t)
            for n, t in enumerate(["one", "two", "three"])
        ]
        at = datetime(2026, 12, 7, 11, 0, 0, 123456, tzinfo=UTC)
        values = [
            ([1.5, 0.1 + 0.2], [True, False], 0.3333333333333333, at, 200,
             'a "quoted" error — ünïcode', 'W/"e1"', None),
            ([], [], None, None, None, "", "", at + timedelta(microseconds=1)),
            ([24.0], [False], 1e-12, at - timedelta(days=400), 304, "x" * 3000,
             "", at),
        ]  # fmt: skip
        for page, row in zip(pages, values, strict=True):
            for name, value in zip(self.FIELDS, row, strict=True):
                setattr(page, name, value)

        with self.assertNumQueries(1):
            assert rows_update(pages, self.FIELDS) == 3

        for page, row in zip(pages, values, strict=True):
            read = Page.objects.get(pk=page.pk)
            assert [getattr(read, name) for name in self.FIELDS] == list(row)
            assert read.title == page.title and read.url == page.url

    def test_durations_keep_their_microseconds(self):
        source = Source.objects.create(name="Docs", seed_urls="https://d.example/")
        every = [
            timedelta(microseconds=1), timedelta(microseconds=50),
            timedelta(days=400, seconds=3, microseconds=7), None,
        ]  # fmt: skip
        pages = []
        for n, value in enumerate(every):
            page = Page.objects.create(source=source, url=f"https://d.example/{n}")
            page.recrawl_every = value
            pages.append(page)

        assert rows_update(pages, ["recrawl_every"]) == len(every)

        read = [Page.objects.get(pk=p.pk).recrawl_every for p in pages]
        assert read == every

    def test_the_statement_is_the_same_for_any_number_of_rows(self):
        source = Source.objects.create(name="Docs", seed_urls="https://d.example/")
        pages = [
            Page.objects.create(source=source, url=f"https://d.example/{n}")
            for n in range(4)
        ]
        statements = []
        for some in (pages[:1], pages):
            with CaptureQueriesContext(connection) as queries:
                rows_update(some, ["etag"])
            statements.append(queries[0]["sql"].split(" FROM ")[0])
        assert statements[0] == statements[1]
        assert rows_update([], ["etag"]) == 0

    def test_a_row_must_name_every_column_and_bytes_do_not_travel_as_json(self):
        rows = Recordset(Page, ["pk", "etag"])
        with self.assertRaises(ValueError):
            rows.param([{"pk": 1}])
        with self.assertRaises(TypeError):
            Recordset(Page, ["pk", "raw_body"]).param([{"pk": 1, "raw_body": b"x"}])
        assert rows.param([{"pk": 1, "etag": "e"}]) == '[{"id": 1, "etag": "e"}]'
