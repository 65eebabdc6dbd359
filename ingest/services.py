"""Receiving deliveries and turning each into exactly one change to the index."""

from __future__ import annotations

import logging
import traceback
from datetime import timedelta
from urllib.parse import urlsplit

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone
from django_q.models import Schedule
from django_q.tasks import async_task, schedule

from ingest import wire
from ingest.chunking import chunk_markdown, embed_texts
from ingest.content import Content, EmptyContent, content_derive
from ingest.extract import EXTRACTOR_VERSION
from retrieval.services import EmbedReport, embeddings_ensure, page_chunks_replace
from retrieval.spaces import ingest_embedders
from sources.models import Delivery, Page, PageVersion, Push, Source
from sources.services import page_shapes_record, source_boilerplate_refresh

logger = logging.getLogger(__name__)

TASK = "ingest.tasks.delivery_process_task"
REDERIVE_TASK = "ingest.tasks.source_pages_rederive_task"
GONE_STATUSES = {404, 410}
Outcome = Delivery.Outcome


# -- the webhook side ------------------------------------------------------------


def delivery_receive(
    *, parsed: wire.ParsedDelivery, raw: bytes, content_type: str
) -> tuple[Delivery, bool]:
    """Store a delivery and queue its job in one transaction, once per rid.

    With the ORM broker the job row is written by the same transaction as the
    delivery: both are kept or neither is. A repeated rid hits the unique index and
    changes nothing.
    """
    try:
        with transaction.atomic():
            delivery = Delivery.objects.create(
                rid=parsed.rid,
                url=parsed.url,
                original_status=parsed.original_status,
                crawler_status=parsed.crawler_status,
                content_type=content_type[:200],
                body=raw,
                body_bytes=len(raw),
                push=Push.objects.filter(rid=parsed.rid).first(),
            )
            _enqueue(delivery)
    except IntegrityError:
        return Delivery.objects.only("pk").get(rid=parsed.rid), False
    return delivery, True


def _enqueue(delivery: Delivery) -> None:
    async_task(TASK, delivery.pk, task_name=f"delivery {delivery.pk} ({delivery.rid})")


def delivery_requeue(*, delivery: Delivery) -> bool:
    """Put a failed (or stuck) delivery back on the queue, with fresh attempts."""
    with transaction.atomic():
        updated = (
            Delivery.objects.filter(pk=delivery.pk)
            .exclude(state=Delivery.State.DONE)
            .exclude(body=None)
            .update(state=Delivery.State.QUEUED, attempts=0, error="", outcome="")
        )
        if updated:
            _enqueue(delivery)
    return bool(updated)


def deliveries_fail_stalled(*, now=None) -> int:
    """Mark failed the deliveries no worker will finish, so that they show in the admin.

    A job runs at most Q_TIMEOUT seconds, and one whose worker died is offered again
    Q_RETRY seconds after it started; a delivery still claimed long after both has
    been given up by the queue (after its max_attempts), and would wait forever.
    """
    now = now or timezone.now()
    grace = timedelta(
        seconds=2 * (settings.Q_CLUSTER["retry"] + settings.Q_CLUSTER["timeout"])
    )
    return Delivery.objects.filter(
        state=Delivery.State.PROCESSING, claimed_at__lt=now - grace
    ).update(
        state=Delivery.State.FAILED,
        outcome=Outcome.FAILED,
        error="no worker finished this delivery; re-queue it when the cause is fixed",
        processed_at=now,
    )


# -- the job side ----------------------------------------------------------------


class Skip(Exception):
    """The delivery ends here with this outcome; the page may record a failure."""

    def __init__(
        self, outcome: str, reason: str, *, page_failure: bool = False
    ) -> None:
        super().__init__(reason)
        self.outcome = outcome
        self.page_failure = page_failure


def delivery_process(*, delivery_id: int) -> str | None:
    """Run one delivery to its outcome; safe to rerun after a crash or twice at once."""
    delivery = _claim(delivery_id)
    if delivery is None:
        return None
    try:
        outcome = _process(delivery)
    except Exception as exc:  # anything unexpected is retried, then shown as failed
        logger.exception("delivery %s (rid %s) failed", delivery.pk, delivery.rid)
        return _retry_later(delivery, exc)
    logger.info("delivery %s (rid %s): %s", delivery.pk, delivery.rid, outcome)
    return outcome


