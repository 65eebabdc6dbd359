"""Rows read by hand-written SQL become the models the ORM would have made."""

from __future__ import annotations

from django.db import connection
from django.test import TestCase

from kbsite.sqlrows import columns, many_to_many, model_from_row
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
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {columns(fields, 's')} FROM "
                f"{EmbeddingSpace._meta.db_table} s WHERE s.id = %s",
                [space.pk],
            )
            made = model_from_row(EmbeddingSpace, fields, cursor.fetchone())

        # jsonb reaches Python as text: the field's own decoding makes it a dict.
        assert made.floor_sample == {"probes": [0.25]}
        assert (made.pk, made.created_at) == (space.pk, space.created_at)
        assert not made._state.adding, "it is a row of the database"
        assert "name" in made.get_deferred_fields()
        with self.assertNumQueries(1):
            assert made.name == "test/model/8"

    def test_many_to_many_names_the_table_and_both_columns(self):
        assert many_to_many(Source, "allowed_groups") == (
            "sources_source_allowed_groups", "source_id", "group_id",
        )  # fmt: skip
