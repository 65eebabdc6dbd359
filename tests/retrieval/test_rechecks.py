"""Answers checked again: an answer remembers what it quoted, goes stale when a
recrawl takes that text away, and is asked again within a budget, as its asker."""

from __future__ import annotations

from django.contrib.auth.models import Group, User
from django.db import transaction
from django.test import Client, override_settings
from rest_framework.authtoken.models import Token

from ingest.delivery.rescope import pages_rescope
from retrieval.asked import Concern, question_groups
from retrieval.models import QueryLog
from retrieval.questions import question_answer
from retrieval.rechecks import answer_history, answers_recheck
from sources.models import PageVersion, Source
from tests.world import FIXTURES, HarborWorld, harbor_url

QUEUES = (FIXTURES / "corpus" / "queues.md").read_text()
QUESTION = "How do I pause a queue?"


class RecheckWorld(HarborWorld):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.reader = User.objects.create_user("reader", password="a long password 1")

    def ask(self, question: str = QUESTION, user=None) -> QueryLog:
        result = question_answer(question=question, user=user or self.reader, k=5)
        return QueryLog.objects.get(pk=result.log_id)

    def edit_queues(self, old: str, new: str) -> PageVersion:
        self.ingest(
            harbor_url("queues"),
            QUEUES.replace(old, new),
            content_type="text/markdown",
        )
        return PageVersion.objects.filter(page__url=harbor_url("queues")).latest(
            "recorded_at"
        )


class RecheckTests(RecheckWorld):
    def test_an_answer_remembers_the_texts_it_quoted(self):
        log = self.ask()

        page = self.harbor.pages.get(url=harbor_url("queues"))
        quoted = set(page.chunks.values_list("embed_hash", flat=True))
        assert log.status == QueryLog.Status.CURRENT
        assert log.cited_pages[0] == page.pk
        assert set(log.cited_hashes) & quoted

    def test_an_edit_of_the_quoted_section_makes_it_stale_with_the_change(self):
        log = self.ask()

        change = self.edit_queues("Jobs\nalready running finish normally.",
                                  "Jobs already running are stopped.")  # fmt: skip

        log.refresh_from_db()
        assert change.kind == PageVersion.Kind.CHANGED
        assert log.status == QueryLog.Status.STALE
        assert log.stale_change == change and log.stale_at is not None

    def test_an_edit_elsewhere_leaves_it_current(self):
        log = self.ask()
        other = self.ask("What priority can a queue have?")

        self.edit_queues("from 1 to 10", "from 1 to 20")

        log.refresh_from_db()
        other.refresh_from_db()
        assert log.status == QueryLog.Status.CURRENT
        assert other.status == QueryLog.Status.STALE

    def test_a_gone_page_makes_its_answers_stale(self):
        log = self.ask()

        self.ingest(harbor_url("queues"), "gone", original_status=404)

        log.refresh_from_db()
        assert log.status == QueryLog.Status.STALE
        assert log.stale_change.kind == PageVersion.Kind.DELETED

    def test_a_page_leaving_its_source_makes_its_answers_stale_by_that_change(self):
        log = self.ask()

        Source.objects.filter(pk=self.harbor.pk).update(deny_patterns="/queues")
        pages_rescope()

        log.refresh_from_db()
        assert log.status == QueryLog.Status.STALE
        assert log.stale_change.kind == PageVersion.Kind.OUT_OF_SCOPE

    def test_asked_again_a_changed_answer_supersedes_the_old_one(self):
        log = self.ask()
        self.edit_queues("stops workers from taking new jobs",
                         "stops workers from taking any new job")  # fmt: skip

        done = answers_recheck()

        log.refresh_from_db()
        new = log.superseded_by
        assert (done.asked, done.changed, done.held, done.left) == (1, 1, 0, 0)
        assert log.status == QueryLog.Status.SUPERSEDED and log.rechecked_at
        assert new.status == QueryLog.Status.CURRENT and new.recheck_of == log
        assert "any new job" in new.answer and "any new job" not in log.answer
        assert new.user == self.reader and new.text == log.text
        assert [a.pk for a in answer_history(log)] == [log.pk, new.pk]
        assert [a.pk for a in answer_history(new)] == [log.pk, new.pk]

    def test_asked_again_the_same_answer_still_holds(self):
        log = self.ask()
        QueryLog.objects.filter(pk=log.pk).update(status=QueryLog.Status.STALE)

        done = answers_recheck()

        log.refresh_from_db()
        assert (done.asked, done.held, done.changed) == (1, 1, 0)
        assert log.status == QueryLog.Status.CURRENT and log.rechecked_at
        assert log.superseded_by is None
        assert QueryLog.objects.count() == 1, "no second answer is logged"

    def test_the_budget_takes_the_most_asked_question_first(self):
        rare = self.ask("What priority can a queue have?")
        asked = [self.ask(), self.ask(), self.ask()]
        QueryLog.objects.update(status=QueryLog.Status.STALE)

        with override_settings(ANSWER_RECHECKS_PER_HOUR=1):
            first = answers_recheck()
            second = answers_recheck()  # the hour's one is spent

        assert (first.asked, first.left) == (1, 3) and second.asked == 0
        checked = QueryLog.objects.filter(rechecked_at__isnull=False).get()
        assert checked.pk == asked[-1].pk, "the most asked, then the most recent"
        rare.refresh_from_db()
        assert rare.status == QueryLog.Status.STALE

    def test_a_question_is_asked_again_as_its_asker_never_as_the_system(self):
        ops = Group.objects.create(name="operations")
        runbooks = Source.objects.create(
            name="Runbooks", seed_urls="https://runbooks.example/"
        )
        runbooks.allowed_groups.add(ops)
        anonymous = self.ask(user=self.reader)
        QueryLog.objects.filter(pk=anonymous.pk).update(user=None)
        self.ingest(
            "https://runbooks.example/pause/",
            "# Pausing\n\nTo pause a queue in production, page the on-call "
            "operator first, then run harbor queue pause NAME.\n",
            content_type="text/markdown",
        )
        self.edit_queues("stops workers from taking new jobs",
                         "stops workers from taking any new job")  # fmt: skip

        answers_recheck()

        anonymous.refresh_from_db()
        new = anonymous.superseded_by
        assert new is not None and new.user is None
        assert "on-call" not in new.answer
        cited = set(new.cited_pages)
        assert not cited & set(runbooks.pages.values_list("pk", flat=True))