def _claim(delivery_id: int) -> Delivery | None:
    claimed = Delivery.objects.filter(
        pk=delivery_id, state__in=[Delivery.State.QUEUED, Delivery.State.PROCESSING]
    ).update(
        state=Delivery.State.PROCESSING,
        attempts=F("attempts") + 1,
        claimed_at=timezone.now(),
    )
    if not claimed:
        return None
    return Delivery.objects.select_related("push").get(pk=delivery_id)


def _process(delivery: Delivery) -> str:
    page, pushed = _resolve_page(delivery)
    if page is None:
        return _finish(delivery, None, Outcome.REJECTED, "no source covers this URL")
    moved = source_boilerplate_refresh(source=page.source)
    if moved:
        _enqueue_rederive(page.source, moved)
    try:
        if delivery.original_status in GONE_STATUSES:
            return _apply_gone(delivery, page)
        _check_crawl_succeeded(delivery)
        content = _content(delivery, page.source)
        return _apply_content(delivery, page, pushed, content)
    except Skip as skip:
        return _apply_skip(delivery, page, skip)


def _enqueue_rederive(source: Source, shapes: set[int]) -> None:
    async_task(REDERIVE_TASK, source.pk, sorted(shapes), task_name=f"rederive {source}")


def sources_boilerplate_refresh() -> int:
    """For every source, catch up with its counts (pages may stop arriving before a
    shape crosses the line); returns how many sources had pages to derive again."""
    refreshed = 0
    for source in Source.objects.all():
        moved = source_boilerplate_refresh(source=source)
        if moved:
            _enqueue_rederive(source, moved)
            refreshed += 1
    return refreshed


def source_pages_rederive(*, source: Source, shapes: list[int]) -> int:
    """Derive again the live pages carrying these shapes; returns how many changed."""
    pages = source.pages.filter(status=Page.Status.LIVE, line_shapes__overlap=shapes)
    changed = 0
    for page in pages.exclude(raw_body=None).select_related("source").iterator():
        changed += page_rederive(page=page)
    return changed


def page_rederive(*, page: Page) -> bool:
    """New Markdown and chunks from the page's stored body, under the source's current
    rules; only chunk texts new to the index are embedded. False if nothing changed
    (or a newer delivery got there first)."""
    seen = page.last_crawled_at
    try:
        content = _derive(page.source, bytes(page.raw_body), page.raw_content_type)
    except (wire.DeliveryError, EmptyContent):
        return False
    if content.digest == page.content_hash:
        return False
    drafts, _ = _embed(content, page)
    with transaction.atomic():
        page = _lock(page)
        if page.last_crawled_at != seen or not page.is_live:
            return False
        page_chunks_replace(page=page, drafts=drafts)
        page.mark_rederived(
            title=content.title, markdown=content.markdown, digest=content.digest
        )
        page.extractor_version = EXTRACTOR_VERSION
        page.save()
        PageVersion.objects.create(
            page=page,
            kind=PageVersion.Kind.CHANGED,
            content_hash=content.digest,
            markdown=content.markdown,
        )
    return True


def _resolve_page(delivery: Delivery) -> tuple[Page | None, Page | None]:
    """The page this delivery is for, and the page that was pushed if it redirected."""
    pushed = delivery.push.page if delivery.push_id else None
    if pushed is not None and pushed.url == delivery.url:
        return pushed, None
    page = Page.objects.filter(url=delivery.url).select_related("source").first()
    if page is not None:
        return page, pushed
    source = pushed.source if pushed else _source_for(delivery.url)
    if source is None:
        return None, None
    page, _ = Page.objects.get_or_create(url=delivery.url, defaults={"source": source})
    return page, pushed


def _source_for(url: str) -> Source | None:
    host = urlsplit(url).netloc.lower()
    for source in Source.objects.all():
        if any(urlsplit(seed).netloc.lower() == host for seed in source.seeds):
            return source
    return None


