"""Pushing URLs to Crawlbase's Enterprise Crawler.

A push is first a queued row (one per page at most while in flight, enforced by a
partial unique index), then sent through the ``crawlbase`` SDK at no more than
CRAWLBASE_PUSH_RATE requests a second by one sender at a time (a PostgreSQL advisory
lock), so the rate holds however many workers run. A 429 or 5xx answer leaves the
push queued and slows the sender down; nothing is lost. A sent push with no delivery
after CRAWLBASE_PUSH_TIMEOUT expires, and the page is pushed again when it is next due.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.error import URLError

import crawlbase.base_api
from crawlbase import CrawlingAPI
from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from ingest.pushing import sql
from ingest.pushing.models import Push
from kbsite import locks
from sources.models import Page

logger = logging.getLogger(__name__)

# A push refused this many times (429, 5xx, network) is given up.
MAX_ATTEMPTS = 8
BACKOFF_MAX_SECONDS = 60.0


@dataclass
class PushReport:
    pushed: int = 0
    retried: int = 0  # rate-limited or a server error: still queued, sent later
    failed: int = 0
    waiting: int = 0  # still queued when the sender stopped

    def __str__(self) -> str:
        return (
            f"{self.pushed} pushed, {self.retried} rate-limited or refused and "
            f"retried, {self.failed} failed, {self.waiting} still queued"
        )


def pages_push_queue(*, pages: QuerySet[Page]) -> tuple[int, int]:
    """Queue a push for each of these pages that has none in flight: their ids are
    read, then one statement queues them all. Returns (queued, skipped because a
    push is in flight)."""
    # The ids in the queryset's order, so that the pages chosen first (the most
    # overdue, for the planner) get the first pushes and are sent first.
    return page_ids_push_queue(page_ids=list(pages.values_list("id", flat=True)))


def page_ids_push_queue(*, page_ids: Sequence[int]) -> tuple[int, int]:
    """``pages_push_queue`` for these pages, pushed in this order."""
    if not page_ids:  # no page at all, e.g. a source without seeds
        return 0, 0
    pushes = sql.pushes_insert(page_ids=page_ids)
    return pushes.queued, pushes.chosen - pushes.queued


def pushes_expire(*, now: datetime) -> int:
    """Sent pushes with no delivery after CRAWLBASE_PUSH_TIMEOUT: no longer in
    flight, so their pages are pushed again when due."""
    timeout = timedelta(seconds=settings.CRAWLBASE_PUSH_TIMEOUT)
    return Push.objects.filter(
        state=Push.State.SENT, pushed_at__lt=now - timeout
    ).update(state=Push.State.EXPIRED, error="no delivery in time")


class PushingUnavailable(Exception):
    """Crawlbase is not configured: pushes wait until it is."""


def pushes_send(
    *,
    seconds: float | None = None,
    progress: Callable[[PushReport], None] | None = None,
) -> PushReport | None:
    """Send queued pushes until none is due (or ``seconds`` have passed). None if
    another process is sending: the rate is per token, so one sender at a time."""
    missing = [
        name
        for name in ["CRAWLBASE_TOKEN", "CRAWLBASE_CRAWLER"]
        if not getattr(settings, name)
    ]
    if missing:
        raise PushingUnavailable(f"{' and '.join(missing)} must be set to push")
    if not _lock(True):
        return None
    try:
        return _send_all(seconds=seconds, progress=progress)
    finally:
        _lock(False)


def _lock(take: bool) -> bool:
    if take:
        return locks.session_lock_try(lock=locks.PUSH_SENDER)
    return locks.session_lock_release(lock=locks.PUSH_SENDER)


def _send_all(
    *, seconds: float | None, progress: Callable[[PushReport], None] | None
) -> PushReport:
    client = _client()
    report = PushReport()
    started = time.monotonic()
    gap = 1.0 / settings.CRAWLBASE_PUSH_RATE
    next_slot = started
    deadline = None if seconds is None else started + seconds
    while deadline is None or time.monotonic() < deadline:
        push = (
            Push.objects.sendable(now=timezone.now())
            .select_related("page__source")
            .order_by("queued_at", "pk")
            .first()
        )
        if push is None:
            pause = _until_next_retry()
            if pause is None or (deadline and time.monotonic() + pause > deadline):
                break
            time.sleep(pause)
            continue
        time.sleep(max(0.0, next_slot - time.monotonic()))
        wait = _send_one(client, push, report)
        next_slot = time.monotonic() + max(gap, wait)
        if progress is not None:
            progress(report)
    report.waiting = Push.objects.filter(state=Push.State.QUEUED).count()
    return report


def _until_next_retry() -> float | None:
    """Seconds until the earliest queued push may be tried again, if any waits."""
    retry = (
        Push.objects.filter(state=Push.State.QUEUED)
        .order_by("next_attempt_at")
        .values_list("next_attempt_at", flat=True)
        .first()
    )
    if retry is None:
        return None
    return max(0.05, (retry - timezone.now()).total_seconds())


def _client() -> CrawlingAPI:
    # The SDK reads its base URL from this module attribute (see CRAWLBASE.md):
    # staging and tests point it at a stand-in.
    crawlbase.base_api.CRAWLBASE_API_URL = settings.CRAWLBASE_API_URL
    return CrawlingAPI({"token": settings.CRAWLBASE_TOKEN, "timeout": 30})


def push_options(push: Push) -> dict[str, Any]:
    source = push.page.source
    options: dict[str, Any] = {
        "crawler": settings.CRAWLBASE_CRAWLER,
        "callback": "true",
        "format": source.crawlbase_format,
    }
    if source.page_wait:
        options["page_wait"] = source.page_wait
    if source.ajax_wait:
        options["ajax_wait"] = "true"
    return options


def _send_one(client: CrawlingAPI, push: Push, report: PushReport) -> float:
    """Send one push; returns how long the sender should pause before the next."""
    try:
        answer = client.get(push.url, push_options(push))
    except (URLError, OSError) as exc:
        return _refused(push, report, f"network error: {exc}"[:500])
    status = answer.get("status_code")
    rid = _rid(answer) if status == 200 else None
    if rid:
        now = timezone.now()
        Push.objects.filter(pk=push.pk).update(
            state=Push.State.SENT, rid=rid, pushed_at=now,
            attempts=push.attempts + 1, next_attempt_at=None, error="",
        )  # fmt: skip
        Page.objects.filter(pk=push.page_id).update(pushed_url=push.url)
        report.pushed += 1
        return 0.0
    if status == 429 or (isinstance(status, int) and status >= 500):
        return _refused(push, report, f"Crawlbase answered {status}")
    Push.objects.filter(pk=push.pk).update(
        state=Push.State.FAILED,
        attempts=push.attempts + 1,
        error=f"Crawlbase answered {status} without a request id"[:500],
    )
    report.failed += 1
    return 0.0


def _refused(push: Push, report: PushReport, error: str) -> float:
    """Queued again after a backoff that doubles with each refusal (the SDK does
    not pass on a Retry-After header of an error answer)."""
    attempts = push.attempts + 1
    if attempts >= MAX_ATTEMPTS:
        Push.objects.filter(pk=push.pk).update(
            state=Push.State.FAILED, attempts=attempts, error=error
        )
        report.failed += 1
        return 0.0
    wait = min(
        BACKOFF_MAX_SECONDS, settings.CRAWLBASE_RETRY_SECONDS * 2 ** (attempts - 1)
    )
    Push.objects.filter(pk=push.pk).update(
        attempts=attempts,
        error=error,
        next_attempt_at=timezone.now() + timedelta(seconds=wait),
    )
    report.retried += 1
    logger.warning("push of %s refused (%s); again in %.1f s", push.url, error, wait)
    return wait


def _rid(answer: dict[str, Any]) -> str | None:
    """The request id of an accepted push: parsed by the SDK when the answer's type
    is exactly JSON, else in the raw body."""
    data = answer.get("json")
    if not isinstance(data, dict):
        try:
            data = json.loads(answer.get("body") or b"")
        except ValueError:
            return None
    rid = data.get("rid") if isinstance(data, dict) else None
    return str(rid)[:100] if rid else None
