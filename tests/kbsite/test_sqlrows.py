"""Rows read by hand-written SQL become the models the ORM would have made."""

from __future__ import annotations

from django.db import connection
from django.test import TestCase
from psycopg import sql

from kbsite.sqlrows import Columns, Row, many_to_many
from retrieval.models import EmbeddingSpace
from sources.models import Source

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
