"""A question about a product the documentation never names abstains, however close
its vectors come: the names of a question, the rule of half, and that "never
named" is judged over what the asker may search, at once for new pages."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.test import SimpleTestCase, override_settings
from rest_framework.test import APIClient

from retrieval.answer import NO_EVIDENCE, never_named
from retrieval.embeddings import get_embedder
from retrieval.evidence import evidence_weigh
from retrieval.keywords import QueryTerms, Term, names_in
from retrieval.questions import question_answer
from retrieval.reembed import index_rebuild
from retrieval.search import chunks_search
from retrieval.searchable import SearchFilters
from retrieval.spaces import space_serving
from sources.models import SYSTEM, Source
from tests.world import HarborWorld, ingest_markdown

NAMES = [
    ("How do I deploy a Flask app to Heroku?", ["Flask", "Heroku"]),
    ("Which pool_mode should I set in pgbouncer.ini?", ["pgbouncer.ini"]),
    ("Where is the graphical EXPLAIN view in pgAdmin 4?", ["EXPLAIN", "pgAdmin"]),
    ("How do I reproject PostGIS data from EPSG:4326?", ["PostGIS", "EPSG:4326"]),
    ("What are NumPy's broadcasting rules?", ["NumPy"]),
    # A capital that starts a sentence names nothing; one inside a word does.
    ("Docker images: how? Kubernetes too.", []),
    ("PyInstaller bundles data how?", ["PyInstaller"]),
    ('I use "Netlify" (with HTTPS)', ["Netlify", "HTTPS"]),
    # The asker's own identifiers and plain compounds are no names.
    ("Can I cross-link to a subsection?", []),
    ("Why is my_field empty in mypkg.utils.parse?", []),
    ("What does error 42 mean in 3.11?", []),
    ("Install Sphinx on a Mac with Homebrew, Homebrew casks",
     ["Sphinx", "Mac", "Homebrew"]),
]  # fmt: skip


@pytest.mark.parametrize(("question", "names"), NAMES)
def test_the_names_of_a_question(question, names):
    assert names_in(question) == names


class HalfOfTheNamesTests(SimpleTestCase):
    def weigh(self, *names: str, unknown: tuple[str, ...]):
        terms = QueryTerms(
            terms=[Term("restore", 10, 2.0)]
            + [Term(n.lower(), 5, 5.0, name=n) for n in names],
            total=1000,
        )
        return evidence_weigh(
            similarity=0.9, floor=0.5, terms=terms, matched=[], unknown=unknown
        )

    def test_at_least_half_of_the_names_unknown_is_off_subject(self):
        table = [
            ((), (), False),  # no names: nothing to judge
            (("Harbor",), (), False),
            (("Barman",), ("Barman",), True),
            (("Harbor", "Barman"), ("Barman",), True),
            (("Harbor", "PostgreSQL", "Barman"), ("Barman",), False),
            (("Amazon", "RDS", "IAM"), ("Amazon", "IAM"), True),
        ]
        for names, unknown, off in table:
            evidence = self.weigh(*names, unknown=unknown)
            assert evidence.vector, "the vectors alone would have answered"
            assert (evidence.off_subject, evidence.enough) == (off, not off), names

    def test_the_answer_says_what_the_documentation_never_mentions(self):
        assert never_named(("Barman",)) == (
            "The documentation searched never mentions Barman, so it cannot "
            "answer this question."
        )
        assert "Amazon, IAM or My\\_Tool" in never_named(("Amazon", "IAM", "My_Tool"))


# Every question has vector evidence: only the names can make it abstain.
@override_settings(RELEVANCE_FLOOR=0.0)
class NeverNamedTests(HarborWorld):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.dba = Group.objects.create(name="dba")
        cls.member = User.objects.create_user("member", password="a long password 1")
        cls.member.groups.add(cls.dba)
        cls.outsider = User.objects.create_user("outsider", password="a long pw 12")
        tools = Source.objects.create(name="Tools", seed_urls="https://tools.example/")
        tools.allowed_groups.add(cls.dba)
        ingest_markdown(
            "https://tools.example/barman/",
            "# Barman\n\nBarman takes base backups of the Harbor database and "
            "restores them on demand.\n",
        )
        cls.tools = tools

    def ask(self, question: str, user=SYSTEM, **filters):
        return question_answer(
            question=question, user=user, k=5, filters=SearchFilters(**filters)
        )

    def test_a_product_nobody_may_read_about_abstains_and_is_named(self):
        result = self.ask("How do I restore a Harbor backup with Duplicati?")

        assert result.abstained and result.citations == []
        assert result.answer == never_named(("Duplicati",))

    def test_the_same_question_without_the_unknown_product_is_answered(self):
        for question in [
            "How do I restore a Harbor backup?",
            "How do I restore a Harbor backup into PostgreSQL?",
        ]:
            result = self.ask(question)
            assert not result.abstained and result.citations, question

    def test_never_named_means_in_what_the_asker_may_search(self):
        question = "How do I restore a Harbor backup with Barman?"
        table = [
            (self.outsider, {}, True),  # Barman is only in a source they cannot see
            (self.member, {}, False),
            (self.member, {"source_ids": (self.harbor.pk,)}, True),  # filtered out
        ]
        for user, filters, abstains in table:
            result = self.ask(question, user, **filters)
            assert result.abstained is abstains, (user, filters)
            if abstains:
                assert result.answer == never_named(("Barman",))

    def test_a_page_delivered_since_the_word_counts_names_its_product_at_once(self):
        self.ingest(
            "https://docs.harbor.example/restic/",
            "# Restic\n\nRestic copies Harbor's database dumps off site.\n",
            content_type="text/markdown",
        )  # no statistics refresh: the counts do not know "restic"

        search = chunks_search(
            query="How do I copy Harbor backups off site with Restic?",
            user=SYSTEM,
            k=5,
        )

        assert not search.abstained and search.evidence.unknown == ()

    def test_the_query_api_answers_200_with_the_reason(self):
        api = APIClient()
        api.force_authenticate(self.member)

        response = api.post(
            "/api/query/",
            {"question": "How do I restore a Harbor backup with Duplicati?"},
            format="json",
        )

        assert response.status_code == 200
        assert response.json()["abstained"] is True
        assert response.json()["answer"] == never_named(("Duplicati",))
        assert response.json()["answer"] != NO_EVIDENCE


@pytest.mark.slow
class LocalModelTests(HarborWorld):
    """With the local model, whose vectors put any backup tool beside Harbor's own
    backups, near-domain questions still abstain, and named ones it documents do
    not."""

    def test_near_domain_questions_abstain_and_documented_names_do_not(self):
        self.enterContext(
            override_settings(
                RELEVANCE_FLOOR=None, EMBEDDING_BACKEND="local",
                EMBEDDING_MODEL="all-MiniLM-L6-v2", EMBEDDING_DIMENSIONS=384,
            )
        )  # fmt: skip
        *_, done = index_rebuild(target=get_embedder())
        space = space_serving()
        assert space is not None and space.name == get_embedder().space
        assert done.switched_from and space.floor is not None
        near = {
            "How do I restore a Harbor backup taken with Barman?": ("Barman",),
            "How do I back up the Harbor database with Barman?": ("Barman",),
            "How do I take nightly Harbor backups with pgBackRest?": ("pgBackRest",),
            "How do I pause a Harbor queue from Grafana?": ("Grafana",),
            "How do I run Harbor workers on Kubernetes?": ("Kubernetes",),
            "Can Harbor send an alert to Slack when a job fails?": ("Slack",),
        }
        searches = {q: chunks_search(query=q, user=SYSTEM, k=5) for q in near}

        for question, unknown in near.items():
            assert searches[question].abstained, question
            assert searches[question].evidence.unknown == unknown
        vouched = [q for q, s in searches.items() if s.evidence.vector]
        assert len(vouched) >= 4, "the vectors alone would have answered most"
        for question in [
            "How do I back up Harbor's PostgreSQL database?",
            "Which Python version does Harbor need?",
        ]:
            assert not chunks_search(query=question, user=SYSTEM, k=5).abstained