class AnswerReadAgainTests(RecheckWorld):
    """The asker reads an answer again, over the API and on its page."""

    def test_the_api_gives_the_status_the_change_and_the_history(self):
        log = self.ask()
        change = self.edit_queues("stops workers from taking new jobs",
                                  "stops workers from taking any new job")  # fmt: skip
        stale = self.api(log.pk)
        answers_recheck()
        superseded = self.api(log.pk)

        assert stale.status_code == 200
        assert stale.json()["status"] == "stale"
        assert stale.json()["change"]["summary"] == change.summary
        assert stale.json()["change"]["diff_url"].endswith(f"/diff/?b={change.pk}")
        body = superseded.json()
        assert body["status"] == "superseded" and body["superseded_by"]
        assert body["current"]["id"] == body["superseded_by"]
        assert "any new job" in body["current"]["answer"]
        assert [h["status"] for h in body["history"]] == ["superseded", "current"]

    def test_only_its_asker_reads_it(self):
        log = self.ask()
        other = User.objects.create_user("other", password="a long password 2")

        assert self.api(log.pk, other).status_code == 404
        assert self.api(999_999).status_code == 404
        self.client.logout()
        assert self.client.get(f"/api/answers/{log.pk}/").status_code == 401
        self.client.force_login(other)
        assert self.client.get(f"/answers/{log.pk}/").status_code == 404

    def test_the_page_says_the_answer_changed_with_the_new_one(self):
        log = self.ask()
        self.client.force_login(self.reader)
        assert b"Still holds" not in self.client.get(f"/answers/{log.pk}/").content
        self.edit_queues("stops workers from taking new jobs",
                         "stops workers from taking any new job")  # fmt: skip
        stale = self.client.get(f"/answers/{log.pk}/")
        answers_recheck()

        page = self.client.get(f"/answers/{log.pk}/")

        assert b"it will be asked again shortly" in stale.content
        assert b"This answer changed on" in page.content
        assert b"1 line changed in Queues" in page.content
        assert page.content.count(b"any new job") == 1, "the new answer, once"

    def api(self, log_id: int, user=None):
        self.client.force_login(user or self.reader)
        return self.client.get(f"/api/answers/{log_id}/")


