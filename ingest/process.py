"""The delivery job: one delivery, one change to the index, in this order:

1. no source covers the URL, or it is out of its page's source's scope: rejected;
2. ``Original-Status`` 404 or 410: tombstone;
3. the crawler's status is not 200, or the site's is 4xx/5xx: a failure on the page,
   its content kept;
4. ``Original-Status`` 304 (the built-in crawler's conditional request): a live page
   is verified unchanged, with nothing read, hashed or embedded;
5. the pushed URL led elsewhere (a redirect): the final URL is the page, the pushed
   one points to it (recorded in 6 to 8);
6. the content equals an older live page's of the same source (a mirror, a
   parameter variant): a duplicate of that page, which stays the one indexed;
7. the content hash equals the live page's: unchanged, ``last_verified_at`` moves;
8. otherwise new content: chunked, new chunk texts embedded, swapped in; a page of
   the same source with almost the same text is flagged, never removed.

Safe to run again after a crash, or twice at once: every change to a page happens
under its row lock, and only while the delivery is still this run's to finish.
"""

from __future__ import annotations

import logging
import traceback
from urllib.parse import urlsplit

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from ingest import wire
from ingest.content import Content, EmptyContent
from ingest.discovery import source_links_push
from ingest.models import Delivery
from ingest.pipeline import (
    content_embed,
    page_keep_body,
    page_lock,
    page_similarity_record,
    source_content,
    source_restrip,
)
from ingest.queueing import delivery_retry_later, error_summary
from ingest.rederive import page_reread, source_boilerplate_catch_up
from retrieval.services import page_chunks_replace
from sources.models import Page, PageVersion, Push, Source
from sources.scope import source_covers, source_for_url
from sources.services import page_shapes_record

logger = logging.getLogger(__name__)

GONE_STATUSES = {404, 410}
NOT_MODIFIED = 304
Outcome = Delivery.Outcome


class Retry(Exception):
    """Worth running again: the job is retried like any failed one."""


class Skip(Exception):
    """The delivery ends here with this outcome; the page may record a failure."""

    def __init__(
        self, outcome: Outcome, reason: str, *, page_failure: bool = False
    ) -> None:
        super().__init__(reason)
        self.outcome = outcome
        self.page_failure = page_failure


def delivery_process(*, delivery_id: int) -> Outcome | Delivery.State | None:
    """Run one delivery to its outcome. Returns the outcome; or the state it was left
    in when it will be retried (queued) or was given up (failed); or None if it was
    not this run's to take."""
    delivery = Delivery.objects.select_related("push").filter(pk=delivery_id).first()
    if delivery is None or not delivery.mark_claimed(at=timezone.now()):
        return None
    if delivery.attempts > settings.DELIVERY_MAX_ATTEMPTS:
        # Every run so far was cut short (a worker killed mid-job, again and again).
        delivery.mark_failed(error="no attempts left: no run of it ever finished")
        return Delivery.State.FAILED
    try:
        outcome = _process(delivery)
    except Exception as exc:  # anything unexpected is retried, then shown as failed
        error = error_summary(exc)
        # The stack, but of the message only the summary: it may quote page text.
        logger.error(
            "delivery %s (rid %s) failed: %s\n%s",
            delivery.pk,
            delivery.rid,
            error,
            "".join(traceback.format_tb(exc.__traceback__)).rstrip(),
        )
    else:
        logger.info("delivery %s (rid %s): %s", delivery.pk, delivery.rid, outcome)
        return outcome
    # Outside the handler, so that an error while scheduling the retry (the
    # database gone) reaches the queue's failure record without this one, and its
    # message, chained to it.
    return delivery_retry_later(delivery=delivery, error=error)


def _process(delivery: Delivery) -> Outcome:
    page, pushed = _resolve_page(delivery)
    if page is None:
        return _finish(delivery, None, Outcome.OUT_OF_SCOPE, _uncovered(delivery.url))
    if not source_covers(page.source, delivery.url):
        note = f"out of the scope of source {page.source} (its deny or allow patterns)"
        return _finish(delivery, None, Outcome.REJECTED, note)
    source_boilerplate_catch_up(source=page.source)
    try:
        if delivery.original_status in GONE_STATUSES:
            return _apply_gone(delivery, page)
        _check_crawl_succeeded(delivery)
        if delivery.original_status == NOT_MODIFIED:
            return _apply_not_modified(delivery, page, pushed)
        content = _content(delivery, page)
        outcome = _apply_content(delivery, page, pushed, content)
    except Skip as skip:
        return _apply_skip(delivery, page, skip)
    if outcome == Outcome.EMBEDDED:
        # New content may link to pages the crawler has not been given yet.
        source_links_push(source=page.source, page=page, content=content)
    return outcome


