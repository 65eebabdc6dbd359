"""Notifications from a change's recording to the receiver's answer: routing a
change to the subscriptions that want it, making a settled burst into one
notification, sending it (once per run, again after a backoff), and what editors
do to a subscription (enable it again, give it a new secret).

Safe in many workers at once: a notification is made under its subscription's
row lock, a subscription has at most one unsent notification (a unique index),
and a notification is sent by the run whose conditional update claimed it. A run
that dies after sending and before recording leaves the notification claimed;
once no job could still hold it (Q_RETRY) it waits again and is sent again, with
the same id. Runs send only in one of NOTIFY_MAX_WORKERS slots (``slots``), and
each attempt ends by NOTIFY_TIMEOUT, so receivers that hang hold few workers, for
a bounded time.
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Max, Min, Q
from django.utils import timezone
from django_q.tasks import async_task

from ingest.notify.bodies import body_text, digest_subject, digest_texts, payload_build
from ingest.notify.models import (
    Notification,
    NotificationAttempt,
    Subscription,
    SubscriptionChange,
)
from ingest.notify.sending import Attempt, email_send, webhook_post
from ingest.notify.signing import secret_new
from ingest.notify.slots import sender_slot
from sources.models import PageVersion

logger = logging.getLogger(__name__)

TASK = "ingest.tasks.notifications_send_task"
# One run begins rounds of attempts for this long, then hands over to a fresh job
# at the back of the queue: receivers that hang hold a worker for a round or two
# at a time, and the crawl and delivery jobs queued meanwhile run in between.
SEND_SECONDS = 10.0
# Notifications read for sending at once.
DUE_BATCH = 50
# Attempts made at once by one run, each exchange in a thread of its own.
SENDS_AT_ONCE = 8
PRUNE_BATCH = 1_000


def change_route(*, change: PageVersion) -> int:
    """Give a change just recorded to each active subscription of its source
    whose filters it passes; how many. Call in the transaction that records it,
    so that the change and its routing are kept, or lost, together."""
    if change.source_id is None:
        return 0
    subscriptions = list(
        Subscription.objects.filter(source_id=change.source_id, active=True).only(
            "kinds", "url_patterns", "headings", "min_lines"
        )
    )
    if not subscriptions:
        return 0
    url = change.page.url
    wanted = [
        subscription
        for subscription in subscriptions
        if subscription.change_filter().passes(
            kind=change.kind,
            url=url,
            sections=list(change.sections or []),
            lines_added=change.lines_added,
            lines_removed=change.lines_removed,
        )
    ]
    SubscriptionChange.objects.bulk_create(
        [SubscriptionChange(subscription=s, change=change) for s in wanted],
        ignore_conflicts=True,
    )
    return len(wanted)


def notifications_send_soon() -> None:
    async_task(TASK, task_name="send notifications")


# -- making notifications -------------------------------------------------------------


def notifications_prepare(*, now: datetime) -> int:
    """Make a notification of the waiting changes of each subscription whose
    burst has settled: no change for NOTIFY_QUIET_SECONDS, or the oldest waiting
    NOTIFY_MAX_WAIT_SECONDS. How many were made."""
    quiet = now - timedelta(seconds=settings.NOTIFY_QUIET_SECONDS)
    longest = now - timedelta(seconds=settings.NOTIFY_MAX_WAIT_SECONDS)
    settled = (
        SubscriptionChange.objects.waiting()
        .filter(subscription__active=True, subscription__disabled_at=None)
        .values("subscription_id")
        .annotate(first=Min("routed_at"), last=Max("routed_at"))
        .filter(Q(last__lte=quiet) | Q(first__lte=longest))
        .values_list("subscription_id", flat=True)
    )
    busy = set(Notification.objects.unsent().values_list("subscription_id", flat=True))
    made = 0
    for subscription_id in settled:
        if subscription_id not in busy:
            made += notification_prepare(subscription_id=subscription_id, now=now)
    return made


def notification_prepare(*, subscription_id: int, now: datetime) -> bool:
    """The subscription's oldest waiting changes (NOTIFY_BATCH_MAX at most) in a
    new notification, its body written now; False if it has one unsent, or
    another run holds it."""
    with transaction.atomic():
        subscription = (
            Subscription.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("source")
            .filter(pk=subscription_id)
            .first()
        )
        if subscription is None or subscription.notifications.unsent().exists():
            return False
        rows = dict(
            subscription.changes.waiting()
            .order_by("change_id")
            .values_list("pk", "change_id")[: settings.NOTIFY_BATCH_MAX]
        )
        if not rows:
            return False
        notification = Notification(
            subscription=subscription, created_at=now, next_attempt_at=now
        )
        payload = payload_build(
            key=str(notification.key),
            subscription_id=subscription.pk,
            subscription_name=subscription.name,
            source_id=subscription.source_id,
            source_name=subscription.source.name,
            created_at=now,
            change_ids=rows.values(),
        )
        notification.body = body_text(payload)
        notification.changes_count = payload["count"]
        notification.save()
        SubscriptionChange.objects.filter(pk__in=rows).update(notification=notification)
    return True


# -- sending --------------------------------------------------------------------------


@dataclass
class SendReport:
    made: int = 0
    sent: int = 0
    failed: int = 0
    more: bool = False  # the run's time was up with notifications due
    # Every sending slot was taken: this run sent nothing and left at once.
    deferred: bool = False

    def __str__(self) -> str:
        if self.deferred:
            return (
                f"every sending slot is taken (NOTIFY_MAX_WORKERS="
                f"{settings.NOTIFY_MAX_WORKERS}): left to the sender at work"
            )
        text = f"{self.made} notifications made, {self.sent} sent, {self.failed} failed"
        return text + (" (more due)" if self.more else "")


def notifications_send(
    *, now: datetime | None = None, seconds: float | None = None
) -> SendReport:
    """Make the notifications that are due and send each once (a failed one is
    tried again in a later run, after its backoff), SENDS_AT_ONCE at a time,
    beginning rounds for ``seconds``, in one of the NOTIFY_MAX_WORKERS sending
    slots; with none free, nothing."""
    with sender_slot() as slot:
        if slot is None:
            return SendReport(deferred=True)
        return _due_send(
            now=now, seconds=send_seconds() if seconds is None else seconds
        )


def send_seconds() -> float:
    """How long one run begins rounds of attempts: SEND_SECONDS, less if need
    be for its last round (NOTIFY_TIMEOUT) to end within half of Q_TIMEOUT; a job
    that Q_TIMEOUT kills leaves its attempts unrecorded, to be sent again after
    Q_RETRY."""
    most = settings.Q_TIMEOUT / 2 - settings.NOTIFY_TIMEOUT
    return max(min(SEND_SECONDS, most), 0.0)


def _due_send(*, now: datetime | None, seconds: float) -> SendReport:
    deadline = time.monotonic() + seconds
    report = SendReport()
    notifications_unstick(now=now or timezone.now())
    tried: set[int] = set()
    while True:
        report.made += notifications_prepare(now=now or timezone.now())
        due = list(
            Notification.objects.due(now=now or timezone.now())
            .exclude(pk__in=tried)
            .select_related("subscription__source")
            .order_by("next_attempt_at", "pk")[:DUE_BATCH]
        )
        if not due:
            return report
        for start in range(0, len(due), SENDS_AT_ONCE):
            if tried and time.monotonic() >= deadline:  # the first are always sent
                report.more = True
                return report
            batch = due[start : start + SENDS_AT_ONCE]
            tried.update(notification.pk for notification in batch)
            for attempt in notifications_send_at_once(notifications=batch, now=now):
                report.sent += attempt.ok
                report.failed += not attempt.ok


def notifications_send_at_once(
    *, notifications: list[Notification], now: datetime | None = None
) -> list[Attempt]:
    """Claim these notifications, send those this run claimed, at once and
    outside any transaction, and record what happened to each; their attempts
    (none for those another run claimed first)."""
    at = now or timezone.now()
    claimed = [n for n in notifications if n.mark_claimed(at=at)]
    if len(claimed) <= 1:
        attempts = [_attempt_safely(notification) for notification in claimed]
    else:
        # Each exchange in a thread of its own: a round of receivers that hang
        # costs the worker NOTIFY_TIMEOUT once, not once for each.
        with ThreadPoolExecutor(max_workers=len(claimed)) as pool:
            attempts = list(pool.map(_attempt_safely, claimed))
    for notification, attempt in zip(claimed, attempts, strict=True):
        attempt_record(notification=notification, attempt=attempt, now=at)
    return attempts


def _attempt_safely(notification: Notification) -> Attempt:
    """One attempt, touching no database (what it reads was loaded with the
    notification), so that it may run in a thread of its own."""
    try:
        return _attempt(notification)
    except Exception as exc:  # a fault here must not leave it claimed until Q_RETRY
        logger.exception("notification %s could not be sent", notification.pk)
        return Attempt(ok=False, error=f"{type(exc).__name__}: {exc}"[:500])


def _attempt(notification: Notification) -> Attempt:
    subscription = notification.subscription
    if subscription.channel == Subscription.Channel.WEBHOOK:
        return webhook_post(
            url=subscription.url,
            secret=subscription.secret,
            delivery_id=str(notification.key),
            body=notification.body.encode(),
        )
    return _email(subscription, notification)


def _email(subscription: Subscription, notification: Notification) -> Attempt:
    payload = json.loads(notification.body)
    text, html = digest_texts(payload)
    return email_send(
        addresses=subscription.addresses(),
        subject=digest_subject(payload),
        text=text,
        html=html,
        delivery_id=str(notification.key),
    )


def attempt_record(
    *, notification: Notification, attempt: Attempt, now: datetime
) -> None:
    """The attempt in the log; the notification sent, refused or waiting for its
    retry; the subscription's failures counted, and past NOTIFY_MAX_FAILURES (or
    at once when the address guard refuses its URL) the subscription disabled."""
    subscription = notification.subscription
    with transaction.atomic():
        # Locked: a subscription deleted meanwhile waits, or is gone already.
        held = Notification.objects.select_for_update().filter(pk=notification.pk)
        if not held.exists():
            return
        NotificationAttempt.objects.create(
            subscription=subscription,
            notification=notification,
            number=notification.attempts,
            attempted_at=now,
            ok=attempt.ok,
            status=attempt.status,
            error=attempt.error[:500],
            duration_ms=attempt.duration_ms,
        )
        if not attempt.ok:
            logger.warning(
                "notification %s to subscription %s, attempt %s, failed: %s",
                notification.pk,
                subscription.pk,
                notification.attempts,
                attempt.error,
            )
        if attempt.ok:
            if notification.mark_sent(at=now, status=attempt.status):
                Subscription.objects.filter(pk=subscription.pk).update(
                    failures=0, last_sent_at=now
                )
            return
        if attempt.refused:
            if notification.mark_retry(at=now, status=None, error=attempt.error):
                _disable(subscription, now=now, reason=f"Refused: {attempt.error}")
            return
        if attempt.retry:
            later = now + retry_delay(notification.attempts, attempt.retry_after)
            moved = notification.mark_retry(
                at=later, status=attempt.status, error=attempt.error
            )
        else:
            moved = notification.mark_refused(
                status=attempt.status, error=attempt.error
            )
        if moved:
            _failure_count(subscription, attempt=attempt, now=now)


def retry_delay(attempts: int, retry_after: float | None) -> timedelta:
    """NOTIFY_RETRY_SECONDS, doubled for each attempt after the first, or what
    the receiver asked for (Retry-After); NOTIFY_RETRY_MAX_SECONDS at most."""
    if retry_after is not None:
        seconds = retry_after
    else:
        seconds = settings.NOTIFY_RETRY_SECONDS * 2 ** max(attempts - 1, 0)
    return timedelta(seconds=min(seconds, settings.NOTIFY_RETRY_MAX_SECONDS))


def _failure_count(
    subscription: Subscription, *, attempt: Attempt, now: datetime
) -> None:
    rows = Subscription.objects.filter(pk=subscription.pk)
    rows.update(failures=F("failures") + 1)
    failures = rows.values_list("failures", flat=True).get()
    if failures >= settings.NOTIFY_MAX_FAILURES:
        _disable(
            subscription,
            now=now,
            reason=f"{failures} attempts in a row failed; the last, on "
            f"{timezone.localtime(now):%Y-%m-%d %H:%M}: {attempt.error}",
        )


def _disable(subscription: Subscription, *, now: datetime, reason: str) -> None:
    subscription.mark_disabled(reason=reason, at=now)
    logger.warning("subscription %s disabled: %s", subscription.pk, reason)


def notifications_unstick(*, now: datetime) -> int:
    """Notifications claimed by a run that died (no job runs past Q_RETRY) wait
    again, to be sent again with the same id: at least once."""
    stale = now - timedelta(seconds=settings.Q_RETRY)
    return Notification.objects.filter(
        state=Notification.State.SENDING, claimed_at__lt=stale
    ).update(
        state=Notification.State.WAITING,
        next_attempt_at=now,
        last_error="its sender stopped before the answer was recorded",
    )


def notifications_prune(*, now: datetime | None = None) -> int:
    """Drop sent and refused notifications (with their log) older than
    NOTIFY_LOG_KEEP_DAYS; how many."""
    before = (now or timezone.now()) - timedelta(days=settings.NOTIFY_LOG_KEEP_DAYS)
    old = Notification.objects.filter(
        state__in=[Notification.State.SENT, Notification.State.REFUSED],
        created_at__lt=before,
    )
    pruned = 0
    while ids := list(old.values_list("pk", flat=True)[:PRUNE_BATCH]):
        pruned += (
            Notification.objects.filter(pk__in=ids)
            .delete()[1]
            .get(Notification._meta.label, 0)
        )
    return pruned


# -- what editors do ------------------------------------------------------------------


def subscription_enable(*, subscription: Subscription) -> bool:
    """Enable a disabled subscription again: its failures forgotten, its waiting
    notification due now. False if it was not disabled."""
    with transaction.atomic():
        enabled = (
            Subscription.objects.filter(pk=subscription.pk)
            .exclude(disabled_at=None)
            .update(disabled_at=None, disabled_reason="", failures=0)
        )
        if not enabled:
            return False
        subscription.notifications.filter(state=Notification.State.WAITING).update(
            next_attempt_at=timezone.now()
        )
        transaction.on_commit(notifications_send_soon)
    return True


def subscription_secret_renew(*, subscription: Subscription) -> str:
    """A new signing secret, returned to be shown this once; the old one stops
    signing at once."""
    secret = secret_new()
    Subscription.objects.filter(pk=subscription.pk).update(secret=secret)
    subscription.secret = secret
    return secret
