"""Words readers use: per-source synonyms an editor adds ("graveyard" → "dead
letter") widen a question's keyword side and its embedded text, within the
synonym's source only; the admin keeps them per source and suggests them from the
words of unanswered and doubtful questions the index does not hold."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser, Group, User
from django.urls import reverse

from retrieval.evidence import LEXICAL_COVERAGE
from retrieval.models import Chunk, QueryLog, Synonym
from retrieval.pins import pin_create
from retrieval.questions import question_answer
from retrieval.search import SearchMode, chunks_search
from retrieval.searchable import SearchFilters
from retrieval.synonyms import question_widened, synonyms_in
from sources.models import SYSTEM, Source
from tests.admin_world import BETA, editor_create, two_groups_add
from tests.world import HarborWorld, harbor_url, ingest_markdown

SYNONYMS = reverse("admin:retrieval_synonym_changelist")
ADD = reverse("admin:retrieval_synonym_add")
SUGGESTIONS = reverse("admin:retrieval_synonym_suggestions")
QUESTIONS = reverse("admin:retrieval_querylog_questions")
# A reader's word no page of Harbor's holds, for what its retries page calls the
# dead letter queue.
GRAVEYARD = "Where is the graveyard?"

# (question, the reader's words it holds as the question wrote them; None: none)
SPELLINGS = [
    ("Why do I get a complaint?", "complaint"),
    ("COMPLAINT in my log", "complaint"),  # case
    ("Complaints about the disk", "complaints"),  # a plural
    ("what is this (complaint)?", "complaint"),  # punctuation around it
    ("“complaint”, again.", "complaint"),
    ("Is it complaining?", None),  # another form: not stemmed
    ("an uncomplaint setting", None),  # inside a word
    ("complaint_count is high", None),  # an identifier of its own
    ("a complaint-free run", None),
    ("How do I roll back a release?", "roll back"),  # a phrase
    ("Roll   Back, now", "roll back"),  # case and spaces
    ("two roll backs", "roll backs"),  # the phrase's plural
    ("roll-back it", None),  # one identifier, not the phrase
    ("roll it back", None),  # not in order
    ("back roll", None),
    ("Does it run on Node.js?", "node.js"),  # an identifier as written
    ("Does it run on node?", None),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("question", "said"), SPELLINGS)
def test_a_question_holds_the_readers_words_as_whole_words(question, said):
    source = Source.objects.create(name="Docs", seed_urls="https://docs.example/")
    for words, means in (
        ("Complaint", ["warning"]),
        ("roll  back", ["rollback", "revert"]),
        ("node.js", ["javascript"]),
    ):
        Synonym.objects.create(source=source, words=words, means=means)

    meant = synonyms_in(question, source_ids=None)

    assert [m.said for m in meant] == ([said] if said else [])
    if said:
        added = meant[0].means
        assert question_widened(question, meant) == f"{question} ({', '.join(added)})"
    else:
        assert question_widened(question, meant) == question


class SynonymWorld(HarborWorld):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.reader = User.objects.create_user("reader")
        cls.editor = editor_create()

    def synonym(self, words: str = "graveyard", means=("dead letter",), source=None):
        return Synonym.objects.create(
            source=source or self.harbor, words=words, means=list(means)
        )


def dead_letters() -> Chunk:
    return Chunk.objects.get(
        page__url=harbor_url("retries"), heading__endswith="Dead letters"
    )


class SearchTests(SynonymWorld):
    def test_a_question_in_the_readers_word_gets_the_page_in_the_docs_words(self):
        def asked():
            self.client.force_login(self.reader)
            search = self.client.get("/api/search/", {"q": GRAVEYARD})
            answer = self.client.post(
                "/api/query/", {"question": GRAVEYARD}, content_type="application/json"
            )
            assert search.status_code == answer.status_code == 200
            return search.json()["results"], answer.json()

        results, answer = asked()
        assert not results or results[0]["heading"] != dead_letters().heading
        assert answer["abstained"]
        self.synonym()
        results, answer = asked()
        assert results[0]["url"] == harbor_url("retries")
        assert results[0]["heading"] == dead_letters().heading
        assert results[0]["confident"]
        assert not answer["abstained"]
        assert answer["citations"][0]["heading"] == dead_letters().heading
        # The keyword side alone finds it, by the documentation's words.
        keyword = chunks_search(
            query=GRAVEYARD, user=self.reader, k=5, mode=SearchMode.KEYWORD
        )
        assert keyword.hits[0].pk == dead_letters().pk
        assert keyword.terms.terms[0].alternatives == ("dead letter",)

    def test_the_text_embedded_is_the_question_with_the_docs_words(self):
        self.synonym("graveyard", ["dead letter", "dead letters"])
        result = chunks_search(query=GRAVEYARD, user=self.reader, k=5)
        assert result.widened == f"{GRAVEYARD} (dead letter, dead letters)"
        plain = chunks_search(query="Where is the dead letter queue?", user=SYSTEM, k=5)
        assert plain.widened == "Where is the dead letter queue?"
        assert plain.question_vector == plain.query_vector

    def test_a_synonym_applies_only_within_its_source_for_who_may_search_it(self):
        beta = Source.objects.create(name="Beta ops", seed_urls=f"{BETA}/")
        ingest_markdown(
            f"{BETA}/mail/", "# Mail\n\n## Dead letter office\n\nLost mail."
        )
        self.synonym()
        members = Group.objects.create(name="harbor-readers")
        self.harbor.allowed_groups.add(members)
        self.editor.groups.add(members)
        cases = [
            # (who, filters, applies)
            (self.editor, SearchFilters(source_ids=(self.harbor.pk,)), True),
            (self.editor, SearchFilters(), True),
            (self.editor, SearchFilters(source_ids=(beta.pk,)), False),
            (self.reader, SearchFilters(), False),  # may not search Harbor
            (AnonymousUser(), SearchFilters(), False),
        ]
        for user, filters, applies in cases:
            with self.subTest(user=str(user), filters=filters):
                result = chunks_search(query=GRAVEYARD, user=user, k=5, filters=filters)
                assert bool(result.meant) == applies
                assert (result.widened != GRAVEYARD) == applies
                assert any(t.alternatives for t in result.terms.terms) == applies
                # Only the synonym makes a passage hold the question's word.
                assert any(hit.confident for hit in result.hits) == applies
        self.reader.groups.add(members)
        assert chunks_search(query=GRAVEYARD, user=self.reader, k=5).meant

    def test_a_pinned_question_keeps_its_pin_when_a_synonym_widens_it(self):
        asked = "Where do my jobs go in the graveyard?"
        pin_create(chunk=dead_letters(), questions=[asked], user=self.editor)
        self.synonym("graveyard", ["dead letter queue", "retries", "failure"])
        result = question_answer(question=asked, user=self.reader, k=5, log=False)
        assert result.citations[0].pinned_at is not None


class EvidenceTests(SynonymWorld):
    def held(self, question: str) -> float:
        return chunks_search(query=question, user=self.reader, k=5).evidence.held

    def test_a_chunk_holding_only_the_synonym_holds_the_readers_term_whole(self):
        in_docs_words = self.held("How do I pause a queue?")
        without = self.held("How do I freeze a queue?")
        self.synonym("freeze", ["pause"])
        with_synonym = self.held("How do I freeze a queue?")
        assert without < LEXICAL_COVERAGE <= in_docs_words
        # As held as the question in the documentation's words: the weight of
        # "freeze" is that of "pause", and the chunk holding "pause" holds it.
        assert with_synonym == in_docs_words
        # Saying both is one term, not two.
        assert self.held("How do I freeze or pause a queue?") == in_docs_words


class SynonymAdminTests(SynonymWorld):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        two_groups_add(cls)  # carol sees Harbor (open) and Beta, alice Harbor only

    def test_an_editor_adds_a_synonym_to_a_source_they_see_normalised(self):
        self.client.force_login(self.alice)
        response = self.client.post(
            ADD,
            {"source": self.harbor.pk, "words": "  Grave  Yard ",
             "means": "Dead letter, dead  LETTER queue"},
        )  # fmt: skip
        assert response.status_code == 302, response.context["adminform"].form.errors
        made = Synonym.objects.get()
        assert (made.words, made.means, made.created_by) == (
            "grave yard",
            ["dead letter", "dead letter queue"],
            self.alice,
        )
        change = reverse("admin:retrieval_synonym_change", args=[made.pk])
        assert "alice" in self.client.get(change).content.decode()  # who added it
        again = self.client.post(
            ADD, {"source": self.harbor.pk, "words": "GRAVE YARD", "means": "x"}
        )
        assert "already has these reader" in again.content.decode()
        unreadable = self.client.post(
            ADD, {"source": self.harbor.pk, "words": "c++", "means": "x"}
        )
        assert "would be read as “c”" in unreadable.content.decode()

    def test_editors_of_another_group_neither_see_nor_add_its_synonyms(self):
        theirs = self.synonym("mailbag", ["inbox"], source=self.beta)
        self.client.force_login(self.alice)
        assert "mailbag" not in self.client.get(SYNONYMS).content.decode()
        change = reverse("admin:retrieval_synonym_change", args=[theirs.pk])
        assert self.client.get(change).status_code == 404
        form = self.client.get(ADD).context["adminform"].form
        offered = set(form.fields["source"].queryset)
        assert self.harbor in offered and self.beta not in offered
        response = self.client.post(
            ADD, {"source": self.beta.pk, "words": "parcel", "means": "package"}
        )
        assert response.status_code == 200
        assert "Select a valid choice" in response.content.decode()
        response = self.client.post(
            SUGGESTIONS,
            {"source": self.beta.pk, "words": "parcel", "means": "package"},
        )
        assert response.status_code == 404
        assert list(Synonym.objects.values_list("words", flat=True)) == ["mailbag"]
        # Carol sees Beta: she sees and adds its synonyms.
        self.client.force_login(self.carol)
        assert "mailbag" in self.client.get(SYNONYMS).content.decode()
        response = self.client.post(
            SUGGESTIONS, {"source": self.beta.pk, "words": "parcel", "means": "package"}
        )
        assert response.status_code == 302
        assert Synonym.objects.get(words="parcel").source == self.beta


class SuggestionTests(SynonymWorld):
    def test_a_word_readers_used_that_the_index_lacks_is_suggested_and_added(self):
        for question in (GRAVEYARD, GRAVEYARD, "Which jobs end up in the graveyards?"):
            assert question_answer(question=question, user=self.reader, k=5).abstained
        self.client.force_login(self.editor)
        page = self.client.get(QUESTIONS, {"days": 30}).content.decode()
        assert f'href="{SUGGESTIONS}?days=30"' in page
        response = self.client.get(SUGGESTIONS, {"days": 30})
        assert response.status_code == 200
        rows = {s.word: s for s, *_ in response.context["rows"]}
        graveyard = rows["graveyard"]  # a plural counted with its singular
        assert (graveyard.askings, graveyard.chunks) == (3, 0)
        assert "jobs" not in rows and "graveyards" not in rows  # the index has jobs
        assert graveyard.means and graveyard.source == self.harbor
        assert graveyard.widened.startswith(graveyard.question + " (")
        html = response.content.decode()
        assert "the fewest passages of the index hold first" in html
        response = self.client.post(
            SUGGESTIONS,
            {"days": 30, "source": self.harbor.pk, "words": "graveyard",
             "means": "dead letter"},
        )  # fmt: skip
        assert response.status_code == 302
        assert Synonym.objects.get().means == ["dead letter"]
        rows = self.client.get(SUGGESTIONS, {"days": 30}).context["rows"]
        assert "graveyard" not in {s.word for s, *_ in rows}  # added: not again
        answered = question_answer(question=GRAVEYARD, user=self.reader, k=5)
        assert answered.citations[0].chunk.pk == dead_letters().pk
        assert QueryLog.objects.filter(abstained=True).count() == 3