class KeptAnswerPageTests(RecheckWorld):
    """A kept answer reads as the Ask page's: its sources listed with how fresh
    each is, its [n] markers linked to them, and whether it still holds."""

    def page(self, log: QueryLog) -> str:
        self.client.force_login(self.reader)
        return self.client.get(f"/answers/{log.pk}/").content.decode()

    def test_it_lists_its_sources_links_its_markers_and_says_it_still_holds(self):
        log = self.ask()
        assert log.cited_pages, "the question is answered from the docs"

        page = self.page(log)

        answer = page.split('id="answer">')[1].split("</div>")[0]
        assert 'href="#citation-1"' in answer
        sources = page.split("<h2>Sources</h2>")[1]
        assert sources.count('<li id="citation-') == len(log.cited_pages)
        assert f'href="{harbor_url("queues")}"' in sources
        assert "verified <time" in sources and "changed <time" in sources
        status = page.split('id="status">')[1].split("</p>")[0]
        assert status.startswith("Still current: none of the text it quoted has")
        assert "its sources were checked <time" in status

    def test_a_superseded_answer_shows_the_new_answer_with_its_sources(self):
        log = self.ask()
        self.edit_queues("stops workers from taking new jobs",
                         "stops workers from taking any new job")  # fmt: skip
        answers_recheck()

        page = self.page(log)

        current = page.split('id="current">')[1].split("</div>")[0]
        assert "any new job" in current and 'href="#citation-1"' in current
        assert '<li id="citation-1">' in page.split("The answer given then")[0]

    def test_a_source_its_reader_can_no_longer_read_is_named_nowhere(self):
        log = self.ask()
        group = Group.objects.create(name="harbor-team")
        self.harbor.allowed_groups.set([group])

        page = self.page(log)

        sources = page.split("<h2>Sources</h2>")[1]
        assert "A source you can no longer read" in sources
        assert harbor_url("queues") not in page
        assert "verified <time" not in sources

    def test_the_api_answer_names_its_kept_answer_for_a_signed_in_caller(self):
        self.client.force_login(self.reader)

        body = self.client.post(
            "/api/query/", {"question": QUESTION}, content_type="application/json"
        ).json()

        log = QueryLog.objects.get(pk=body["answer_id"])
        assert log.user == self.reader and log.text == QUESTION
        assert body["answer_url"] == f"http://testserver/answers/{log.pk}/"
        kept = self.client.get(f"/api/answers/{log.pk}/").json()
        assert kept["sources"][0]["url"] == harbor_url("queues")
        assert kept["sources"][0]["last_verified_at"]

    def test_an_anonymous_readers_answer_names_no_kept_answer(self):
        Source.objects.filter(pk=self.harbor.pk).update(public=True)

        body = self.client.post(
            "/api/query/", {"question": QUESTION}, content_type="application/json"
        ).json()

        assert body["answer"] and (body["answer_id"], body["answer_url"]) == (
            None,
            None,
        )


