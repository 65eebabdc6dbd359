"""Search ranks, answers abstain; a narrower scope never abstains more.

The search lists its best results whether or not they are evidence enough to
answer from, and says of each whether it is (``confident``). The answer decides:
it abstains and cites nothing. A question asked within one source (as the widget
asks) answers wherever the same question over the whole index answers from that
source's pages.
"""

from __future__ import annotations

from django.contrib.auth.models import User
from rest_framework.test import APIClient

from retrieval.answer import NO_EVIDENCE, never_named
from retrieval.questions import question_answer, search_run
from retrieval.search import SearchMode, _search, chunks_search
from retrieval.searchable import SearchFilters
from sources.models import SYSTEM, Page, Source
from tests.world import HarborWorld, harbor_url, ingest_markdowns

OFF_TOPIC = "What is the boiling point of tungsten?"
# "throttle" is in four release notes of another product and nowhere in Harbor's
# docs: too many chunks for a word of the question's own, and most of its weight.
THROTTLE = "How do I throttle the workers of a queue?"
HARBOR_QUEUES = harbor_url("queues")


class SearchRanksTests(HarborWorld):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.reader = User.objects.create_user("reader", password="a long password 1")

    def test_every_entry_point_lists_results_where_the_answer_abstains(self):
        client = APIClient()
        client.force_authenticate(self.reader)
        searched = client.get("/api/search/", {"q": OFF_TOPIC}).json()["results"]
        asked = client.post("/api/query/", {"question": OFF_TOPIC}, format="json")
        table = [
            ("search_run", [c.confident for c in search_run(
                query=OFF_TOPIC, user=self.reader, k=5, log=False)]),
            ("chunks_search", [h.confident for h in chunks_search(
                query=OFF_TOPIC, user=self.reader, k=5).hits]),
            ("GET /api/search/", [c["confident"] for c in searched]),
        ]  # fmt: skip
        for entry, confident in table:
            assert confident, f"{entry}: an empty list"
            assert not any(confident), f"{entry}: a guess shown as evidence"
        assert asked.status_code == 200
        answer = asked.json()
        assert answer["abstained"] is True and answer["citations"] == []
        assert answer["answer"] == NO_EVIDENCE and answer["chunk_ids"] == []

    def test_a_result_with_evidence_says_so(self):
        (first, *_) = search_run(query="HARBOR_MAX_WORKERS", user=self.reader, k=5)

        assert first.page.url == harbor_url("configuration") and first.confident

    def test_only_an_index_with_nothing_to_rank_gives_an_empty_list(self):
        Page.objects.update(status=Page.Status.GONE)

        assert search_run(query="queue", user=self.reader, k=5, log=False) == []


class NarrowerScopeTests(HarborWorld):
    """The whole index has evidence (another product's release notes hold every
    word of the question) and ranks a Harbor page first (release notes count
    half); Harbor's own pages alone hold no evidence."""

    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.other = Source.objects.create(
            name="Dockyard", seed_urls="https://dockyard.example/"
        )
        ingest_markdowns(
            (
                f"https://dockyard.example/changes/{n}/",
                f"# Changes in 1.{n}\n\nYou can now throttle the workers of a "
                f"queue ({n}).\n",
            )
            for n in range(4)
        )

    def ask(self, **filters):
        return question_answer(
            question=THROTTLE, user=SYSTEM, k=5, filters=SearchFilters(**filters),
            log=False,
        )  # fmt: skip

    def test_the_scope_answers_where_the_whole_index_answers_from_it(self):
        table = [
            # Dockyard's pages are release notes?, the whole index's first page
            # and so whether the question asked within Harbor answers
            (True, HARBOR_QUEUES, True),
            (False, "https://dockyard.example/", False),
        ]
        harbor = {"source_ids": (self.harbor.pk,)}
        for release_notes, first_wide, answers in table:
            Page.objects.filter(source=self.other).update(release_notes=release_notes)
            wide = chunks_search(query=THROTTLE, user=SYSTEM, k=5, per_page=1)
            own = _search(THROTTLE, SYSTEM, 5, 1, SearchFilters(**harbor),
                          SearchMode.HYBRID, None)  # fmt: skip
            # The case: the scope alone holds no evidence, the whole index does.
            assert own.abstained and own.hits, release_notes
            assert not wide.abstained, release_notes
            assert wide.hits[0].chunk.page.url.startswith(first_wide), release_notes

            scoped = self.ask(**harbor)
            assert scoped.abstained is not answers, release_notes
            if answers:
                assert scoped.citations[0].page.url == HARBOR_QUEUES
            else:
                assert scoped.answer == NO_EVIDENCE and scoped.citations == []


class NeverNamedInScopeTests(HarborWorld):
    """Another source names Barman in passing; Harbor's docs never do. The whole
    index answers a question about Barman from Harbor's backup page, but asked
    within Harbor the question still says what Harbor's docs never mention."""

    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        Source.objects.create(name="Tools", seed_urls="https://tools.example/")
        ingest_markdowns(
            (
                f"https://tools.example/list/{n}/",
                f"# Tools {n}\n\nBarman is one more tool on the list ({n}).\n",
            )
            for n in range(4)
        )

    def test_the_scope_keeps_its_never_named(self):
        question = "How do I restore a Harbor backup with Barman?"
        harbor = SearchFilters(source_ids=(self.harbor.pk,))
        wide = chunks_search(query=question, user=SYSTEM, k=5, per_page=1)
        # The case: the whole index answers, from Harbor's pages.
        assert not wide.abstained
        assert wide.hits[0].chunk.page.source_id == self.harbor.pk

        scoped = question_answer(
            question=question, user=SYSTEM, k=5, filters=harbor, log=False
        )

        assert scoped.abstained and scoped.citations == []
        assert scoped.answer == never_named(("Barman",))