def _resolve_page(delivery: Delivery) -> tuple[Page | None, Page | None]:
    """The page this delivery is for, and the page that was pushed if it redirected."""
    pushed = delivery.push.page if delivery.push is not None else None
    if pushed is not None and pushed.url == delivery.url:
        return pushed, None
    page = Page.objects.filter(url=delivery.url).select_related("source").first()
    if page is not None:
        return page, pushed
    source = source_for_url(delivery.url)
    if source is None:
        return None, None
    page, _ = Page.objects.get_or_create(url=delivery.url, defaults={"source": source})
    return page, pushed


def _uncovered(url: str) -> str:
    """Why no source takes the URL, for the editor who may add one (its body is kept
    REJECTED_BODY_KEEP_DAYS days, to be re-queued then)."""
    host = urlsplit(url).hostname
    for source in Source.objects.only("seed_urls"):
        if any(urlsplit(seed).hostname == host for seed in source.seeds):
            return "no source covers this URL (the sources of its host leave it out)"
    return "no source covers this host"


def _check_crawl_succeeded(delivery: Delivery) -> None:
    crawler, site = delivery.crawler_status, delivery.original_status
    if crawler is not None and crawler != 200:
        raise Skip(Outcome.SKIPPED, f"crawler status {crawler}", page_failure=True)
    if site is not None and site >= 400:
        raise Skip(Outcome.SKIPPED, f"site status {site}", page_failure=True)


def _content(delivery: Delivery, page: Page) -> Content:
    try:
        return source_content(
            source=page.source,
            raw=bytes(delivery.body or b""),
            content_type=delivery.content_type,
        )
    except wire.DeliveryError as exc:
        raise Skip(Outcome.REJECTED, str(exc)) from None
    except EmptyContent as exc:
        raise Skip(Outcome.SKIPPED, str(exc), page_failure=True) from None


def _apply_not_modified(delivery: Delivery, page: Page, pushed: Page | None) -> Outcome:
    """The site said the content is the one the page holds: verified, and nothing
    else (the stored body and Markdown stay as they are)."""
    with transaction.atomic():
        locked = _lock_for(delivery, page)
        if locked is None:
            return Outcome.SKIPPED
        if not locked.is_live:
            raise Skip(
                Outcome.SKIPPED,
                f"304 Not Modified for a page that is {locked.status}",
                page_failure=True,
            )
        locked.mark_verified(at=delivery.received_at, crawled_at=delivery.crawled_at)
        _validators_keep(delivery, locked)
        locked.save()
        _redirect(pushed, locked, delivery)
        return _finish(delivery, locked, Outcome.UNCHANGED, "304 Not Modified")


def _apply_content(
    delivery: Delivery, page: Page, pushed: Page | None, content: Content
) -> Outcome:
    if _original_of(page, content) is not None:
        return _apply_duplicate(delivery, page, pushed, content)
    if page.is_live and page.content_hash == content.digest:
        return _apply_unchanged(delivery, page, pushed, content)
    drafts, report = content_embed(content=content, page=page, delivery=delivery)
    with transaction.atomic():
        locked = _lock_for(delivery, page)
        if locked is None:
            return Outcome.SKIPPED
        if locked.is_live and locked.content_hash == content.digest:
            return _verified(delivery, locked, pushed, content)
        if locked.is_live and _only_boilerplate_differs(locked, content):
            page_chunks_replace(page=locked, drafts=drafts)
            page_reread(page=locked, content=content)
            note = "the page read again: boilerplate learned since its last crawl"
            return _verified(delivery, locked, pushed, content, note)
        kind = (
            PageVersion.Kind.RESTORED if locked.deleted_at else PageVersion.Kind.CHANGED
        )
        page_chunks_replace(page=locked, drafts=drafts)
        page_keep_body(page=locked, content=content)
        locked.mark_changed(
            at=delivery.received_at,
            crawled_at=delivery.crawled_at,
            title=content.title,
            markdown=content.markdown,
            digest=content.digest,
        )
        _validators_keep(delivery, locked)
        page_similarity_record(page=locked)
        locked.save()
        delivery.version = PageVersion.objects.create(
            page=locked,
            kind=kind,
            content_hash=content.digest,
            markdown=content.markdown,
            recorded_at=delivery.received_at,
        )
        _redirect(pushed, locked, delivery)
        note = f"{report.embedded} new chunk texts, {report.reused} reused"
        return _finish(delivery, locked, Outcome.EMBEDDED, note)


def _apply_unchanged(
    delivery: Delivery, page: Page, pushed: Page | None, content: Content
) -> Outcome:
    with transaction.atomic():
        locked = _lock_for(delivery, page)
        if locked is None:
            return Outcome.SKIPPED
        return _verified(delivery, locked, pushed, content)


def _verified(
    delivery: Delivery,
    page: Page,
    pushed: Page | None,
    content: Content,
    note: str = "",
) -> Outcome:
    page_keep_body(page=page, content=content)
    page.mark_verified(at=delivery.received_at, crawled_at=delivery.crawled_at)
    _validators_keep(delivery, page)
    page.save()
    _redirect(pushed, page, delivery)
    return _finish(delivery, page, Outcome.UNCHANGED, note)


