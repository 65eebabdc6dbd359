from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from ingest.planning.recrawl import recrawl_due
from ingest.planning.recrawl_command import plan_send, source_named


class Command(BaseCommand):
    help = (
        "Check pages again: the due ones (each page is due at its last check plus "
        "its interval), or all. A django-q2 schedule runs --due every "
        "RECRAWL_SCHEDULE_MINUTES minutes; this runs it now."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        which = parser.add_mutually_exclusive_group()
        which.add_argument(
            "--due", action="store_true", help="Only pages that are due (default)."
        )
        which.add_argument("--all", action="store_true", help="Every page.")
        parser.add_argument("--source", help="Only this source's pages (its name).")
        parser.add_argument(
            "--dry-run", action="store_true", help="Count what would be pushed."
        )
        parser.add_argument("--limit", type=int, help="Push at most this many pages.")

    def handle(self, *args: Any, all: bool, source: str | None, dry_run: bool,
               limit: int | None, **options: Any) -> None:  # fmt: skip
        plan = recrawl_due(
            source=source_named(source), everything=all, limit=limit, dry_run=dry_run
        )
        if dry_run:
            self.stdout.write(f"Dry run: {plan}; nothing queued.")
            return
        plan_send(self, plan)
