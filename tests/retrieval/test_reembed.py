"""Switching the embedding model or the chunking without crawling again."""

from __future__ import annotations

from io import StringIO
from unittest import mock

from django.core.management import call_command
from django.db import connection
from django.test import override_settings

from retrieval.embeddings import get_embedder
from retrieval.models import Chunk, Embedding, EmbeddingSpace
from retrieval.questions import search_run
from retrieval.reembed import index_rebuild
from retrieval.spaces import embedding_index_name, serving_embedder
from sources.models import SYSTEM
from tests.world import HarborWorld, harbor_url

OLD = "hashing/hashing-v2/384"
NEW = "hashing/hashing-v2/256"


def index_exists(space: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM pg_indexes WHERE indexname = %s",
            [embedding_index_name(space)],
        )
        return cursor.fetchone() is not None


def top_url(query: str) -> str:
    return search_run(query=query, user=SYSTEM, k=3, log=False)[0].page.url


class ReembedTests(HarborWorld):
    def setUp(self):
        self.enterContext(override_settings(EMBEDDING_DIMENSIONS=256))

    def test_queries_are_answered_from_the_old_space_until_the_switch(self):
        steps = index_rebuild(target=get_embedder())
        for _ in range(3):
            progress = next(steps)
            assert serving_embedder().space == OLD
            assert top_url("HB-4042") == harbor_url("errors")
        assert progress.pages_done == 3

        *_, last = steps

        assert last.switched_from == OLD
        assert last.pages_done == last.pages_total == 10
        assert serving_embedder().space == NEW
        assert EmbeddingSpace.objects.get(name=OLD).state == "retired"
        assert top_url("HB-4042") == harbor_url("errors")

    def test_no_vector_of_the_old_model_is_left_in_use(self):
        list(index_rebuild(target=get_embedder()))

        assert not Embedding.objects.filter(space=OLD).exists()
        assert not index_exists(OLD) and index_exists(NEW)
        live = set(Chunk.objects.live().values_list("embed_hash", flat=True))
        new = set(
            Embedding.objects.filter(space=NEW).values_list("text_hash", flat=True)
        )
        assert live <= new

    def test_an_interrupted_rebuild_carries_on_where_it_stopped(self):
        steps = index_rebuild(target=get_embedder())
        first = [next(steps) for _ in range(4)][-1].texts_embedded
        steps.close()
        assert serving_embedder().space == OLD

        *_, rest = index_rebuild(target=get_embedder())

        total = Embedding.objects.filter(space=NEW).count()
        assert first > 0 and rest.texts_embedded == total - first
        assert serving_embedder().space == NEW

    def test_the_old_space_can_be_kept(self):
        list(index_rebuild(target=get_embedder(), keep_old=True))

        assert Embedding.objects.filter(space=OLD).exists()

    def test_the_command_shows_progress_and_a_summary(self):
        out, err = StringIO(), StringIO()

        call_command("reembed", stdout=out, stderr=err)

        assert "10/10 pages" in err.getvalue()
        assert f"{NEW} serves (switched from {OLD})" in out.getvalue()


class RechunkTests(HarborWorld):
    def test_new_chunking_is_applied_page_by_page_while_serving(self):
        before = Chunk.objects.count()
        # A smaller cap, that still leaves room after each title and heading path.
        with mock.patch("retrieval.packing.MAX_TOKENS", 40):
            *_, last = index_rebuild(target=get_embedder())

        assert last.switched_from == ""
        assert last.rechunked > 0
        assert Chunk.objects.count() > before
        assert top_url("HARBOR_MAX_WORKERS") == harbor_url("configuration")
        live = set(Chunk.objects.live().values_list("embed_hash", flat=True))
        served = set(
            Embedding.objects.filter(space=OLD).values_list("text_hash", flat=True)
        )
        assert live <= served, "every chunk has a vector in the serving space"

    def test_nothing_changed_means_nothing_to_do(self):
        *_, last = index_rebuild(target=get_embedder())

        assert (last.texts_embedded, last.rechunked, last.switched_from) == (0, 0, "")
