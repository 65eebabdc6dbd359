"""Subscriptions to a source's changes, the changes waiting for each, the
notifications that carry them, and every attempt at sending one. Imported by
``ingest.models``: they are the ingest app's models."""

from __future__ import annotations

import re
import uuid
from datetime import datetime

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from ingest.fetchers.safety import Refused, url_check
from ingest.notify.filters import ChangeFilter, url_patterns
from ingest.notify.signing import secret_new
from sources.models import PageVersion

ADDRESS_SEPARATORS = re.compile(r"[\s,;]+")
MAX_ADDRESSES = 50


class Subscription(models.Model):
    """Someone who wants to hear about a source's changes: a webhook URL or a list
    of e-mail addresses, with filters saying which changes."""

    class Channel(models.TextChoices):
        WEBHOOK = "webhook", "Webhook (a signed JSON POST)"
        EMAIL = "email", "E-mail digest"

    source = models.ForeignKey(
        "sources.Source", on_delete=models.CASCADE, related_name="subscriptions"
    )
    name = models.CharField(
        max_length=200, help_text="Who it is for, e.g. Docs team's chat bridge"
    )
    channel = models.CharField(
        max_length=10, choices=Channel.choices, default=Channel.WEBHOOK
    )
    url = models.URLField(
        "webhook URL",
        max_length=2048,
        blank=True,
        help_text="Where the JSON body is POSTed, e.g. https://hooks.example.com/kb",
    )
    emails = models.TextField(
        "e-mail addresses",
        blank=True,
        help_text="One per line or separated by commas, e.g. docs@example.com",
    )
    kinds = ArrayField(
        models.CharField(max_length=20, choices=PageVersion.Kind.choices),
        default=list,
        blank=True,
        help_text="Only these kinds of change; none ticked: every kind.",
    )
    url_patterns = models.TextField(
        "URL patterns",
        blank=True,
        help_text="Only pages whose URL matches one of these, one per line: a glob "
        "(https://docs.example.com/config/*) or, after re:, a regular expression "
        "searched in the URL (re:/v[0-9]+/). Empty: every page.",
    )
    headings = models.TextField(
        blank=True,
        help_text="Only changes to a section under one of these headings, one per "
        "line, any case, e.g. Configuration › Options (or Configuration > Options). "
        "Pages gone or moved name no section and are not sent. Empty: any section.",
    )
    min_lines = models.PositiveIntegerField(
        "least lines changed",
        default=0,
        help_text="Only changes of at least this many lines added or removed, e.g. "
        "3 (pages gone or moved always count). 0: any size.",
    )
    active = models.BooleanField(
        default=True,
        help_text="Untick to stop collecting and sending changes for it.",
    )
    # The key bodies are signed with: kept to sign, shown only when made.
    secret = models.CharField(max_length=100, default=secret_new, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    last_sent_at = models.DateTimeField(null=True, blank=True, editable=False)
    failures = models.PositiveIntegerField(
        "failed attempts in a row", default=0, editable=False
    )
    disabled_at = models.DateTimeField(null=True, blank=True, editable=False)
    disabled_reason = models.TextField(blank=True, editable=False)

    class Meta:
        ordering = ["source", "name"]
        indexes = [
            models.Index(
                fields=["source"],
                name="subscription_active_idx",
                condition=Q(active=True),
            )
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(channel="webhook", url__gt="")
                | Q(channel="email", emails__gt=""),
                name="subscription_has_a_target",
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.get_channel_display()})"

    @property
    def is_disabled(self) -> bool:
        return self.disabled_at is not None

    def addresses(self) -> list[str]:
        return [a for a in ADDRESS_SEPARATORS.split(self.emails) if a]

    def change_filter(self) -> ChangeFilter:
        return ChangeFilter.build(
            kinds=self.kinds,
            url_patterns=self.url_patterns,
            headings=self.headings,
            min_lines=self.min_lines,
        )

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.channel == self.Channel.WEBHOOK:
            if problem := webhook_url_problem(self.url):
                errors["url"] = problem
        elif problem := addresses_problem(self.addresses()):
            errors["emails"] = problem
        try:
            url_patterns(self.url_patterns)
        except ValueError as exc:
            errors["url_patterns"] = str(exc)
        if errors:
            raise ValidationError(errors)

    def mark_disabled(self, *, reason: str, at: datetime) -> None:
        self.disabled_at, self.disabled_reason = at, reason[:2000]
        self.save(update_fields=["disabled_at", "disabled_reason"])


