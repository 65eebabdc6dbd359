"""Pins: from a group of readers' questions, an editor pins the section that
answers it; those questions and new ones like them get it first, cited, wherever
they are asked, by readers who may read it; a change to the section sends the pin
to review."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser, Group, Permission, User
from django.test import override_settings
from django.urls import reverse

from retrieval.grouping import group_similarity
from retrieval.models import Chunk, Pin, PinQuestion, QueryLog
from retrieval.pins import pin_create, pin_vectors_fill
from retrieval.questions import question_answer, search_run
from retrieval.searchable import SearchFilters
from retrieval.spaces import serving
from sources.models import Source
from tests.admin_world import BETA, editor_create, two_groups_add
from tests.world import FIXTURES, HarborWorld, harbor_url, ingest_markdown

ANSWER_WITH = reverse("admin:retrieval_pin_answer")
PINS = reverse("admin:retrieval_pin_changelist")
QUESTIONS = reverse("admin:retrieval_querylog_questions")
# Asked by readers; the index answers it from another page than the one the
# docs owner wants: the dead letter queue, in the retries page.
ASKED = "Where do my jobs go when they fail for good?"
ALIKE = "where do my jobs go when they fail for good"
REWORDED = "Where do jobs go when they fail for good?"
UNRELATED = "How do I change the default timeout?"


def dead_letters() -> Chunk:
    return Chunk.objects.get(
        page__url=harbor_url("retries"), heading__endswith="Dead letters"
    )


def first_cited(result) -> tuple[str, str]:
    citation = result.citations[0]
    return citation.page.url, citation.chunk.heading


class PinWorld(HarborWorld):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.editor = editor_create()
        cls.reader = User.objects.create_user("reader")

    def ask(self, question: str, user=None, **kwargs):
        return question_answer(
            question=question, user=user or self.reader, k=5, **kwargs
        )

    def pin(self, questions=(ASKED,)) -> Pin:
        return pin_create(chunk=dead_letters(), questions=questions, user=self.editor)


class PinsAnswerTests(PinWorld):
    def test_the_pinned_questions_and_those_like_them_get_the_section_first(self):
        before = {q: self.ask(q) for q in (ASKED, ALIKE, REWORDED, UNRELATED)}
        # Unpinned, the index holds no evidence enough for it.
        assert before[ASKED].abstained and not before[ASKED].citations
        self.pin()
        for question in (ASKED, ALIKE, REWORDED):
            result = self.ask(question)
            assert not result.abstained
            assert first_cited(result) == (
                harbor_url("retries"),
                dead_letters().heading,
            )
            assert result.citations[0].pinned_at is not None
            assert "[1]" in result.answer
        # A question no nearer one of the pinned questions than a group would
        # take in is answered as before.
        after = self.ask(UNRELATED)
        assert [c.chunk.pk for c in after.citations] == [
            c.chunk.pk for c in before[UNRELATED].citations
        ]
        assert all(c.pinned_at is None for c in after.citations)

    def test_a_search_lists_the_pinned_section_first_and_the_page_once(self):
        self.pin()
        results = search_run(query=ASKED, user=self.reader, k=5)
        assert results[0].chunk.pk == dead_letters().pk
        assert results[0].pinned_at is not None
        pages = [c.page.pk for c in results]
        assert len(pages) == len(set(pages))

    def test_over_http_the_citation_says_when_it_was_pinned(self):
        pin = self.pin()
        self.client.force_login(self.reader)
        for response in (
            self.client.post(
                "/api/query/", {"question": ALIKE}, content_type="application/json"
            ),
            self.client.get("/api/search/", {"q": ALIKE}),
        ):
            assert response.status_code == 200, response.content
            data = response.json()
            first = (data.get("citations") or data.get("results"))[0]
            assert first["heading"] == dead_letters().heading
            assert first["pinned_at"][:19] == pin.created_at.isoformat()[:19]

    def test_a_pin_answers_only_those_who_may_read_its_section_within_the_filters(
        self,
    ):
        group = Group.objects.create(name="harbor-readers")
        self.harbor.allowed_groups.add(group)
        other = Source.objects.create(name="Beta ops", seed_urls=f"{BETA}/")
        ingest_markdown(f"{BETA}/jobs/", "# Jobs\n\nWhere jobs go when they fail.")
        self.pin()
        for user, filters in (
            (AnonymousUser(), SearchFilters()),  # may not read Harbor
            (self.reader, SearchFilters()),  # not in its group
            (self.editor, SearchFilters(source_ids=(other.pk,))),  # filtered out
        ):
            result = self.ask(ALIKE, user=user, filters=filters)
            assert all(c.pinned_at is None for c in result.citations), user
        self.reader.groups.add(group)
        assert self.ask(ALIKE).citations[0].pinned_at is not None


class PinsReviewTests(PinWorld):
    def retries_edited(self, old: str, new: str) -> None:
        text = (harbor_corpus("retries")).replace(old, new)
        assert text != harbor_corpus("retries")
        ingest_markdown(harbor_url("retries"), text)

    def test_a_change_to_the_section_sends_the_pin_to_review_and_it_stops(self):
        pin = self.pin()
        self.retries_edited("Inspect it", "Look at it")
        pin.refresh_from_db()
        assert (pin.state, pin.reason) == (Pin.State.REVIEW, Pin.Reason.CHANGED)
        assert pin.review_since is not None
        assert all(c.pinned_at is None for c in self.ask(ASKED).citations)
        # Reviewed and renewed: the section as it reads now answers again.
        self.client.force_login(self.editor)
        response = self.client.post(
            PINS, {"action": "renew", "_selected_action": [pin.pk]}, follow=True
        )
        assert "1 pins answer again" in response.content.decode()
        pin.refresh_from_db()
        assert pin.state == Pin.State.ACTIVE
        assert pin.chunk_hash == dead_letters().embed_hash
        assert self.ask(ASKED).citations[0].pinned_at is not None

    def test_a_change_elsewhere_on_the_page_leaves_the_pin_answering(self):
        pin = self.pin()
        self.retries_edited("default timeout is ten minutes", "default is 9 minutes")
        pin.refresh_from_db()
        assert pin.state == Pin.State.ACTIVE
        assert self.ask(ASKED).citations[0].pinned_at is not None

    def test_a_section_or_page_that_goes_sends_the_pin_to_review_as_gone(self):
        for removed in ("section", "page"):
            with self.subTest(removed):
                pin = self.pin()
                if removed == "section":
                    self.retries_edited("## Dead letters", "Dead letters:")
                else:
                    self.ingest(harbor_url("retries"), "", original_status=404)
                pin.refresh_from_db()
                assert (pin.state, pin.reason) == (Pin.State.REVIEW, Pin.Reason.GONE)
                listed = self.client_for_editor().get(PINS).content.decode()
                assert "Waiting for review: the section is gone" in listed
                pin.delete()
                ingest_markdown(harbor_url("retries"), harbor_corpus("retries"))

    def client_for_editor(self):
        self.client.force_login(self.editor)
        return self.client


def harbor_corpus(name: str) -> str:
    return (FIXTURES / "corpus" / f"{name}.md").read_text()


class AnswerThisWithTests(PinWorld):
    """The admin's path: a group on the questions page, *Answer this with…*, a
    search of the editor's sections, *Pin this section*."""

    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        two_groups_add(cls)  # carol sees Harbor (open) and Beta, alice Harbor only
        ingest_markdown(f"{BETA}/jobs/", "# Jobs\n\n## Failed jobs\n\nThey stay.")

    def setUp(self):
        for question in (ASKED, ALIKE, ASKED):
            self.ask(question)  # answered from Harbor: anyone's to see
        self.bobs = self.ask("Where do failed jobs stay in Beta?", user=self.bob)
        self.client.force_login(self.editor)

    def logs(self, *texts: str) -> str:
        ids = QueryLog.objects.filter(text__in=texts).values_list("pk", flat=True)
        return ",".join(map(str, ids))

    def test_from_the_group_to_a_pin_that_answers_it(self):
        page = self.client.get(QUESTIONS, {"days": 30}).content.decode()
        assert "Answer this with…" in page
        logs = self.logs(ASKED, ALIKE)
        response = self.client.get(ANSWER_WITH, {"logs": logs, "q": "dead letter"})
        html = response.content.decode()
        assert response.status_code == 200
        # The group's distinct questions, the most asked first, once each.
        assert response.context["questions"] == [ASKED]
        chunk = dead_letters()
        assert chunk.pk in [hit.pk for hit, *_ in response.context["hits"]]
        assert "Pin this section" in html
        response = self.client.post(
            ANSWER_WITH, {"logs": logs, "chunk": chunk.pk}, follow=True
        )
        assert response.status_code == 200
        pin = Pin.objects.get()
        assert (pin.page_id, pin.heading, pin.created_by) == (
            chunk.page_id,
            chunk.heading,
            self.editor,
        )
        shown = response.content.decode()
        assert "editor" in shown and ASKED in shown and "Answering" in shown
        # The page's own screen names its pinned section and what it answers.
        page = reverse("admin:sources_page_change", args=[chunk.page_id])
        shown = self.client.get(page).content.decode()
        assert "pinned sections" in shown.lower()
        assert f"“{ASKED}”" in shown and "answering, by editor" in shown
        assert first_cited(self.ask(REWORDED)) == (harbor_url("retries"), chunk.heading)

    def test_an_editor_pins_only_their_sections_for_their_questions(self):
        beta_chunk = Chunk.objects.get(
            page__url=f"{BETA}/jobs/", heading__contains="Failed"
        )
        bobs = str(self.bobs.log_id)
        self.client.force_login(self.alice)
        cases = [
            # (who, logs, chunk posted, status)
            (self.alice, self.logs(ASKED), beta_chunk.pk, 404),  # not her source
            (self.alice, bobs, dead_letters().pk, 404),  # not her asker's question
            (self.alice, "x,,99999999999999999999", dead_letters().pk, 404),
            (self.carol, bobs, beta_chunk.pk, 302),  # hers, both
        ]
        for who, logs, chunk, status in cases:
            with self.subTest(who=who.username, logs=logs):
                self.client.force_login(who)
                response = self.client.post(ANSWER_WITH, {"logs": logs, "chunk": chunk})
                assert response.status_code == status
        assert list(Pin.objects.values_list("page__url", flat=True)) == [
            f"{BETA}/jobs/"
        ]
        # Alice does not see Carol's pin in the list, nor its page by its id.
        self.client.force_login(self.alice)
        assert f"{BETA}" not in self.client.get(PINS).content.decode()
        pin = Pin.objects.get()
        change = reverse("admin:retrieval_pin_change", args=[pin.pk])
        assert self.client.get(change).status_code == 404

    def test_staff_without_the_permission_to_pin_get_no_link_and_a_403(self):
        clerk = User.objects.create_user("clerk", is_staff=True)
        clerk.user_permissions.set(
            Permission.objects.filter(codename__in=["view_querylog", "view_pin"])
        )
        self.client.force_login(clerk)
        page = self.client.get(QUESTIONS, {"days": 30}).content.decode()
        assert "Answer this with…" not in page
        logs = self.logs(ASKED)
        assert self.client.get(ANSWER_WITH, {"logs": logs}).status_code == 403
        response = self.client.post(
            ANSWER_WITH, {"logs": logs, "chunk": dead_letters().pk}
        )
        assert response.status_code == 403
        assert not Pin.objects.exists()


