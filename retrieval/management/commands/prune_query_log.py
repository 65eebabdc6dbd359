"""``manage.py prune_query_log``: the query log's old rows deleted now, as the
hourly job does."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand

from kbsite.progress import ProgressBar
from retrieval.models import QueryLog
from retrieval.retention import query_log_cutoff, query_log_prune_batches


class Command(BaseCommand):
    help = (
        "Delete query log rows older than QUERY_LOG_DAYS, a batch at a time, but "
        "those a reader rated and every answer of a question whose history keeps "
        "a newer or rated one. Safe to interrupt and run again."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--days",
            type=int,
            default=None,
            help="Age in days past which rows go, for this run (default: "
            "QUERY_LOG_DAYS; 0 keeps every row).",
        )

    def handle(self, *args, days: int | None, **options) -> None:
        days = settings.QUERY_LOG_DAYS if days is None else max(days, 0)
        before = query_log_cutoff(days=days)
        if before is None:
            self.stdout.write("0 days: every query log row is kept")
            return
        total = QueryLog.objects.unrated_before(before).count()
        bar = ProgressBar(self.stderr, label="rows examined")
        examined = deleted = 0
        for done in query_log_prune_batches(before=before):
            examined += done.examined
            deleted += done.deleted
            bar.update(examined, total)
        bar.close()
        self.stdout.write(
            f"{deleted} query log rows older than {days} days pruned "
            f"({examined} examined)"
        )