def _check_crawl_succeeded(delivery: Delivery) -> None:
    crawler, site = delivery.crawler_status, delivery.original_status
    if crawler is not None and crawler != 200:
        raise Skip(Outcome.SKIPPED, f"crawler status {crawler}", page_failure=True)
    if site is not None and site >= 400:
        raise Skip(Outcome.SKIPPED, f"site status {site}", page_failure=True)


def _content(delivery: Delivery, source: Source) -> Content:
    try:
        return _derive(source, bytes(delivery.body or b""), delivery.content_type)
    except wire.DeliveryError as exc:
        raise Skip(Outcome.REJECTED, str(exc)) from None
    except EmptyContent as exc:
        raise Skip(Outcome.SKIPPED, str(exc), page_failure=True) from None


def _derive(source: Source, raw: bytes, content_type: str) -> Content:
    return content_derive(
        raw=raw,
        content_type=content_type,
        selector=source.content_selector,
        common=set(source.common_shapes),
        patterns=source.boilerplate_regexes,
        limit=settings.WEBHOOK_MAX_BODY_BYTES,
    )


def _embed(content: Content, page: Page, delivery: Delivery | None = None):
    """Chunk the content and embed the chunk texts new to the active space.

    The spend is recorded at once: tokens are paid for even if the swap never comes.
    """
    drafts = chunk_markdown(content.markdown, title=content.title)
    texts = embed_texts(drafts)
    reports = [embeddings_ensure(texts=texts, embedder=e) for e in ingest_embedders()]
    report = EmbedReport.total(reports)
    if report.requests:
        if delivery is not None:
            Delivery.objects.filter(pk=delivery.pk).update(
                embedding_requests=F("embedding_requests") + report.requests,
                embedding_tokens=F("embedding_tokens") + report.tokens,
            )
        Page.objects.filter(pk=page.pk).update(
            embedding_tokens=F("embedding_tokens") + report.tokens
        )
    return drafts, report


def _keep_source(page: Page, content: Content) -> None:
    page_shapes_record(page=page, shapes=content.shapes)
    page.raw_body = content.raw_body
    page.raw_content_type = content.content_type
    page.extractor_version = EXTRACTOR_VERSION


def _apply_content(
    delivery: Delivery, page: Page, pushed: Page | None, content: Content
) -> str:
    if page.is_live and page.content_hash == content.digest:
        return _apply_unchanged(delivery, page, pushed, content)
    drafts, report = _embed(content, page, delivery)
    with transaction.atomic():
        page = _lock_for(delivery, page)
        if page is None:
            return Outcome.SKIPPED
        if page.is_live and page.content_hash == content.digest:
            return _verified(delivery, page, pushed, content)
        kind = (
            PageVersion.Kind.RESTORED if page.deleted_at else PageVersion.Kind.CHANGED
        )
        page_chunks_replace(page=page, drafts=drafts)
        _keep_source(page, content)
        page.mark_changed(
            at=delivery.received_at,
            crawled_at=delivery.crawled_at,
            title=content.title,
            markdown=content.markdown,
            digest=content.digest,
        )
        page.save()
        PageVersion.objects.create(
            page=page,
            kind=kind,
            content_hash=content.digest,
            markdown=content.markdown,
            delivery=delivery,
        )
        _redirect(pushed, page, delivery)
        note = f"{report.embedded} new chunk texts, {report.reused} reused"
        return _finish(delivery, page, Outcome.EMBEDDED, note)


def _apply_unchanged(
    delivery: Delivery, page: Page, pushed: Page | None, content: Content
) -> str:
    with transaction.atomic():
        page = _lock_for(delivery, page)
        if page is None:
            return Outcome.SKIPPED
        return _verified(delivery, page, pushed, content)


def _verified(
    delivery: Delivery, page: Page, pushed: Page | None, content: Content
) -> str:
    _keep_source(page, content)
    page.mark_verified(at=delivery.received_at, crawled_at=delivery.crawled_at)
    page.save()
    _redirect(pushed, page, delivery)
    return _finish(delivery, page, Outcome.UNCHANGED)


