from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Now
from django.utils import timezone

from ingest.fetchers.kinds import FetcherKind, fetcher_kind
from kbsite.models import HashedKey

# How long a queued delivery waits before the sweep asks where its job is.
QUEUED_SETTLE = timedelta(seconds=10)


class PushQuerySet(models.QuerySet["Push"]):
    def in_flight(self) -> PushQuerySet:
        """Waiting to be sent, or sent and not yet delivered nor expired."""
        return self.filter(state__in=Push.IN_FLIGHT)

    def sendable(self, *, now: datetime) -> PushQuerySet:
        return self.filter(state=Push.State.QUEUED).filter(
            Q(next_attempt_at=None) | Q(next_attempt_at__lte=now)
        )


class Push(models.Model):
    """One URL sent to Crawlbase, remembered by the request id (rid) it gave back.

    It tells which crawl a delivery answers (and so whether it is older than what the
    page already shows), and which URLs are in flight: a page has at most one push
    waiting or sent, until it is delivered or expires.
    """

    class State(models.TextChoices):
        QUEUED = "queued", "Waiting to be sent"
        SENT = "sent", "Sent, waiting for the delivery"
        DELIVERED = "delivered", "Delivered"
        EXPIRED = "expired", "No delivery in time"
        FAILED = "failed", "Could not be sent"

    IN_FLIGHT = [State.QUEUED, State.SENT]

    rid = models.CharField(
        "request id",
        max_length=100,
        unique=True,
        null=True,
        blank=True,
        help_text="Given by Crawlbase when the push is accepted.",
    )
    page = models.ForeignKey(
        "sources.Page", on_delete=models.CASCADE, related_name="pushes"
    )
    url = models.URLField("URL", max_length=2048)
    # Pushes are queued by hand-written SQL (ingest.sql), which leaves the
    # state, the time, the attempts and the error to their db_default.
    state = models.CharField(
        max_length=20,
        choices=State.choices,
        default=State.QUEUED,
        db_default=State.QUEUED,
    )
    queued_at = models.DateTimeField(default=timezone.now, db_default=Now())
    pushed_at = models.DateTimeField(
        null=True, blank=True, help_text="When Crawlbase accepted it."
    )
    delivered_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0, db_default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True, default="", db_default="")

    objects = PushQuerySet.as_manager()

    class Meta:
        verbose_name = "push to Crawlbase"
        verbose_name_plural = "pushes to Crawlbase"
        ordering = ["-queued_at"]
        indexes = [
            models.Index(fields=["page", "-pushed_at"], name="push_page_idx"),
            models.Index(
                fields=["state", "next_attempt_at"],
                name="push_state_idx",
                condition=Q(state__in=["queued", "sent"]),
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["page"],
                condition=Q(state__in=["queued", "sent"]),
                name="push_one_in_flight_per_page",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.rid or 'queued'} {self.url}"


class DeliveryQuerySet(models.QuerySet["Delivery"]):
    def claimable(self) -> DeliveryQuerySet:
        """Waiting for a worker, or claimed by one that may have died (a job that is
        offered again after a crash must be able to take its delivery back)."""
        return self.filter(state__in=[Delivery.State.QUEUED, Delivery.State.PROCESSING])

    def stalled(self, *, now: datetime, restarted_at: datetime) -> DeliveryQuerySet:
        """Deliveries that should be moving and may have lost their job: claimed
        (whether by a run still alive is ``ingest.delivery.claim``' to say), or queued.
        A queued delivery's job is written with it, so it counts after a few
        seconds (the clocks of the hosts that write the queue), or at once if it
        was queued before the database last started (a job taken then may have
        failed in the outage); a retry after a backoff, a minute after it is due
        (django-q2's scheduler looks every 30 s).
        """
        due = now - timedelta(minutes=1)
        settled = Q(queued_at__lt=now - QUEUED_SETTLE) | Q(queued_at__lt=restarted_at)
        queued = (
            Q(state=Delivery.State.QUEUED)
            & settled
            & (Q(next_attempt_at=None) | Q(next_attempt_at__lt=due))
        )
        return self.filter(queued | Q(state=Delivery.State.PROCESSING))

    def failed(self) -> DeliveryQuerySet:
        return self.filter(state=Delivery.State.FAILED)

    def requeueable(self) -> DeliveryQuerySet:
        """Not finished (or out of scope, waiting for a source), and the body is
        still there to process."""
        return self.filter(REQUEUEABLE)

    def bodies_expired(self, *, now: datetime) -> DeliveryQuerySet:
        """Out-of-scope deliveries whose body was kept for REJECTED_BODY_KEEP_DAYS."""
        kept_since = now - timedelta(days=settings.REJECTED_BODY_KEEP_DAYS)
        return self.filter(
            outcome=Delivery.Outcome.OUT_OF_SCOPE, processed_at__lt=kept_since
        ).exclude(body=None)


# Not finished, or finished out of scope (a source may cover it now); and the body
# is still there to process.
REQUEUEABLE = (~Q(state="done") | Q(outcome="out_of_scope")) & ~Q(body=None)


class Delivery(models.Model):
    """One page delivered by a crawler, claimed by its request id (rid) exactly once."""

    class State(models.TextChoices):
        QUEUED = "queued", "Queued"
        PROCESSING = "processing", "Processing"
        DONE = "done", "Done"
        FAILED = "failed", "Failed after retries"

    # Received and not yet through ingest.
    WAITING = [State.QUEUED, State.PROCESSING]

    class Outcome(models.TextChoices):
        EMBEDDED = "embedded", "Embedded (content changed)"
        UNCHANGED = "unchanged", "Unchanged (verified)"
        DUPLICATE = "duplicate", "Duplicate (same content as another page)"
        DELETED = "deleted", "Deleted (tombstoned)"
        SKIPPED = "skipped", "Skipped (crawler or site failure)"
        REJECTED = "rejected", "Rejected (bad input)"
        OUT_OF_SCOPE = "out_of_scope", "Out of scope (no source covers it)"
        FAILED = "failed", "Failed"

    rid = models.CharField(
        "request id", max_length=100, unique=True, help_text="Crawlbase's rid."
    )
    url = models.URLField("URL", max_length=2048)
    requested_url = models.URLField(
        "requested URL",
        max_length=2048,
        blank=True,
        db_default="",  # rows are inserted by hand-written SQL
        help_text="The URL the built-in crawler asked for when it led to this one "
        "(a redirect or a canonical link): that page now points here. A Crawlbase "
        "delivery's push names the URL pushed.",
    )
    original_status = models.PositiveSmallIntegerField(null=True, blank=True)
    crawler_status = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        help_text="PC-Status (or CB-Status): the crawler's verdict.",
    )
    content_type = models.CharField(max_length=200, blank=True)
    etag = models.CharField(
        "ETag", max_length=200, blank=True, help_text="From the built-in fetcher."
    )
    last_modified = models.CharField(
        max_length=100, blank=True, help_text="The site's Last-Modified header."
    )
    site_modified_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="The site's own modification time (Last-Modified, sitemap lastmod).",
    )
    push = models.ForeignKey(
        Push,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    body = models.BinaryField(
        null=True,
        editable=False,
        help_text="Raw body, kept until processed (out of scope: kept "
        "REJECTED_BODY_KEEP_DAYS days, to be re-queued once a source covers it).",
    )
    body_bytes = models.PositiveIntegerField(default=0)
    received_at = models.DateTimeField(default=timezone.now)
    queued_at = models.DateTimeField(
        default=timezone.now, help_text="When its job was last put on the queue."
    )
    processed_at = models.DateTimeField(null=True, blank=True)
    claimed_at = models.DateTimeField(
        null=True, blank=True, help_text="When a worker last started on it."
    )
    next_attempt_at = models.DateTimeField(
        null=True, blank=True, help_text="When a failed attempt will be tried again."
    )
    state = models.CharField(max_length=20, choices=State.choices, default=State.QUEUED)
    # The webhook's INSERT (ingest.sql) leaves these to their db_default.
    attempts = models.PositiveSmallIntegerField(default=0, db_default=0)
    embedding_requests = models.PositiveIntegerField(default=0, db_default=0)
    embedding_tokens = models.PositiveIntegerField(
        default=0,
        db_default=0,
        help_text="Tokens sent to the embedding model for this delivery.",
    )
    outcome = models.CharField(
        max_length=20, choices=Outcome.choices, blank=True, default="", db_default=""
    )
    error = models.TextField(blank=True, default="", db_default="")
    page = models.ForeignKey(
        "sources.Page",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="deliveries",
    )
    version = models.OneToOneField(
        "sources.PageVersion",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="delivery",
        help_text="The page version this delivery recorded, if it changed the page.",
    )

    objects = DeliveryQuerySet.as_manager()

    class Meta:
        verbose_name_plural = "deliveries"
        ordering = ["-received_at"]
        indexes = [
            models.Index(fields=["state", "received_at"], name="delivery_state_idx"),
            models.Index(fields=["-received_at"], name="delivery_received_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.rid} {self.url}"

    @property
    def crawled_at(self) -> datetime:
        """When the crawl this delivery answers was asked for (else when it came)."""
        push = self.push if self.push_id else None  # no query when there is none
        if push is not None and push.pushed_at is not None:
            return push.pushed_at
        return self.received_at

    # -- transitions: each one conditional update, whose row count says if it won ---

    def _move(self, when: Q, **fields: object) -> bool:
        moved = Delivery.objects.filter(when, pk=self.pk).update(**fields)
        for name, value in fields.items():
            if moved and not isinstance(value, F):
                setattr(self, name, value)
        return bool(moved)

    def mark_claimed(self, *, at: datetime) -> bool:
        """Taken by a worker; also after a crash, when its job is offered again.
        Only as last read: a run that moved it since finished it, queued it again
        or was lost (the sweep queues it again)."""
        states = [self.State.QUEUED, self.State.PROCESSING]
        return self._move(
            Q(state__in=states, attempts=self.attempts),
            state=self.State.PROCESSING,
            attempts=self.attempts + 1,
            claimed_at=at,
        )

    def mark_done(self, *, outcome: str, note: str = "", page_id: int | None) -> bool:
        """The outcome is recorded and the raw body dropped (the page keeps its
        Markdown), except out of scope: a source may be added for it. False if
        another run of this delivery finished it first."""
        body = {} if outcome == self.Outcome.OUT_OF_SCOPE else {"body": None}
        return self._move(
            Q(state=self.State.PROCESSING),
            state=self.State.DONE,
            outcome=outcome,
            error=note,
            processed_at=timezone.now(),
            next_attempt_at=None,
            page_id=page_id,
            version_id=self.version_id,
            **body,
        )

    def mark_retry(self, *, error: str, at: datetime) -> bool:
        """Back to the queue, to be tried again at ``at``, by the run that claimed
        it: a run cut off by a database restart records its retry late, maybe after
        another run took the delivery up."""
        return self._move(
            Q(state=self.State.PROCESSING, claimed_at=self.claimed_at),
            state=self.State.QUEUED,
            error=error,
            next_attempt_at=at,
            queued_at=timezone.now(),
        )

    def mark_failed(self, *, error: str) -> bool:
        """Given up: shown in the admin, where it can be re-queued."""
        return self._move(
            ~Q(state=self.State.DONE),
            state=self.State.FAILED,
            outcome=self.Outcome.FAILED,
            error=error[:2000],
            processed_at=timezone.now(),
            next_attempt_at=None,
        )

    def mark_requeued(self) -> bool:
        """Queued again with a fresh budget of attempts (an editor's re-queue)."""
        return self._move(
            REQUEUEABLE,
            state=self.State.QUEUED,
            attempts=0,
            error="",
            outcome="",
            next_attempt_at=None,
            queued_at=timezone.now(),
        )

    def mark_requeued_stalled(self) -> bool:
        """Queued again after its job was lost (the attempts it used still count),
        unless it moved since it was read."""
        seen = Q(state=self.state, claimed_at=self.claimed_at, queued_at=self.queued_at)
        return self._move(
            Q(state__in=[self.State.QUEUED, self.State.PROCESSING]) & seen,
            state=self.State.QUEUED,
            next_attempt_at=None,
            queued_at=timezone.now(),
        )


# -- the built-in crawler ----------------------------------------------------------


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
    # A page put back into a crawl by hand-written SQL (ingest.sql)
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

    # Rows are also inserted by hand-written SQL (ingest.sql), which
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


# -- outgoing notifications (ingest.notify) -----------------------------------------

from ingest.notify.models import (  # noqa: E402, F401  (the app's models too)
    Notification,
    NotificationAttempt,
    Subscription,
    SubscriptionChange,
)