def webhook_url_problem(url: str) -> str | None:
    """Why a webhook cannot be sent to ``url``, or None: it must be http(s) and
    reach public addresses only, unless CRAWL_ALLOW_PRIVATE_ADDRESSES is true
    (the crawler's guard; it is checked again at every connection)."""
    if not url:
        return "A webhook needs its URL."
    try:
        url_check(url, allow_private=settings.CRAWL_ALLOW_PRIVATE_ADDRESSES)
    except Refused as exc:
        return f"Refused: {exc}"
    return None


def addresses_problem(addresses: list[str]) -> str | None:
    if not addresses:
        return "An e-mail digest needs at least one address."
    if len(addresses) > MAX_ADDRESSES:
        return f"At most {MAX_ADDRESSES} addresses."
    for address in addresses:
        try:
            validate_email(address)
        except ValidationError:
            return f"{address!r} is not an e-mail address."
    return None


class SubscriptionChangeQuerySet(models.QuerySet["SubscriptionChange"]):
    def waiting(self) -> SubscriptionChangeQuerySet:
        """Routed and not yet put into a notification."""
        return self.filter(notification=None)


class SubscriptionChange(models.Model):
    """One change for one subscription: waiting, then carried by a notification.
    Written in the transaction that records the change."""

    subscription = models.ForeignKey(
        Subscription, on_delete=models.CASCADE, related_name="changes"
    )
    change = models.ForeignKey(
        "sources.PageVersion", on_delete=models.CASCADE, related_name="+"
    )
    routed_at = models.DateTimeField(default=timezone.now)
    notification = models.ForeignKey(
        "Notification",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="changes",
    )

    objects = SubscriptionChangeQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["subscription", "change"], name="subscriptionchange_once"
            )
        ]
        indexes = [
            models.Index(
                fields=["subscription", "routed_at"],
                name="subscriptionchange_waiting_idx",
                condition=Q(notification=None),
            )
        ]

    def __str__(self) -> str:
        return f"change {self.change_id} for {self.subscription_id}"


class NotificationQuerySet(models.QuerySet["Notification"]):
    def unsent(self) -> NotificationQuerySet:
        return self.filter(state__in=Notification.UNSENT)

    def due(self, *, now: datetime) -> NotificationQuerySet:
        """Waiting, its time come, for a subscription that sends."""
        return self.filter(
            state=Notification.State.WAITING,
            next_attempt_at__lte=now,
            subscription__active=True,
            subscription__disabled_at=None,
        )