class AnswerFeedbackTests(RecheckWorld):
    """*Useful* / *Not useful* on a kept answer: over the API by its asker's
    token, and on its page, as on the Ask page."""

    def rate(self, log_id: int, helpful, user=None):
        if user is not None:
            self.client.force_login(user)
        return self.client.post(
            f"/api/answers/{log_id}/feedback/",
            {"helpful": helpful},
            content_type="application/json",
        )

    def test_the_asker_rates_their_answer_over_the_api(self):
        log = self.ask()
        token = Token.objects.create(user=self.reader)
        app = Client(HTTP_AUTHORIZATION=f"Token {token.key}")

        def rate(helpful: bool):
            return app.post(
                f"/api/answers/{log.pk}/feedback/",
                {"helpful": helpful},
                content_type="application/json",
            )

        unhelpful = rate(False)
        log.refresh_from_db()
        first = log.feedback
        helpful = rate(True)
        log.refresh_from_db()

        assert (unhelpful.status_code, unhelpful.content) == (204, b"")
        assert first == QueryLog.Feedback.UNHELPFUL
        assert helpful.status_code == 204
        assert log.feedback == QueryLog.Feedback.HELPFUL and log.feedback_at

    def test_only_its_asker_rates_it(self):
        log = self.ask()
        other = User.objects.create_user("other", password="a long password 2")
        root = User.objects.create_superuser("root")

        others = [self.rate(log.pk, False, user) for user in [other, root]]
        missing = self.rate(999_999, False, self.reader)
        self.client.logout()
        anonymous = self.rate(log.pk, False)

        for response in [*others, missing]:
            assert response.status_code == 404
            assert response.json() == {
                "error": "not_found",
                "detail": "No such answer of yours.",
            }
        assert anonymous.status_code == 401
        log.refresh_from_db()
        assert log.feedback is None

    def test_a_rating_is_true_or_false(self):
        log = self.ask()

        for given in ["no", 0, None, "false"]:
            with self.subTest(helpful=given):
                response = self.rate(log.pk, given, self.reader)
                assert response.status_code == 400
                assert response.json()["error"] == "invalid"
                assert "helpful" in response.json()["fields"]

    def test_the_kept_answers_page_has_the_buttons_for_its_asker(self):
        log = self.ask()
        self.client.force_login(self.reader)
        page = self.client.get(f"/answers/{log.pk}/").content.decode()
        csrf = Client(enforce_csrf_checks=True)
        csrf.force_login(self.reader)
        form = csrf.get(f"/answers/{log.pk}/").content.decode()
        token = form.split('name="csrfmiddlewaretoken" value="', 1)[1].split('"')[0]

        back = csrf.post(
            "/feedback/",
            {"log": log.pk, "helpful": "0", "next": f"/answers/{log.pk}/",
             "csrfmiddlewaretoken": token},
        )  # fmt: skip
        again = self.client.get(f"/answers/{log.pk}/").content.decode()
        self.client.force_login(User.objects.create_superuser("root"))
        read_by_root = self.client.get(f"/answers/{log.pk}/").content.decode()

        feedback = page.split('id="feedback">')[1].split("</div>")[0]
        assert f'<input type="hidden" name="log" value="{log.pk}">' in feedback
        assert 'value="1">Yes, useful</button>' in feedback
        assert 'value="0">Not useful</button>' in feedback
        assert (back.status_code, back["Location"]) == (302, f"/answers/{log.pk}/")
        log.refresh_from_db()
        assert log.feedback == QueryLog.Feedback.UNHELPFUL
        assert '<span class="meta" id="rated">(you said: not useful)</span>' in again
        assert 'id="feedback"' not in read_by_root, "not the superuser's to rate"


class ChangesInTheAdminTests(RecheckWorld):
    def test_a_change_says_how_many_answers_it_affected_and_the_source_its_week(self):
        self.ask()
        change = self.edit_queues("stops workers from taking new jobs",
                                  "stops workers from taking any new job")  # fmt: skip
        self.client.force_login(
            User.objects.create_superuser("admin", "a@example.com", "pw")
        )

        changes = self.client.get("/admin/sources/pageversion/", {"kind": "changed"})
        affected = self.client.get(
            "/admin/retrieval/querylog/", {"stale_change__id__exact": change.pk}
        )
        overview = self.client.get(f"/admin/sources/source/{self.harbor.pk}/change/")

        link = f'?stale_change__id__exact={change.pk}">1</a>'
        assert link.encode() in changes.content
        assert affected.status_code == 200
        assert b"How do I pause a queue?" in affected.content
        assert b"11 page changes in the last 7 days</a>: 10 new, 1 changed" in (
            overview.content
        )

    def test_the_pages_versions_say_what_changed_and_the_answers_affected(self):
        self.ask()
        change = self.edit_queues("stops workers from taking new jobs",
                                  "stops workers from taking any new job")  # fmt: skip
        self.client.force_login(
            User.objects.create_superuser("admin", "a@example.com", "pw")
        )

        page = self.client.get(f"/admin/sources/page/{change.page_id}/change/")

        assert b"1 line changed in Queues \xe2\x80\xba Pausing a queue" in page.content
        assert f'?stale_change__id__exact={change.pk}">1</a>'.encode() in page.content