def _apply_gone(delivery: Delivery, page: Page) -> str:
    with transaction.atomic():
        page = _lock_for(delivery, page)
        if page is None:
            return Outcome.SKIPPED
        if page.status != Page.Status.GONE:
            page_chunks_replace(page=page, drafts=[])
            page_shapes_record(page=page, shapes={})
            PageVersion.objects.create(
                page=page, kind=PageVersion.Kind.DELETED, delivery=delivery
            )
        page.mark_gone(
            at=delivery.received_at,
            crawled_at=delivery.crawled_at,
            original_status=delivery.original_status,
        )
        page.save()
        return _finish(delivery, page, Outcome.DELETED)


def _apply_skip(delivery: Delivery, page: Page, skip: Skip) -> str:
    with transaction.atomic():
        page = _lock(page)
        if not _still_ours(delivery):
            return _superseded(delivery, page)
        if skip.page_failure and not page.is_newer_than(delivery.crawled_at):
            page.mark_failed(
                at=delivery.received_at,
                error=str(skip),
                original_status=delivery.original_status,
            )
            page.save()
        return _finish(delivery, page, skip.outcome, str(skip))


def _redirect(pushed: Page | None, page: Page, delivery: Delivery) -> None:
    """The pushed URL now leads to ``page``: it leaves search and points there."""
    if pushed is None or pushed.pk == page.pk:
        return
    pushed = _lock(pushed)
    page_chunks_replace(page=pushed, drafts=[])
    pushed.mark_redirected(
        to=page, at=delivery.received_at, crawled_at=delivery.crawled_at
    )
    pushed.final_url = page.url
    pushed.save()


def _lock_for(delivery: Delivery, page: Page) -> Page | None:
    """The page, locked, if this delivery may still change it; else the delivery is
    finished as superseded (another run finished it, or a newer crawl is shown)."""
    page = _lock(page)
    if not _still_ours(delivery) or page.is_newer_than(delivery.crawled_at):
        _superseded(delivery, page)
        return None
    return page


def _lock(page: Page) -> Page:
    return Page.objects.select_for_update().select_related("source").get(pk=page.pk)


def _still_ours(delivery: Delivery) -> bool:
    """True unless another run of this delivery already finished it."""
    state = Delivery.objects.select_for_update().values_list("state", flat=True)
    return state.get(pk=delivery.pk) == Delivery.State.PROCESSING


def _superseded(delivery: Delivery, page: Page) -> str:
    return _finish(
        delivery, page, Outcome.SKIPPED, "superseded: the page shows a newer crawl"
    )


def _finish(delivery: Delivery, page: Page | None, outcome: str, note: str = "") -> str:
    """Record the outcome and drop the raw body (the Markdown is kept on the page)."""
    now = timezone.now()
    Delivery.objects.filter(pk=delivery.pk, state=Delivery.State.PROCESSING).update(
        state=Delivery.State.DONE,
        outcome=outcome,
        error=note,
        processed_at=now,
        next_attempt_at=None,
        body=None,
        page=page,
    )
    if delivery.push_id:
        Push.objects.filter(pk=delivery.push_id).update(delivered_at=now)
    return outcome


def _retry_later(delivery: Delivery, exc: Exception) -> str:
    error = "".join(traceback.format_exception_only(exc)).strip()[:2000]
    if delivery.attempts >= settings.DELIVERY_MAX_ATTEMPTS:
        Delivery.objects.filter(pk=delivery.pk).update(
            state=Delivery.State.FAILED,
            outcome=Outcome.FAILED,
            error=error,
            processed_at=timezone.now(),
            next_attempt_at=None,
        )
        return Outcome.FAILED
    delay = timedelta(
        seconds=settings.DELIVERY_RETRY_SECONDS * 4 ** (delivery.attempts - 1)
    )
    at = timezone.now() + delay
    with transaction.atomic():
        Delivery.objects.filter(pk=delivery.pk).update(
            state=Delivery.State.QUEUED, error=error, next_attempt_at=at
        )
        if delay:
            schedule(
                TASK,
                delivery.pk,
                name=f"retry delivery {delivery.pk} #{delivery.attempts}",
                schedule_type=Schedule.ONCE,
                next_run=at,
            )
        else:
            _enqueue(delivery)
    return "retry"