class Notification(models.Model):
    """One POST, or one e-mail digest, of a subscription's changes. Its body is
    written once and sent as it is, with the same id, on every attempt."""

    class State(models.TextChoices):
        WAITING = "waiting", "Waiting to be sent"
        SENDING = "sending", "Being sent"
        SENT = "sent", "Sent"
        REFUSED = "refused", "Refused by the receiver (not sent again)"

    UNSENT = [State.WAITING, State.SENDING]

    subscription = models.ForeignKey(
        Subscription, on_delete=models.CASCADE, related_name="notifications"
    )
    key = models.UUIDField(
        "delivery id",
        default=uuid.uuid4,
        unique=True,
        editable=False,
        help_text="In the body and the X-KB-Delivery header: the same on every "
        "attempt, for receivers to ignore a body they already have.",
    )
    state = models.CharField(
        max_length=10, choices=State.choices, default=State.WAITING
    )
    created_at = models.DateTimeField(default=timezone.now)
    changes_count = models.PositiveIntegerField("changes", default=0)
    body = models.TextField(help_text="The JSON body, as sent.")
    attempts = models.PositiveSmallIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    claimed_at = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    last_status = models.PositiveSmallIntegerField(
        "last status", null=True, blank=True, help_text="The receiver's HTTP status."
    )
    last_error = models.TextField(blank=True)

    objects = NotificationQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(
                fields=["state", "next_attempt_at"],
                name="notification_unsent_idx",
                condition=Q(state__in=["waiting", "sending"]),
            ),
            models.Index(
                fields=["subscription", "-created_at"],
                name="notification_subscription_idx",
            ),
        ]
        constraints = [
            # One at a time, so that a subscription's notifications arrive in order.
            models.UniqueConstraint(
                fields=["subscription"],
                condition=Q(state__in=["waiting", "sending"]),
                name="notification_one_unsent_per_subscription",
            )
        ]

    def __str__(self) -> str:
        return f"notification {self.key} ({self.changes_count} changes)"

    def _move(self, when: Q, **fields: object) -> bool:
        moved = Notification.objects.filter(when, pk=self.pk).update(**fields)
        for name, value in fields.items():
            if moved and not hasattr(value, "resolve_expression"):
                setattr(self, name, value)
        return bool(moved)

    def mark_claimed(self, *, at: datetime) -> bool:
        """Taken by one sender; False if another took it first."""
        if not self._move(
            Q(state=self.State.WAITING, next_attempt_at__lte=at),
            state=self.State.SENDING,
            claimed_at=at,
            attempts=F("attempts") + 1,
        ):
            return False
        self.refresh_from_db(fields=["attempts"])
        return True

    def _sending(self) -> Q:
        """Still this sender's: sending, claimed when it was claimed."""
        return Q(state=self.State.SENDING, claimed_at=self.claimed_at)

    def mark_sent(self, *, at: datetime, status: int | None) -> bool:
        return self._move(
            self._sending(),
            state=self.State.SENT,
            sent_at=at,
            last_status=status,
            last_error="",
        )

    def mark_refused(self, *, status: int | None, error: str) -> bool:
        """The receiver refused this body: it is not sent again."""
        return self._move(
            self._sending(),
            state=self.State.REFUSED,
            last_status=status,
            last_error=error[:2000],
        )

    def mark_retry(self, *, at: datetime, status: int | None, error: str) -> bool:
        return self._move(
            self._sending(),
            state=self.State.WAITING,
            next_attempt_at=at,
            last_status=status,
            last_error=error[:2000],
        )


class NotificationAttempt(models.Model):
    """One try at sending a notification: the subscription's delivery log."""

    subscription = models.ForeignKey(
        Subscription, on_delete=models.CASCADE, related_name="attempts"
    )
    notification = models.ForeignKey(
        Notification, on_delete=models.CASCADE, related_name="attempt_log"
    )
    number = models.PositiveSmallIntegerField("attempt")
    attempted_at = models.DateTimeField(default=timezone.now)
    ok = models.BooleanField("sent")
    status = models.PositiveSmallIntegerField(
        "status code", null=True, blank=True, help_text="None: no HTTP answer."
    )
    error = models.CharField(max_length=500, blank=True)
    duration_ms = models.PositiveIntegerField("duration (ms)")

    class Meta:
        verbose_name = "notification attempt"
        ordering = ["-attempted_at", "-id"]
        indexes = [
            models.Index(
                fields=["subscription", "-attempted_at"],
                name="notifyattempt_subscription_idx",
            )
        ]

    def __str__(self) -> str:
        outcome = "sent" if self.ok else (self.error or f"HTTP {self.status}")
        return f"attempt {self.number} of {self.notification_id}: {outcome}"
