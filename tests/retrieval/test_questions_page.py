"""The docs owner's page of questions readers asked: what the index could not
answer and the answers marked not useful, grouped, with the pages nearest each
group; its CSV export; the embedding job behind it."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

from django.contrib.auth.models import AnonymousUser, Permission, User
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from retrieval.asked import Concern, question_groups
from retrieval.evidence import LEXICAL_COVERAGE
from retrieval.models import QueryLog, QuestionVector
from retrieval.questions import query_feedback_record, question_answer
from retrieval.search import chunks_search
from retrieval.spaces import serving
from retrieval.tasks import question_vectors_fill_task
from tests.admin_world import BETA, ESCAPED, XSS, editor_create, two_groups_add
from tests.world import HarborWorld, harbor_url, ingest_markdown

PAGE = reverse("admin:retrieval_querylog_questions")
EXPORT = reverse("admin:retrieval_querylog_questions_export")
# Readers of the Harbor docs ask about Barman, which the docs never name.
BARMAN = [
    "How do I restore a Barman backup?",
    "how do I restore a barman backup",
    "How do I restore a Barman backup in Harbor?",
]
TUNGSTEN = "What is the boiling point of tungsten?"
# Answered from the Retries page, on evidence that barely holds (see
# ``QuestionsWorld.barely_above_the_floor``).
DOUBTFUL = [
    "What happens when a job uses all its retries?",
    "what happens when a job uses all its retries",
]
BETA_PAGE = """# Barman restores

## Restoring with Barman

