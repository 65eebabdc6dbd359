"""A delivery: one page delivered to the webhook, and the job that applies it."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from ingest.pushing.models import Push

# How long a queued delivery waits before the sweep asks where its job is.
QUEUED_SETTLE = timedelta(seconds=10)


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
    # The webhook's INSERT (ingest.delivery.sql) leaves these to their db_default.
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
