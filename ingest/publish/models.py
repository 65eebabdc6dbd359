"""A docs site's publish tokens and the checks for changes they start."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from ingest.crawl.models import Crawl
from ingest.fetchers.kinds import FetcherKind, fetcher_kind
from kbsite.models import HashedKey


class PublishToken(HashedKey):
    """A secret that lets one caller, such as a CI step after a deploy, ask for a
    check of one source for changes, and for nothing else (refused with 401 once
    revoked)."""

    PREFIX = "kbp_"

    source = models.ForeignKey(
        "sources.Source", on_delete=models.CASCADE, related_name="publish_tokens"
    )
    name = models.CharField(
        max_length=100, help_text="Who uses it, e.g. GitHub Actions deploy of the docs."
    )

    class Meta(HashedKey.Meta):
        verbose_name = "publish token"

    def __str__(self) -> str:
        return f"{self.name} ({self.key_start}…)"


class PublishCheck(models.Model):
    """One "I just published, look now" for a source: its sitemaps are read
    first, then the pages they date after their last check (and pages new to the
    source) go to its crawler, then the rest of its pages. A request while a check
    of the source is still queued joins that one (one queued per source)."""

    class State(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Reading the sitemaps"
        DONE = "done", "Pages handed to the crawler"
        FAILED = "failed", "Failed"

    source = models.ForeignKey(
        "sources.Source", on_delete=models.CASCADE, related_name="publish_checks"
    )
    state = models.CharField(max_length=10, choices=State.choices, default=State.QUEUED)
    requested_at = models.DateTimeField(default=timezone.now)
    requests = models.PositiveIntegerField(
        default=1, help_text="Requests this check answers: repeats join a queued one."
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The editor who asked, if an editor did.",
    )
    token = models.ForeignKey(
        PublishToken,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="checks",
        help_text="The publish token that asked, if one did.",
    )
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    sitemaps_read = models.PositiveIntegerField(default=0)
    sitemap_urls = models.PositiveIntegerField(
        "sitemap URLs", default=0, help_text="URLs its sitemaps list in its scope."
    )
    dated = models.PositiveIntegerField(
        "dated after their last check",
        default=0,
        help_text="Pages the sitemaps date after their last check: handed over first.",
    )
    new_pages = models.PositiveIntegerField(
        default=0, help_text="Pages the sitemaps list that the source did not have."
    )
    others = models.PositiveIntegerField(
        "other pages",
        default=0,
        help_text="The rest of the pages handed over: conditional requests for "
        "the built-in fetcher; pushes for Crawlbase, of pages no sitemap dates.",
    )
    not_pushed = models.PositiveIntegerField(
        default=0,
        help_text="Crawlbase: pages the sitemaps date before their last check, "
        "not pushed (each push is a paid crawl).",
    )
    in_flight = models.PositiveIntegerField(
        default=0,
        help_text="Pages already on their way (a push waiting or sent, or "
        "queued in a crawl): not handed over twice.",
    )
    crawl = models.ForeignKey(
        Crawl,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The built-in crawler's crawl its pages joined.",
    )
    note = models.TextField(
        blank=True, help_text="Sitemaps that could not be read, or why it failed."
    )
    reading = models.JSONField(
        null=True,
        blank=True,
        editable=False,
        help_text="While it runs, where reading its sitemaps stands between two of "
        "its jobs (ingest.planning.sitemap_seeds.SitemapReading): the files still "
        "to read.",
    )

    class Meta:
        verbose_name = "check for changes"
        verbose_name_plural = "checks for changes"
        ordering = ["-requested_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["source"],
                condition=Q(state="queued"),
                name="publishcheck_one_queued_per_source",
            ),
        ]
        indexes = [
            models.Index(
                fields=["source", "-requested_at"], name="publishcheck_source_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"check of {self.source} for changes #{self.pk}"

    @property
    def fetcher(self) -> FetcherKind:
        return fetcher_kind(self.source)

    def summary(self) -> str:
        """What the check does, or did, in the editor's words."""
        if self.state == self.State.QUEUED:
            return self._plan()
        if self.state == self.State.RUNNING:
            if not self.sitemaps_read:
                return "Reading the sitemaps."
            return (
                f"Reading the sitemaps: {_count(self.sitemaps_read, 'sitemap')} "
                f"read so far ({_count(self.sitemap_urls, 'URL')} in scope)."
            )
        if self.state == self.State.FAILED:
            return f"Failed: {self.note}"
        read = (
            f"{_count(self.sitemaps_read, 'sitemap')} read "
            f"({_count(self.sitemap_urls, 'URL')} in scope)"
            if self.sitemaps_read
            else "No sitemap read"
        )
        if self.note:
            read += f"; could not read: {self.note}"
        first = (
            f"{_count(self.dated, 'page')} the sitemaps date after their last "
            f"check and {_count(self.new_pages, 'new page')} first"
        )
        fetcher = self.fetcher
        if fetcher.crawled_here:
            done = (
                f"Queued for the {fetcher.name}: {first}, then the other "
                f"{_count(self.others, 'page')} {self._rest_how()}"
            )
            waiting = "already queued in a crawl"
        else:
            done = (
                f"Pushed to {fetcher.name}: {first}, then "
                f"{_count(self.others, 'page')} no sitemap dates; "
                f"{_count(self.not_pushed, 'page')} dated before their last check "
                "not pushed (each push is a paid crawl)"
            )
            waiting = "with a push already in flight"
        return f"{read}. {done}; {self.in_flight:,} of them {waiting}."

    def _plan(self) -> str:
        pages = _count(self.source.pages.count(), "page")
        if not self.fetcher.crawled_here:
            return (
                f"Queued: the sitemaps of {self.source} are read first; the pages "
                "they date after their last check and new pages are pushed to "
                f"{self.fetcher.name} first, then those of its {pages} no sitemap "
                "dates (pages a sitemap dates before their last check are not pushed: "
                "each push is a paid crawl)."
            )
        return (
            f"Queued: the sitemaps of {self.source} are read first; the pages they "
            "date after their last check and new pages are fetched first, then "
            f"the rest of its {pages} {self._rest_how()}."
        )

    def _rest_how(self) -> str:
        if self.fetcher.conditional_requests:
            return "by conditional request (a 304 when unchanged)"
        # Whole pages, hash-gated.
        return "again (whole: unchanged text is not embedded again)"


