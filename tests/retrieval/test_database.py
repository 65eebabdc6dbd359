from __future__ import annotations

import random

import pytest
from django.conf import settings
from django.db import connection, connections, transaction
from django.test import TestCase, override_settings

from retrieval.embeddings import get_embedder
from retrieval.models import Chunk, Embedding
from retrieval.searchable import searchable_chunks
from retrieval.spaces import (
    embedding_index_drop,
    embedding_index_ensure,
    embedding_index_name,
    index_build_memory,
)
from retrieval.sql import nearest_statement
from sources.models import SYSTEM, Page, Source


def fetch(sql: str, params: list | None = None) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params or [])
        return cursor.fetchall()


def index_definition(name: str) -> str:
    rows = fetch("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [name])
    assert rows, f"index {name} does not exist"
    return rows[0][0]


class SchemaTests(TestCase):
    def test_every_connection_searches_the_hnsw_index_with_the_breadth_set(self):
        assert fetch("SHOW hnsw.ef_search") == [(str(settings.SEARCH_HNSW_EF),)]

    def test_a_new_session_takes_the_breadth_the_setting_gives(self):
        other = connections.create_connection("default")
        try:
            with override_settings(SEARCH_HNSW_EF=57):
                other.ensure_connection()
            with other.cursor() as cursor:
                cursor.execute("SHOW hnsw.ef_search")
                assert cursor.fetchone() == ("57",)
        finally:
            other.close()

    def test_the_throttle_and_cache_tables_are_unlogged(self):
        for table in ["kb_throttle", settings.CACHES["default"]["LOCATION"]]:
            rows = fetch(
                "SELECT relpersistence FROM pg_class WHERE relname = %s", [table]
            )
            assert rows == [("u",)], table

    def test_the_vector_extension_is_installed(self):
        rows = fetch("SELECT extversion FROM pg_extension WHERE extname = 'vector'")

        assert len(rows) == 1
        major, minor = (int(part) for part in rows[0][0].split(".")[:2])
        assert (major, minor) >= (0, 8)

    def test_the_active_embedding_space_has_an_hnsw_cosine_index(self):
        space = get_embedder().space
        definition = index_definition(embedding_index_name(space))

        assert "USING hnsw" in definition
        assert "halfvec_cosine_ops" in definition
        assert f"::halfvec({get_embedder().dimensions})" in definition
        assert space in definition

    def test_chunk_text_has_a_stored_tsvector_with_a_gin_index(self):
        definition = index_definition("chunk_search_document_idx")
        (expression,) = fetch(
            "SELECT generation_expression FROM information_schema.columns "
            "WHERE table_name = 'retrieval_chunk' AND column_name = 'search_document'"
        )[0]

        assert "USING gin (search_document)" in definition
        assert "to_tsvector('english'::regconfig" in expression

    def test_freshness_lives_on_pages_and_not_on_vector_rows(self):
        page_columns = {f.column for f in Page._meta.fields}
        vector_columns = {f.column for f in Embedding._meta.fields}

        assert {"last_verified_at", "last_changed_at"} <= page_columns
        assert not {"last_verified_at", "last_changed_at"} & vector_columns

    def test_vectors_are_unique_per_space_text_hash_and_window(self):
        definition = index_definition("embedding_space_hash_window_uniq")

        assert "UNIQUE" in definition
        assert '(space, text_hash, "window")' in definition

    def test_the_query_search_runs_uses_the_hnsw_index(self):
        embedder = get_embedder()
        texts = [
            f"page {n} about topic {n % 7} and setting {n % 11}" for n in range(300)
        ]
        Embedding.objects.bulk_create(
            Embedding(space=embedder.space, text_hash=f"{n:064x}", vector=vector)
            for n, vector in enumerate(embedder.embed(texts))
        )
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE retrieval_embedding")
        probe = embedder.embed(["how do I install it"])[0]
        with transaction.atomic(), connection.cursor() as cursor:
            # A table this small is cheaper to scan and sort: ask whether the index
            # can serve the query as written (same cast, same space filter, its
            # order), not whether it pays at this size.
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("SET LOCAL enable_sort = off")
            sql, params = nearest_statement(
                embedder.space,
                embedder.dimensions,
                probe,
                limit=10,
                searchable=searchable_chunks(SYSTEM),
            )
            cursor.execute(f"EXPLAIN {sql}", params)
            plan = "\n".join(row[0] for row in cursor.fetchall())

        assert embedding_index_name(embedder.space) in plan

    def test_ensuring_an_index_twice_is_harmless(self):
        first = embedding_index_ensure(space="test/other/8", dimensions=8)
        second = embedding_index_ensure(space="test/other/8", dimensions=8)

        assert first == second
        assert "::halfvec(8)" in index_definition(first)

    def test_a_space_of_more_than_2000_dimensions_gets_its_index(self):
        # text-embedding-3-large's 3,072: over HNSW's 2,000 for single precision.
        name = embedding_index_ensure(space="openai/large/3072", dimensions=3072)

        assert "::halfvec(3072)" in index_definition(name)


@pytest.mark.slow  # HNSW indexes of 3,000 vectors
class IndexBuildMemoryTests(TestCase):
    SPACE = "test/build-memory/64"

    @classmethod
    def setUpTestData(cls):
        rng = random.Random(5)
        Embedding.objects.bulk_create(
            Embedding(space=cls.SPACE, text_hash=f"{n:064x}",
                      vector=[rng.uniform(-1, 1) for _ in range(64)])
            for n in range(3000)
        )  # fmt: skip

    def notices_of_a_build(self) -> list[str]:
        notices: list[str] = []

        def heard(diagnostic) -> None:
            notices.append(diagnostic.message_primary)

        connection.ensure_connection()
        connection.connection.add_notice_handler(heard)
        try:
            embedding_index_ensure(space=self.SPACE, dimensions=64)
        finally:
            connection.connection.remove_notice_handler(heard)
        return notices

    def test_an_index_is_built_in_the_memory_the_setting_gives(self):
        # pgvector says when the graph outgrows maintenance_work_mem: 3,000
        # vectors do at 1MB, not at the default setting's 1GB.
        with override_settings(INDEX_BUILD_MEMORY="1MB"):
            small = self.notices_of_a_build()
        embedding_index_drop(space=self.SPACE)
        large = self.notices_of_a_build()

        assert any("maintenance_work_mem" in notice for notice in small), small
        assert not any("maintenance_work_mem" in notice for notice in large), large

    def test_the_session_gets_its_own_memory_back_after_a_build(self):
        before = fetch("SHOW maintenance_work_mem")
        with connection.cursor() as cursor:
            with override_settings(INDEX_BUILD_MEMORY="300MB"):
                with index_build_memory(cursor):
                    assert fetch("SHOW maintenance_work_mem") == [("300MB",)]

        assert fetch("SHOW maintenance_work_mem") == before != [("300MB",)]


class VectorRoundTripTests(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.source = Source.objects.create(name="Example docs")
        cls.page = Page.objects.create(
            source=cls.source, url="https://docs.example.com/install/", title="Install"
        )

    def test_a_page_with_chunks_round_trips_its_vectors(self):
        embedder = get_embedder()
        texts = ["Install with pip install example.", "Configure EXAMPLE_HOME first."]
        vectors = embedder.embed(texts)
        for position, (text, vector) in enumerate(zip(texts, vectors, strict=True)):
            digest = f"{position:064x}"
            Chunk.objects.create(
                page=self.page, position=position, text=text, embed_hash=digest
            )
            Embedding.objects.create(
                space=embedder.space, text_hash=digest, vector=vector
            )

        chunks = list(self.page.chunks.order_by("position"))
        stored = dict(
            Embedding.objects.filter(
                space=embedder.space, text_hash__in=[c.embed_hash for c in chunks]
            ).values_list("text_hash", "vector")
        )

        assert [c.text for c in chunks] == texts
        for chunk, vector in zip(chunks, vectors, strict=True):
            got = stored[chunk.embed_hash]
            assert len(got) == embedder.dimensions
            assert max(abs(a - b) for a, b in zip(got, vector, strict=True)) < 1e-6

    def test_deleting_a_page_removes_its_chunks(self):
        Chunk.objects.create(page=self.page, position=0, text="x", embed_hash="0" * 64)

        self.page.delete()

        assert not Chunk.objects.exists()
