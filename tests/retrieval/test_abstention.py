"""Abstention with no hand calibration: each embedding space learns its floor from
the index, lexical evidence needs the question's rare words, and both hold for a
model the product has never seen."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.test import TestCase, override_settings

from retrieval.embeddings import get_embedder
from retrieval.evaluation import golden_load, golden_run, metrics
from retrieval.evidence import LEXICAL_COVERAGE, evidence_weigh
from retrieval.keywords import QueryTerms, Term
from retrieval.models import EmbeddingSpace, IndexStatistics, Lexeme
from retrieval.reembed import index_rebuild
from retrieval.search import chunks_search
from retrieval.spaces import space_register, space_serving, space_switch
from retrieval.statistics import index_statistics_refresh, probe_questions
from sources.models import SYSTEM
from tests.fakes.openai_api import FakeOpenAI, local_model_vectors
from tests.world import FIXTURES, HarborWorld, harbor_url

GOLDEN = FIXTURES / "golden.jsonl"


def terms(*pairs: tuple[str, int, float]) -> QueryTerms:
    return QueryTerms(terms=[Term(*pair) for pair in pairs], total=10_000)


class LexicalEvidenceTests(TestCase):
    def test_common_words_do_not_make_up_for_a_rare_word_nobody_holds(self):
        question = terms(("replication", 800, 2.5), ("auth", 600, 2.8),
                         ("aurora", 0, 9.9))  # fmt: skip

        common_only = evidence_weigh(similarity=0.0, floor=None, terms=question,
                                     matched=[0b011])  # fmt: skip
        with_rare = evidence_weigh(similarity=0.0, floor=None, terms=question,
                                   matched=[0b111])  # fmt: skip

        assert common_only.held < LEXICAL_COVERAGE and not common_only.enough
        assert with_rare.lexical and with_rare.enough

    def test_a_close_enough_vector_is_evidence_alone(self):
        question = terms(("aurora", 0, 9.9))

        assert evidence_weigh(similarity=0.5, floor=0.4, terms=question,
                              matched=[]).enough  # fmt: skip
        assert not evidence_weigh(similarity=0.3, floor=0.4, terms=question,
                                  matched=[]).enough  # fmt: skip
        assert not evidence_weigh(
            similarity=0.9, floor=None, terms=question, matched=[]
        ).vector, "no floor learned: no vectors"


class LearnedStatisticsTests(HarborWorld):
    def test_the_index_learns_its_word_counts_and_floor(self):
        space = space_serving()
        stats = IndexStatistics.objects.get()

        assert stats.chunks > 20 and stats.refreshed_at
        assert Lexeme.objects.get(word="queue").chunks >= 3
        assert space.floor is None, "hashed words: lexical evidence decides"
        assert space.floor_sample["probes"] == 200
        assert 0.0 < space.floor_sample["quantiles"]["0.5"] < 1.0
        assert space.floor_chunks == stats.chunks

    def test_probe_questions_mix_words_of_different_chunks(self):
        probes = probe_questions(20)

        assert len(probes) == 20 and len(set(probes)) > 15
        assert all(2 <= len(p.split()) <= 4 for p in probes)

    def test_it_is_refreshed_only_when_the_index_moved(self):
        learned_at = space_serving().floor_learned_at

        assert index_statistics_refresh() is None, "nothing moved"
        for n in range(6):
            self.ingest(harbor_url(f"extra-{n}"),
                        f"# Extra {n}\n\n## Part\n\nMore text number {n}.\n",
                        content_type="text/markdown")  # fmt: skip
        refresh = index_statistics_refresh()

        assert (
            refresh is not None
            and refresh.chunks == IndexStatistics.objects.get().chunks
        )
        assert space_serving().floor_learned_at > learned_at

    def test_a_serving_model_out_of_reach_keeps_its_floor_and_migrate_works(self):
        api = self.enterContext(FakeOpenAI())
        with override_settings(
            EMBEDDING_BACKEND="openai",
            EMBEDDING_DIMENSIONS=64,
            OPENAI_API_KEY="sk-test",
            OPENAI_BASE_URL=api.base_url,
        ):
            embedder = get_embedder()
            space = space_register(name=embedder.space, dimensions=64)
            space_switch(to=space, keep_old=True)
        EmbeddingSpace.objects.filter(pk=space.pk).update(floor=0.42)

        # This process has no key for the space that serves, as after a deploy
        # that forgot OPENAI_API_KEY: the counts are refreshed, the floor stays.
        with self.assertLogs("retrieval.statistics", "WARNING") as logs:
            refresh = index_statistics_refresh(force=True)
            call_command("migrate", verbosity=0, stdout=StringIO())

        assert refresh is not None and refresh.floors == {space.name: 0.42}
        assert f"floor of {space.name} not learned" in logs.output[0]
        assert EmbeddingSpace.objects.get(pk=space.pk).floor == 0.42

    def test_the_periodic_job_is_scheduled(self):
        from django_q.models import Schedule

        call_command("migrate", verbosity=0, stdout=StringIO())

        job = Schedule.objects.get(name="retrieval: refresh index statistics")
        assert job.func == "retrieval.tasks.index_statistics_refresh_task"


@pytest.mark.slow
class SemanticModelTests(HarborWorld):
    """The local model, and the same vectors from an API under a name the product
    has never seen: neither needs a floor set by hand."""

    def evaluate(self) -> dict:
        outcomes = [golden_run(item, k=5, user=SYSTEM) for item in golden_load(GOLDEN)]
        return metrics(outcomes)

    def switch(self, **settings) -> EmbeddingSpace:
        self.enterContext(override_settings(RELEVANCE_FLOOR=None, **settings))
        *_, done = index_rebuild(target=get_embedder())
        assert done.switched_from
        space = space_serving()
        assert space is not None and space.name == get_embedder().space
        return space

    def test_the_local_model_learns_its_floor_and_abstains_honestly(self):
        space = self.switch(
            EMBEDDING_BACKEND="local",
            EMBEDDING_MODEL="all-MiniLM-L6-v2",
            EMBEDDING_DIMENSIONS=384,
        )

        report = self.evaluate()

        assert space.floor is not None
        assert report["abstention_precision"] >= 0.8
        assert report["abstention_recall"] >= 0.8
        assert report["recall@5"] >= 0.9

    def test_an_unseen_model_behind_an_openai_api_needs_no_floor_either(self):
        api = self.enterContext(FakeOpenAI(vectors=local_model_vectors()))
        space = self.switch(
            EMBEDDING_BACKEND="openai", EMBEDDING_MODEL="acme-embed-1",
            EMBEDDING_DIMENSIONS=384, OPENAI_API_KEY="sk-test",
            OPENAI_BASE_URL=api.base_url,
        )  # fmt: skip

        report = self.evaluate()
        tungsten = chunks_search(query="What is the boiling point of tungsten?",
                                 user=SYSTEM, k=5)  # fmt: skip

        assert space.name == "openai/acme-embed-1/384" and space.floor is not None
        assert report["abstention_precision"] >= 0.8
        assert report["abstention_recall"] >= 0.8
        assert tungsten.abstained and tungsten.evidence.similarity < space.floor