class PinVectorsTests(PinWorld):
    def test_a_pin_keeps_answering_after_the_model_changes(self):
        self.pin()
        PinQuestion.objects.update(space="local/old-model/384", vector=None)
        assert all(c.pinned_at is None for c in self.ask(ASKED).citations)
        assert pin_vectors_fill(limit=100) == 1
        assert PinQuestion.objects.get().space == serving()[0].space
        assert self.ask(ASKED).citations[0].pinned_at is not None
        assert pin_vectors_fill(limit=100) == 0


@pytest.mark.parametrize(
    ("floor", "bar"),
    [
        (None, 0.70),  # no floor learned (hashed words): the grouping's bar
        (0.482, 0.70),  # the default model's floor: the same bar
        (0.30, 0.70),  # a floor under it: never a laxer bar
        (0.86, 0.9189),  # e5's: as far from its floor toward 1
        (1.0, 1.0),
    ],
)
def test_the_pin_and_grouping_bar_follows_the_spaces_floor(floor, bar):
    assert group_similarity(floor) == pytest.approx(bar, abs=1e-4)


class PinBarTests(PinWorld):
    def test_a_space_whose_similarities_crowd_high_asks_more_of_a_question(self):
        self.pin()
        near = "Where do my jobs go when they fail for good in the night?"
        assert self.ask(near).citations[0].pinned_at is not None, (
            "at the default bar the rewording gets the pin"
        )
        with override_settings(RELEVANCE_FLOOR=0.9):
            assert all(c.pinned_at is None for c in self.ask(near).citations)
            assert self.ask(ASKED).citations[0].pinned_at is not None