class PublishCheckEntry(models.Model):
    """A page URL a running check's sitemaps list in its source's scope, kept
    from one of the check's jobs to the next while it reads them, and deleted
    once it hands the pages over."""

    publish_check = models.ForeignKey(
        PublishCheck, on_delete=models.CASCADE, related_name="entries"
    )
    position = models.PositiveIntegerField(
        help_text="Its place in the order the sitemaps list the URLs, from 0."
    )
    url = models.URLField("URL", max_length=2048, help_text="Canonical.")
    lastmod = models.DateTimeField(
        null=True, blank=True, help_text="The sitemap's lastmod for this URL."
    )
    day_only = models.BooleanField(
        default=False, help_text="The lastmod named a day only (2026-05-01)."
    )

    class Meta:
        verbose_name = "sitemap entry of a check for changes"
        verbose_name_plural = "sitemap entries of checks for changes"
        constraints = [
            models.UniqueConstraint(
                fields=["publish_check", "url"], name="publishcheckentry_url_uniq"
            ),
            models.UniqueConstraint(
                fields=["publish_check", "position"],
                name="publishcheckentry_position_uniq",
            ),
        ]

    def __str__(self) -> str:
        return self.url


def _count(number: int, noun: str) -> str:
    return f"{number:,} {noun}{'' if number == 1 else 's'}"
