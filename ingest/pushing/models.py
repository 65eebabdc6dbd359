"""A push: one URL sent to Crawlbase's Enterprise Crawler."""

from __future__ import annotations

from datetime import datetime

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone


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
    # Pushes are queued by hand-written SQL (ingest.pushing.sql), which leaves the
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
