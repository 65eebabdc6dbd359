"""The query log's retention: rows older than QUERY_LOG_DAYS go, a batch at a
time, unless a reader rated them or an answer's history still needs them."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from itertools import islice

from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import TestCase, override_settings
from django.utils import timezone
from django_q.models import Schedule

from retrieval.models import QueryLog
from retrieval.rechecks import answer_history
from retrieval.retention import query_log_prune, query_log_prune_batches

DAY = timedelta(days=1)
Kind, Status = QueryLog.Kind, QueryLog.Status


@override_settings(QUERY_LOG_DAYS=90)
class RetentionTests(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.reader = User.objects.create_user("reader", password="a long password 1")

    def setUp(self):
        self.now = timezone.now()

    def log(self, name: str, days: float, **fields: object) -> QueryLog:
        """A log row named by its text, asked ``days`` ago."""
        fields.setdefault("kind", Kind.QUERY)
        row = QueryLog.objects.create(
            text=name, latency_ms=5, user=self.reader, **fields
        )
        QueryLog.objects.filter(pk=row.pk).update(created_at=self.now - days * DAY)
        return row

    def chain(self, name: str, *days: float) -> list[QueryLog]:
        """A question asked ``days[0]`` ago and asked again after each of the
        other days, each new answer superseding the one before (as rechecks log
        them)."""
        rows = [self.log(name, days[0])]
        for n, age in enumerate(days[1:], start=1):
            rows.append(self.log(f"{name} {n}", age, recheck_of=rows[-1]))
            QueryLog.objects.filter(pk=rows[-2].pk).update(
                status=Status.SUPERSEDED, superseded_by=rows[-1]
            )
        return rows

    def left(self) -> set[str]:
        return set(QueryLog.objects.values_list("text", flat=True))

    def test_old_rows_go_unless_rated_recent_or_in_a_kept_answers_history(self):
        self.log("old search", 91, kind=Kind.SEARCH)
        self.log("old question", 200)
        self.log("old stale question", 120, status=Status.STALE)
        self.log("old, rated useful", 300, feedback=QueryLog.Feedback.HELPFUL)
        self.log("old, rated not useful", 91, feedback=QueryLog.Feedback.UNHELPFUL)
        self.log("recent question", 89)
        self.log("recent search", 0, kind=Kind.SEARCH)
        # Rechecks: the question's answers, one history, go or stay together.
        self.chain("asked again, all old", 200, 150, 100)
        self.chain("asked again lately", 200, 150, 1)
        self.chain("rated, then asked again", 200, 150)
        QueryLog.objects.filter(text="rated, then asked again").update(
            feedback=QueryLog.Feedback.HELPFUL
        )
        self.chain("its new answer rated", 200, 100)
        QueryLog.objects.filter(text="its new answer rated 1").update(
            feedback=QueryLog.Feedback.UNHELPFUL
        )

        pruned = query_log_prune(now=self.now)

        assert self.left() == {
            "old, rated useful",
            "old, rated not useful",
            "recent question",
            "recent search",
            "asked again lately", "asked again lately 1", "asked again lately 2",
            "rated, then asked again", "rated, then asked again 1",
            "its new answer rated", "its new answer rated 1",
        }  # fmt: skip
        assert pruned == 6
        first = QueryLog.objects.get(text="asked again lately")
        assert [a.text for a in answer_history(first)] == [
            "asked again lately", "asked again lately 1", "asked again lately 2"
        ]  # fmt: skip

    def test_batches_go_on_past_rows_that_are_kept(self):
        for n in range(3):
            self.chain(f"kept by its recheck {n}", 200 - n, 1)
        for n in range(5):
            self.log(f"old {n}", 150 - n)

        # At most ten: batches that started again at the kept rows would never end.
        batches = list(
            islice(query_log_prune_batches(before=self.now - 90 * DAY, batch=2), 10)
        )

        kept = {f"kept by its recheck {n}" for n in range(3)}
        assert self.left() == kept | {f"{name} 1" for name in kept}
        assert [done.deleted for done in batches] == [0, 1, 2, 2]
        assert [done.examined for done in batches] == [2, 2, 2, 2]

    @override_settings(QUERY_LOG_DAYS=0)
    def test_zero_days_keeps_every_row(self):
        self.log("very old question", 5000)

        assert query_log_prune(now=self.now) == 0
        assert self.left() == {"very old question"}

    @override_settings(QUERY_LOG_DAYS=30)
    def test_the_setting_says_how_old_is_old(self):
        self.log("a month and a day", 31)
        self.log("a month less a day", 29)

        query_log_prune(now=self.now)

        assert self.left() == {"a month less a day"}

    def test_a_periodic_job_prunes_it(self):
        schedule = Schedule.objects.get(name="retrieval: prune the query log")
        assert schedule.func == "retrieval.tasks.query_log_prune_task"
        self.log("old question", 100)

        from retrieval.tasks import query_log_prune_task

        assert query_log_prune_task() == "1 query log rows older than 90 days pruned"
        assert self.left() == set()

    def test_the_command_prunes_with_a_summary(self):
        self.log("old question", 100)
        self.log("older than ten days", 11)
        self.log("today", 0)
        out = StringIO()

        call_command("prune_query_log", "--days", "10", stdout=out, stderr=StringIO())

        assert self.left() == {"today"}
        assert out.getvalue().strip() == (
            "2 query log rows older than 10 days pruned (2 examined)"
        )