class RecheckLoggedAsSuchTests(RecheckWorld):
    """A question asked again is logged for its asker as a recheck: the Query logs
    say so, and the questions readers asked count it nowhere."""

    def test_a_recheck_is_no_question_of_its_asker_in_the_counts_or_the_groups(self):
        docs = Group.objects.create(name="docs")
        self.harbor.allowed_groups.add(docs)
        self.reader.groups.add(docs)
        log = self.ask()
        self.edit_queues("stops workers from taking new jobs",
                         "stops workers from taking any new job")  # fmt: skip
        # Asked again as the reader, who can no longer read the docs: no answer.
        self.reader.groups.remove(docs)
        answers_recheck()
        admin = User.objects.create_superuser("admin", "a@example.com", "pw")
        self.client.force_login(admin)

        log.refresh_from_db()
        recheck = log.superseded_by
        groups = {
            concern: question_groups(user=admin, concern=concern, since=log.created_at)
            for concern in Concern
        }
        listed = self.client.get("/admin/retrieval/querylog/").content.decode()
        kept = self.client.get("/admin/retrieval/querylog/", {"kind": "recheck"})
        questions = self.client.get("/admin/retrieval/querylog/", {"kind": "query"})

        assert recheck.kind == QueryLog.Kind.RECHECK and recheck.abstained
        assert (recheck.user, recheck.recheck_of) == (self.reader, log)
        assert log.kind == QueryLog.Kind.QUERY
        assert [(g.asked, g.distinct) for g in groups.values()] == [(0, 0)] * 3
        assert f'<span class="kb-kind">recheck</span> {QUESTION}' in listed
        assert list(kept.context["cl"].result_list) == [recheck]
        assert list(questions.context["cl"].result_list) == [log]

    def test_a_stale_recheck_is_asked_again_and_read_again_by_its_asker(self):
        log = self.ask()
        self.edit_queues("stops workers from taking new jobs",
                         "stops workers from taking any new job")  # fmt: skip
        answers_recheck()
        recheck = QueryLog.objects.get(kind=QueryLog.Kind.RECHECK)
        self.edit_queues("stops workers from taking new jobs",
                         "stops every worker from taking new jobs")  # fmt: skip

        recheck.refresh_from_db()
        self.client.force_login(self.reader)
        read = self.client.get(f"/api/answers/{recheck.pk}/")

        assert recheck.status == QueryLog.Status.STALE
        assert read.status_code == 200 and read.json()["status"] == "stale"
        assert [h["id"] for h in read.json()["history"]] == [log.pk, recheck.pk]


# How an asker loses the source of a change, or keeps it: (name, how the docs are
# shared at first, the asker's groups, what happens after the change, who reads
# the answer, whether the change is shown).
ACCESS = [
    ("removed from the source's group", {"docs"}, False, {"docs"},
     lambda w: w.reader.groups.clear(), "asker", False),
    ("the source made private again", {"docs"}, True, set(),
     lambda w: Source.objects.filter(pk=w.harbor.pk).update(public=False),
     "asker", False),
    ("the source given to another group", set(), False, set(),
     lambda w: w.harbor.allowed_groups.add(Group.objects.get(name="docs")),
     "asker", False),
    ("still in the source's group", {"docs"}, False, {"docs"},
     lambda w: None, "asker", True),
    ("still public", {"docs"}, True, set(), lambda w: None, "asker", True),
    ("a superuser, the asker removed", {"docs"}, False, {"docs"},
     lambda w: w.reader.groups.clear(), "superuser", True),
]  # fmt: skip


class KeptAnswerChangeAccessTests(RecheckWorld):
    """A kept answer shows the change that made it stale only while its reader may
    read that change's source now: not its summary, title, address or diff."""

    def test_the_change_is_shown_only_to_whoever_may_read_its_source_now(self):
        for name, groups, public, member_of, then, reader, shown in ACCESS:
            with self.subTest(name), transaction.atomic():
                change, log = self.stale_answer(groups, public, member_of)
                then(self)
                who = self.reader
                if reader == "superuser":
                    who = User.objects.create_superuser("root", "r@example.com")
                self.client.force_login(who)

                api = self.client.get(f"/api/answers/{log.pk}/").json()
                page = self.client.get(f"/answers/{log.pk}/").content.decode()

                link = f'href="{harbor_url("queues")}"'
                assert api["status"] == "stale"
                assert (api["change"] is not None) is shown
                if shown:
                    assert api["change"]["summary"] == change.summary
                    assert api["change"]["page_url"] == harbor_url("queues")
                assert (change.summary in page, link in page) == (shown, shown)
                assert "it will be asked again shortly" in page
                transaction.set_rollback(True)

    def stale_answer(
        self, groups: set[str], public: bool, member_of: set[str]
    ) -> tuple[PageVersion, QueryLog]:
        for name in groups | {"docs"}:
            Group.objects.get_or_create(name=name)
        self.harbor.allowed_groups.set(Group.objects.filter(name__in=groups))
        Source.objects.filter(pk=self.harbor.pk).update(public=public)
        self.reader.groups.set(Group.objects.filter(name__in=member_of))
        log = self.ask()
        change = self.edit_queues("stops workers from taking new jobs",
                                  "stops workers from taking any new job")  # fmt: skip
        log.refresh_from_db()
        assert log.stale_change == change
        return change, log
