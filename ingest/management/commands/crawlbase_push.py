from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ingest.fetchers.kinds import fetcher_kind
from ingest.planning.recrawl import source_crawl_start, urls_recrawl
from ingest.planning.recrawl_command import plan_send, source_named
from ingest.planning.sitemap_seeds import source_sitemaps_push
from sources.models import SYSTEM


class Command(BaseCommand):
    help = (
        "Push URLs to Crawlbase's Enterprise Crawler (it delivers them to the "
        "webhook). URLs in flight are skipped; pushes go at CRAWLBASE_PUSH_RATE."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("urls", nargs="*", help="URLs to push.")
        parser.add_argument(
            "--file", type=Path, help="A file of URLs to push, one per line."
        )
        parser.add_argument(
            "--source",
            help="Push this source's seeds and the in-scope URLs of its sitemaps "
            "(with URLs: the source they belong to; default: the most specific "
            "source covering each URL).",
        )

        parser.add_argument(
            "--no-sitemaps",
            dest="sitemaps",
            action="store_false",
            help="With --source: push the seeds only, without reading its sitemaps.",
        )

    def handle(self, *args: Any, urls: list[str], file: Path | None,
               source: str | None, sitemaps: bool, **options: Any) -> None:  # fmt: skip
        owner = source_named(source)
        if file is not None:
            try:
                urls = [*urls, *file.read_text().split()]
            except OSError as exc:
                raise CommandError(f"cannot read {file}: {exc}") from exc
        if urls:
            plan = urls_recrawl(urls=urls, source=owner, user=SYSTEM)
        elif owner is not None:
            plan = source_crawl_start(source=owner, sitemaps=False)
            if sitemaps and not fetcher_kind(owner).reads_sitemaps:
                seeds, listed = source_sitemaps_push(source=owner)
                self.stdout.write(f"sitemaps: {seeds}")
                plan += listed
        else:
            raise CommandError("give URLs, --file or --source")
        plan_send(self, plan)