Restore a Barman backup with `barman recover`, then point Harbor at the restored
database and start the scheduler.
"""


class QuestionsWorld(HarborWorld):
    """The Harbor docs, open to everyone, and a reader; an editor who sees every
    source."""

    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.editor = editor_create()
        cls.reader = User.objects.create_user("reader")

    def ask(self, question: str, user=None):
        return question_answer(question=question, user=user or self.reader, k=5)

    def barely_above_the_floor(self, question: str, user=None):
        """The floor set just under the question's best similarity: answered, on
        evidence that barely holds (its words alone would not carry it)."""
        evidence = chunks_search(query=question, user=user or self.reader, k=5).evidence
        assert evidence.held < LEXICAL_COVERAGE, "its words alone would answer it"
        return override_settings(RELEVANCE_FLOOR=round(evidence.similarity - 0.01, 4))

    def page(self, **params) -> dict:
        response = self.client.get(PAGE, params)
        assert response.status_code == 200
        return {s["found"].concern: s for s in response.context["sections"]}


class QuestionsPageTests(QuestionsWorld):
    def setUp(self):
        self.client.force_login(self.editor)

    def test_alike_unanswered_questions_come_as_one_group_with_the_nearest_pages(self):
        for question in [*BARMAN, BARMAN[0], TUNGSTEN]:
            assert self.ask(question).abstained, question

        unanswered = self.page()[Concern.UNANSWERED]
        html = self.client.get(PAGE).content.decode()

        found = unanswered["found"]
        assert (found.asked, found.distinct, len(found.groups)) == (5, 3, 2)
        barman, tungsten = unanswered["rows"]
        assert barman["group"].count == 4 and tungsten["group"].count == 1
        examples = [question.text for question, _ in barman["examples"]]
        assert examples[0] == BARMAN[0] and set(examples[1:]) == {BARMAN[2]}
        assert [page.title for page, *_ in barman["near"]][0] == "Backups"
        assert f'{BARMAN[0]}</a> <span class="kb-times">× 3</span>' in html
        assert "Backups</a>" in html
        log = QueryLog.objects.filter(text=BARMAN[0]).latest("created_at")
        assert reverse("admin:retrieval_querylog_change", args=[log.pk]) in html

    def test_answers_marked_not_useful_are_grouped_apart_and_helpful_ones_not(self):
        useless = self.ask("How do I pause a queue?")
        liked = self.ask("How do I retry a failed job?")
        query_feedback_record(log_id=useless.log_id, user=self.reader, helpful=False)
        query_feedback_record(log_id=liked.log_id, user=self.reader, helpful=True)

        sections = self.page()

        [row] = sections[Concern.NOT_USEFUL]["rows"]
        assert [q.text for q, _ in row["examples"]] == ["How do I pause a queue?"]
        assert row["near"][0][0].title == "Queues"
        assert not sections[Concern.UNANSWERED]["rows"]

    def test_answers_that_barely_held_are_grouped_as_doubtful_beside_the_rest(self):
        with self.barely_above_the_floor(DOUBTFUL[0]):
            for question in [*DOUBTFUL, DOUBTFUL[0]]:
                assert not self.ask(question).abstained, question
            sure = self.ask("How do I pause a queue?")  # its words carry it
        assert self.ask(TUNGSTEN).abstained

        sections = self.page()
        html = self.client.get(PAGE).content.decode()

        assert list(sections) == list(Concern)
        [row] = sections[Concern.DOUBTFUL]["rows"]
        assert row["group"].count == 3
        assert [q.text for q, _ in row["examples"]] == [DOUBTFUL[0]]
        [(page, url, path)] = row["answered"]
        assert (page.url, page.answers) == (harbor_url("retries"), 3)
        assert url == reverse("admin:sources_page_change", args=[page.page_id])
        assert [
            q.text for q, _ in sections[Concern.UNANSWERED]["rows"][0]["examples"]
        ] == [TUNGSTEN]
        assert "Doubtful: answered on evidence that barely held" in html
        assert f'{DOUBTFUL[0]}</a> <span class="kb-times">× 3</span>' in html
        # The group's count leads to its log rows, and to none other.
        logs = QueryLog.objects.filter(text__in=DOUBTFUL)
        assert f'<a href="{row["logs"].replace("&", "&amp;")}"' in html
        listed = self.client.get(row["logs"]).context["cl"].result_list
        assert {log.pk for log in listed} == {log.pk for log in logs}
        assert sure.log_id not in {log.pk for log in listed}

    def test_only_the_period_asked_for_counts(self):
        self.ask(BARMAN[0])
        QueryLog.objects.update(created_at=timezone.now() - timedelta(days=10))
        self.ask(TUNGSTEN)

        week = self.page(days="7")[Concern.UNANSWERED]["found"]
        month = self.page(days="30")[Concern.UNANSWERED]["found"]

        assert [g.leader.text for g in week.groups] == [TUNGSTEN]
        assert {g.leader.text for g in month.groups} == {TUNGSTEN, BARMAN[0]}

    def test_a_period_not_offered_is_refused_with_json(self):
        for url in [PAGE, EXPORT]:
            response = self.client.get(url, {"days": "365"})

            assert response.status_code == 400
            assert response.json() == {
                "error": "days must be one of 7, 30, 90, not '365'"
            }

    def test_staff_without_the_permission_to_view_query_logs_are_refused(self):
        clerk = User.objects.create_user("clerk", is_staff=True)
        clerk.user_permissions.set(
            Permission.objects.filter(content_type__app_label="sources")
        )
        self.client.force_login(clerk)

        assert self.client.get(PAGE).status_code == 403
        assert self.client.get(EXPORT).status_code == 403
        self.client.logout()
        assert self.client.get(PAGE).status_code == 302, "to the admin's login"

    def test_the_query_log_list_the_admin_index_and_the_bar_lead_to_the_page(self):
        listing = self.client.get(reverse("admin:retrieval_querylog_changelist"))
        index = self.client.get(reverse("admin:index"))

        link = f'<a href="{PAGE}">Questions readers asked</a>'
        assert link in listing.content.decode()
        assert f'<a href="{PAGE}"><strong>Questions' in index.content.decode()
        assert f'<a href="{PAGE}">Questions</a>' in index.content.decode()

    def test_what_readers_typed_is_shown_as_text(self):
        self.ask(f"How do I restore a Barman backup? {XSS}")

        html = self.client.get(PAGE).content.decode()

        assert ESCAPED in html and XSS not in html


class ExportTests(QuestionsWorld):
    def setUp(self):
        self.client.force_login(self.editor)

    def export(self, **params) -> tuple[object, list[list[str]]]:
        response = self.client.get(EXPORT, params)
        assert response.status_code == 200
        body = b"".join(response.streaming_content).decode()
        return response, list(csv.reader(io.StringIO(body)))

    def test_the_groups_and_their_questions_are_a_csv_download(self):
        for question in [*BARMAN, TUNGSTEN]:
            self.ask(question)
        useless = self.ask("How do I pause a queue?")
        query_feedback_record(log_id=useless.log_id, user=self.reader, helpful=False)

        response, rows = self.export(days="7")

        assert response.streaming
        assert response["Content-Type"] == "text/csv; charset=utf-8"
        today = timezone.localdate()
        assert response["Content-Disposition"] == (
            f'attachment; filename="questions-7-days-{today:%Y-%m-%d}.csv"'
        )
        header, *body = rows
        assert header[:2] == ["concern", "group"] and "nearest pages" in header
        by_question = {row[5]: dict(zip(header, row, strict=True)) for row in body}
        # The newest spelling of a question asked twice stands for both.
        assert set(by_question) == {*BARMAN[1:], TUNGSTEN, "How do I pause a queue?"}
        barman = by_question[BARMAN[2]]
        assert barman["concern"] == "unanswered" and barman["group"] == "1"
        assert barman["times asked in group"] == "3"
        assert barman["group's leading question"] == BARMAN[1]
        assert barman["nearest pages"].startswith(
            "https://docs.harbor.example/backups/"
        )
        assert by_question["How do I pause a queue?"]["concern"] == "not_useful"

    def test_a_doubtful_group_names_the_page_its_answers_came_from(self):
        with self.barely_above_the_floor(DOUBTFUL[0]):
            self.ask(DOUBTFUL[0])

        _, (header, row) = self.export()

        exported = dict(zip(header, row, strict=True))
        assert (exported["concern"], exported["question"]) == ("doubtful", DOUBTFUL[0])
        assert exported["answered from"] == f"{harbor_url('retries')} (1)"

    def test_a_question_that_looks_like_a_formula_stays_text(self):
        self.ask('=HYPERLINK("https://evil.example", "barman")')

        _, (_, row) = self.export()

        assert row[5] == '\'=HYPERLINK("https://evil.example", "barman")'


class QuestionVectorTests(QuestionsWorld):
    def test_the_job_embeds_the_questions_the_page_groups_and_no_others(self):
        unanswered = self.ask(BARMAN[0])
        answered = self.ask("How do I pause a queue?")
        useless = self.ask("How do I retry a failed job?")
        query_feedback_record(log_id=useless.log_id, user=self.reader, helpful=False)

        done = "questions embedded, 0 pinned questions"
        assert question_vectors_fill_task() == f"2 {done}"
        assert question_vectors_fill_task() == f"0 {done}"

        vectors = QuestionVector.objects.all()
        assert {v.log_id for v in vectors} == {unanswered.log_id, useless.log_id}
        assert answered.log_id not in {v.log_id for v in vectors}
        assert {v.space for v in vectors} == {serving()[0].space}

    def test_the_page_groups_what_has_a_vector_and_says_how_many_wait(self):
        self.ask(BARMAN[0])
        question_vectors_fill_task()
        self.ask(TUNGSTEN)

        found = question_groups(
            user=self.editor, concern=Concern.UNANSWERED,
            since=timezone.now() - timedelta(days=1), fill=0,
        )  # fmt: skip

        assert [g.leader.text for g in found.groups] == [BARMAN[0]]
        assert found.waiting == 1

    def test_a_vector_of_a_space_no_longer_serving_is_made_again(self):
        log_id = self.ask(BARMAN[0]).log_id
        QuestionVector.objects.create(log_id=log_id, space="old/x/3", vector=[1, 0, 0])

        question_vectors_fill_task()

        vector = QuestionVector.objects.get(log_id=log_id)
        assert vector.space == serving()[0].space
        assert len(vector.vector) == serving()[0].dimensions


class WhoSeesWhichQuestionsTests(QuestionsWorld):
    """A question belongs to the sources its asker could search and to those of
    the chunks it retrieved: an editor sees it when they see all of them."""

    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        two_groups_add(cls)
        ingest_markdown(f"{BETA}/barman/", BETA_PAGE)

    def setUp(self):
        # Bob could search Beta: his unanswered question and his answer from Beta,
        # marked not useful, are group B's. The anonymous reader searched the
        # open docs only, retrieved nothing, and abstained.
        assert self.ask(TUNGSTEN, user=self.bob).abstained
        from_beta = self.ask(BARMAN[0], user=self.bob)
        assert from_beta.citations[0].page.url == f"{BETA}/barman/"
        query_feedback_record(log_id=from_beta.log_id, user=self.bob, helpful=False)
        assert self.ask(BARMAN[2], user=AnonymousUser()).abstained

    def seen_by(self, editor: User) -> dict:
        self.client.force_login(editor)
        sections = self.page()
        return {
            concern: {
                q.text: [page.url for page, *_ in row["near"]]
                for row in section["rows"]
                for q, _ in row["examples"]
            }
            for concern, section in sections.items()
        }

    def test_an_editor_of_another_group_sees_neither_the_questions_nor_the_pages(self):
        seen = self.seen_by(self.alice)
        html = self.client.get(PAGE).content.decode()
        _, *rows = csv.reader(
            io.StringIO(b"".join(self.client.get(EXPORT).streaming_content).decode())
        )

        assert seen[Concern.UNANSWERED].keys() == {BARMAN[2]}
        assert not seen[Concern.NOT_USEFUL]
        assert TUNGSTEN not in html and "Beta" not in html and BETA not in html
        assert [row[5] for row in rows] == [BARMAN[2]]
        assert BETA not in "".join(rows[0])

    def test_the_groups_editor_sees_its_questions_and_its_pages(self):
        seen = self.seen_by(self.carol)

        assert seen[Concern.UNANSWERED].keys() == {TUNGSTEN, BARMAN[2]}
        assert seen[Concern.NOT_USEFUL].keys() == {BARMAN[0]}
        assert seen[Concern.NOT_USEFUL][BARMAN[0]][0] == f"{BETA}/barman/"
        assert f"{BETA}/barman/" in seen[Concern.UNANSWERED][BARMAN[2]]

    def test_an_editor_sees_the_doubtful_answers_of_their_groups_askers_only(self):
        with self.barely_above_the_floor(DOUBTFUL[0], user=self.bob):
            from_bob = self.ask(DOUBTFUL[0], user=self.bob)
            from_reader = self.ask(DOUBTFUL[1], user=self.reader)
        assert not from_bob.abstained and not from_reader.abstained

        def doubtful(editor: User) -> tuple[int, str]:
            self.client.force_login(editor)
            [row] = self.page()[Concern.DOUBTFUL]["rows"]
            return row["group"].count, row["logs"]

        alice_count, alice_logs = doubtful(self.alice)
        carol_count, carol_logs = doubtful(self.carol)

        assert (alice_count, carol_count) == (1, 2)
        self.client.force_login(self.alice)
        listed = self.client.get(alice_logs).context["cl"].result_list
        assert [log.pk for log in listed] == [from_reader.log_id]
        assert str(from_bob.log_id) in carol_logs


class GroupingBarTests(QuestionsWorld):
    def test_the_grouping_bar_follows_the_serving_models_floor(self):
        """A model whose similarities crowd high (a floor of 0.86, as e5's) needs
        questions nearer each other to call them one request: at the default bar
        nearly every question would be one group."""
        for question in (BARMAN[0], BARMAN[2]):
            assert self.ask(question).abstained, question
        since = timezone.now() - timedelta(days=1)

        def grouped(floor):
            with override_settings(RELEVANCE_FLOOR=floor):
                found = question_groups(
                    user=self.editor, concern=Concern.UNANSWERED, since=since
                )
            return found.threshold, [g.count for g in found.groups]

        assert grouped(None) == (0.70, [2])
        assert grouped(0.482) == (0.70, [2])
        assert grouped(0.86) == (0.9189, [1, 1])
        self.client.force_login(self.editor)
        with override_settings(RELEVANCE_FLOOR=0.86):
            html = self.client.get(PAGE).content.decode()
        assert "when that cosine similarity is at least 0.92." in html