def _only_boilerplate_differs(page: Page, content: Content) -> bool:
    """The page's Markdown, read under the source's current rules, is the new
    content: the lines that differ were learned as boilerplate (or matched a pattern
    added) after the page was last read, before its re-derivation came round."""
    restripped = source_restrip(source=page.source, markdown=page.markdown)
    return restripped == content.markdown


def _original_of(page: Page, content: Content) -> Page | None:
    """The oldest live page of the same source indexed with this content, if older
    than ``page``: it is the one kept. (Two copies indexed at once by two workers
    are settled at the next crawl of the younger one.)"""
    same = Page.objects.filter(
        source_id=page.source_id,
        status=Page.Status.LIVE,
        content_hash=content.digest,
        pk__lt=page.pk,
    )
    return same.order_by("pk").first()


def _apply_duplicate(
    delivery: Delivery, page: Page, pushed: Page | None, content: Content
) -> Outcome:
    with transaction.atomic():
        locked = _lock_for(delivery, page)
        if locked is None:
            return Outcome.SKIPPED
        original = _original_of(locked, content)
        if original is None:  # it changed meanwhile: this is new content after all
            raise Retry("the original page changed while this delivery was read")
        if locked.status != Page.Status.DUPLICATE:
            page_chunks_replace(page=locked, drafts=[])
            page_shapes_record(page=locked, shapes={})
            delivery.version = PageVersion.objects.create(
                page=locked,
                kind=PageVersion.Kind.DUPLICATE,
                content_hash=content.digest,
            )
        locked.title = content.title[:500]
        locked.mark_duplicate(
            of=original,
            at=delivery.received_at,
            crawled_at=delivery.crawled_at,
            digest=content.digest,
        )
        locked.save()
        _redirect(pushed, locked, delivery)
        return _finish(
            delivery, locked, Outcome.DUPLICATE, f"same content as {original}"
        )


def _validators_keep(delivery: Delivery, page: Page) -> None:
    page.remember_validators(
        etag=delivery.etag,
        last_modified=delivery.last_modified,
        site_modified_at=delivery.site_modified_at,
    )


def _apply_gone(delivery: Delivery, page: Page) -> Outcome:
    with transaction.atomic():
        locked = _lock_for(delivery, page)
        if locked is None:
            return Outcome.SKIPPED
        if locked.status != Page.Status.GONE:
            page_chunks_replace(page=locked, drafts=[])
            page_shapes_record(page=locked, shapes={})
            delivery.version = PageVersion.objects.create(
                page=locked,
                kind=PageVersion.Kind.DELETED,
                recorded_at=delivery.received_at,
            )
        locked.mark_gone(
            at=delivery.received_at,
            crawled_at=delivery.crawled_at,
            original_status=delivery.original_status or 404,
        )
        locked.save()
        return _finish(delivery, locked, Outcome.DELETED)


def _apply_skip(delivery: Delivery, page: Page, skip: Skip) -> Outcome:
    with transaction.atomic():
        locked = page_lock(page)
        if not _still_ours(delivery):
            return _superseded(delivery, locked)
        if skip.page_failure and not locked.is_newer_than(delivery.crawled_at):
            locked.mark_failed(
                at=delivery.received_at,
                error=str(skip),
                original_status=delivery.original_status,
            )
            locked.save()
        return _finish(delivery, locked, skip.outcome, str(skip))


def _redirect(pushed: Page | None, page: Page, delivery: Delivery) -> None:
    """The pushed URL now leads to ``page``: it leaves search and points there."""
    if pushed is None or pushed.pk == page.pk:
        return
    locked = page_lock(pushed)
    page_chunks_replace(page=locked, drafts=[])
    locked.mark_redirected(
        to=page, at=delivery.received_at, crawled_at=delivery.crawled_at
    )
    locked.final_url = page.url
    locked.save()


def _lock_for(delivery: Delivery, page: Page) -> Page | None:
    """The page, locked, if this delivery may still change it; else the delivery is
    finished as superseded (another run finished it, or a newer crawl is shown)."""
    locked = page_lock(page)
    if not _still_ours(delivery) or locked.is_newer_than(delivery.crawled_at):
        _superseded(delivery, locked)
        return None
    return locked


def _still_ours(delivery: Delivery) -> bool:
    """True unless another run of this delivery already finished it."""
    state = Delivery.objects.select_for_update().values_list("state", flat=True)
    return state.get(pk=delivery.pk) == Delivery.State.PROCESSING


def _superseded(delivery: Delivery, page: Page) -> Outcome:
    return _finish(
        delivery, page, Outcome.SKIPPED, "superseded: the page shows a newer crawl"
    )


def _finish(
    delivery: Delivery, page: Page | None, outcome: Outcome, note: str = ""
) -> Outcome:
    delivery.mark_done(outcome=outcome, note=note, page_id=page.pk if page else None)
    if delivery.push_id:
        Push.objects.filter(pk=delivery.push_id).update(
            state=Push.State.DELIVERED, delivered_at=timezone.now()
        )
    return outcome
