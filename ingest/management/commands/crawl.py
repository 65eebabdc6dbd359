"""``manage.py crawl``: index a site with the built-in crawler."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError

from ingest.crawl.jobs import NotCrawledHere
from ingest.crawl.models import Crawl, CrawlUrl
from ingest.crawl.progress import Progress, crawl_progress
from ingest.crawl.services import crawl_start
from ingest.crawl.setup import CrawlRequestError, source_for_crawl
from ingest.resume import crawls_resume_locked
from kbsite.progress import ProgressBar

POLL = 0.5
# Jobs lost to a crash are queued again this often while the command watches.
RESUME_EVERY = 30.0
# Without a worker nothing moves: say so after this long.
IDLE_HINT_AFTER = 20.0


class Command(BaseCommand):
    help = (
        "Crawl a site with the built-in polite crawler and index it. With a URL and "
        "no --source, the source covering the URL is crawled, or a new one is made "
        "for the URL's site and path prefix. The crawl runs as background jobs "
        "(make run starts a worker); a crawl already running for the source is "
        "resumed, not started again."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "url",
            nargs="?",
            default="",
            help="Where to start, e.g. https://docs.example.com/guide/",
        )
        parser.add_argument("--source", default="", help="Name of the source to crawl.")
        parser.add_argument(
            "--max-pages",
            type=int,
            help="Most pages this crawl takes in (default: the source's, 10000).",
        )
        parser.add_argument(
            "--max-depth",
            type=int,
            help="Most links followed from a seed or sitemap entry (default: the "
            "source's, 10; 0 fetches only those).",
        )
        parser.add_argument(
            "--allow",
            action="append",
            default=[],
            metavar="REGEX",
            help="Add an allow pattern to the source's scope (repeatable).",
        )
        parser.add_argument(
            "--deny",
            action="append",
            default=[],
            metavar="REGEX",
            help="Add a deny pattern to the source's scope (repeatable).",
        )
        parser.add_argument(
            "--no-wait",
            action="store_true",
            help="Queue the crawl and return; follow it in the admin under Crawls.",
        )

    def handle(self, *args, url: str, source: str, **options) -> None:
        for name in ["max_pages", "max_depth"]:
            if options[name] is not None and options[name] < 0:
                raise CommandError(f"--{name.replace('_', '-')} must be 0 or more")
        try:
            chosen, created = source_for_crawl(
                url=url,
                source_name=source,
                allow=options["allow"],
                deny=options["deny"],
                max_pages=options["max_pages"],
                max_depth=options["max_depth"],
            )
            crawl, started = crawl_start(
                source=chosen,
                seeds=[url] if url else [],
                max_pages=options["max_pages"],
                max_depth=options["max_depth"],
            )
        except (CrawlRequestError, NotCrawledHere) as exc:
            raise CommandError(str(exc)) from None
        made = "new source" if created else "source"
        verb = "started" if started else "resumed (it was still running)"
        self.stdout.write(f"{made} {chosen}: crawl #{crawl.pk} {verb}")
        if options["no_wait"]:
            self.stdout.write("queued; the worker crawls it (admin: Ingest → Crawls)")
            return
        progress = self._watch(crawl)
        self._summary(crawl, progress)

    def _watch(self, crawl: Crawl) -> Progress:
        bar = ProgressBar(self.stderr, label="pages")
        started = last_resume = time.monotonic()
        hinted = False
        while True:
            progress = crawl_progress(crawl=crawl)
            bar.label = f"pages: {progress.counts()}"
            bar.update(progress.done, progress.total)
            if progress.finished:
                break
            now = time.monotonic()
            if now - last_resume > RESUME_EVERY:
                crawls_resume_locked()
                last_resume = now
            if not hinted and now - started > IDLE_HINT_AFTER and not progress.done:
                self.stderr.write(
                    "\nnothing has moved yet: is a worker running? (make run, or "
                    "manage.py qcluster)"
                )
                hinted = True
            time.sleep(POLL)
        bar.close()
        return progress

    def _summary(self, crawl: Crawl, progress: Progress) -> None:
        self.stdout.write(f"crawl #{crawl.pk} {progress.state}: {progress.counts()}")
        if progress.sitemaps:
            read = progress.sitemaps["fetched"]
            self.stdout.write(
                f"sitemaps read: {read} of {sum(progress.sitemaps.values())}"
            )
        if progress.deliveries:
            self.stdout.write(f"indexed: {progress.indexed()}")
        reached = sum(progress.pages[r] for r in ["fetched", "not_modified", "gone"])
        if not reached:
            pages = crawl.urls.filter(kind=CrawlUrl.Kind.PAGE).exclude(error="")
            errors = pages.values_list("url", "error")[:3]
            detail = "; ".join(f"{u}: {e}" for u, e in errors) or "no page was found"
            raise CommandError(f"nothing could be fetched ({detail})")
