"""A crawl of a source by the built-in fetcher: its frontier of URLs and the hosts
it keeps to."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from ingest.delivery.models import Delivery


class Crawl(models.Model):
    """One crawl of a source by this product's own fetcher: its frontier is the set
    of ``CrawlUrl`` rows, so it survives restarts and several workers share it."""

    class Kind(models.TextChoices):
        SITE = "site", "Site (seeds, sitemaps and links)"
        PAGES = "pages", "Pages due again (and links new to the source)"

    class State(models.TextChoices):
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        CANCELLED = "cancelled", "Cancelled"

    source = models.ForeignKey(
        "sources.Source", on_delete=models.CASCADE, related_name="crawls"
    )
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.SITE)
    state = models.CharField(
        max_length=10, choices=State.choices, default=State.RUNNING
    )
    max_pages = models.PositiveIntegerField(help_text="e.g. 10000")
    max_depth = models.PositiveSmallIntegerField(help_text="e.g. 10")
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(
        null=True, blank=True, help_text="When a worker last took a URL of it."
    )

    class Meta:
        ordering = ["-started_at"]
        indexes = [models.Index(fields=["state", "source"], name="crawl_state_idx")]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} crawl of {self.source} #{self.pk}"

    @property
    def is_running(self) -> bool:
        return self.state == self.State.RUNNING


class CrawlUrlQuerySet(models.QuerySet["CrawlUrl"]):
    def admitted(self) -> CrawlUrlQuerySet:
        """Rows that count against the crawl's page limit: pages taken in, not
        sitemaps nor links turned away at the door."""
        refused = [CrawlUrl.Result.SCOPE, CrawlUrl.Result.TYPE]
        return self.filter(kind=CrawlUrl.Kind.PAGE).exclude(result__in=refused)

    def open(self) -> CrawlUrlQuerySet:
        return self.filter(state__in=[CrawlUrl.State.QUEUED, CrawlUrl.State.FETCHING])


class CrawlUrl(models.Model):
    """One URL of a crawl's frontier: waiting, being fetched, or done with a result."""

    class Kind(models.TextChoices):
        PAGE = "page", "Page"
        SITEMAP = "sitemap", "Sitemap"

    class State(models.TextChoices):
        QUEUED = "queued", "Queued"
        FETCHING = "fetching", "Being fetched"
        DONE = "done", "Done"

    class Result(models.TextChoices):
        FETCHED = "fetched", "Fetched and delivered"
        NOT_MODIFIED = "not_modified", "Unchanged (304 Not Modified)"
        GONE = "gone", "Gone (404/410 delivered)"
        ROBOTS = "robots", "Skipped: robots.txt or meta robots"
        SCOPE = "scope", "Skipped: out of scope"
        TYPE = "type", "Skipped: not HTML or Markdown"
        FAILED = "failed", "Failed"
        REFUSED = "refused", "Refused: private address or bad scheme"

    crawl = models.ForeignKey(Crawl, on_delete=models.CASCADE, related_name="urls")
    url = models.URLField("URL", max_length=2048, help_text="Canonical.")
    origin = models.CharField(
        max_length=300, help_text="scheme://host[:port], the unit of politeness."
    )
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.PAGE)
    depth = models.PositiveSmallIntegerField(default=0)
    state = models.CharField(max_length=10, choices=State.choices, default=State.QUEUED)
    # A page put back into a crawl by hand-written SQL (ingest.crawl.sql)
    # starts with the db_default of its result, error and attempts.
    result = models.CharField(
        max_length=20, choices=Result.choices, blank=True, default="", db_default=""
    )
    site_status = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.TextField(blank=True, default="", db_default="")
    lastmod = models.DateTimeField(
        null=True, blank=True, help_text="The sitemap's lastmod for this URL."
    )
    attempts = models.PositiveSmallIntegerField(default=0, db_default=0)
    not_before = models.DateTimeField(
        null=True, blank=True, help_text="Not fetched again before (backoff)."
    )
    claimed_at = models.DateTimeField(null=True, blank=True)
    done_at = models.DateTimeField(null=True, blank=True)
    delivery = models.ForeignKey(
        Delivery, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    objects = CrawlUrlQuerySet.as_manager()

    class Meta:
        verbose_name = "crawl URL"
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["crawl", "url"], name="crawlurl_uniq"),
        ]
        indexes = [
            models.Index(
                fields=["crawl", "state", "depth", "id"], name="crawlurl_next_idx"
            ),
            models.Index(fields=["origin", "state"], name="crawlurl_origin_idx"),
        ]

    def __str__(self) -> str:
        return self.url


class CrawlHost(models.Model):
    """What the crawler knows about one site origin: its robots.txt and when the
    next request to it may start (shared by every worker and every crawl)."""

    # Rows are also inserted by hand-written SQL (ingest.crawl.sql), which
    # leaves robots_txt, delay and pause_reason to their db_default.
    origin = models.CharField(max_length=300, unique=True)
    robots_txt = models.TextField(blank=True, default="", db_default="")
    robots_status = models.PositiveSmallIntegerField(null=True, blank=True)
    robots_fetched_at = models.DateTimeField(null=True, blank=True)
    delay = models.FloatField(
        default=0.0,
        db_default=0.0,
        help_text="Seconds between request starts (Crawl-delay).",
    )
    next_fetch_at = models.DateTimeField(default=timezone.now)
    paused_until = models.DateTimeField(
        null=True,
        blank=True,
        help_text="The site asked for a longer wait than CRAWL_MAX_DELAY: nothing "
        "goes to it before then.",
    )
    pause_reason = models.TextField(
        blank=True,
        db_default="",
        help_text="Why it is paused, e.g. robots.txt asks for a Crawl-delay of "
        "99,999,999,999 s, more than CRAWL_MAX_DELAY (86,400 s).",
    )

    class Meta:
        ordering = ["origin"]

    def __str__(self) -> str:
        return self.origin


# -- "I just published": checks for changes, and the tokens that ask for them ------
