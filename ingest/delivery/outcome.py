"""Each outcome of a delivery applied to its page, under the page's row lock: not
modified, gone, new content, unchanged content, or a duplicate of an older page.

Embedding happens before the lock is taken (it may call a remote API); what was
read is checked again under the lock, as another run may have changed the page
meanwhile.
"""

from __future__ import annotations

from django.db import transaction

from ingest.delivery.finish import Retry, Skip, delivery_finish, page_lock_for
from ingest.delivery.rederive import page_reread
from ingest.delivery.steps import (
    content_embed,
    content_kept_out,
    page_keep_body,
    page_lock,
    page_similarity_record,
    source_reading_key,
    source_restrip,
)
from ingest.fetchers.http import http_date
from ingest.models import Delivery
from ingest.reading import similarity
from ingest.reading.content import Content
from kbsite.textdiff import change_measure
from retrieval.indexing import page_chunks_replace
from sources.models import Page, PageVersion
from sources.services import page_shapes_record

Outcome = Delivery.Outcome


def apply_not_modified(delivery: Delivery, page: Page, pushed: Page | None) -> Outcome:
    """The site said the content is the one the page holds: verified, and nothing
    else (the stored body and Markdown stay as they are)."""
    with transaction.atomic():
        locked = page_lock_for(delivery, page)
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
        return delivery_finish(delivery, locked, Outcome.UNCHANGED, "304 Not Modified")


# What a check that found the content the page holds writes to the page's row.
VERIFIED_FIELDS = [
    "check_hours", "check_changed", "check_quiet_hours", "change_rate",
    "last_verified_at", "last_crawled_at", "original_status", "failure_count",
    "last_error", "next_crawl_at", "etag", "last_modified", "site_modified_at",
]  # fmt: skip


def apply_same_reading(
    delivery: Delivery, page: Page, pushed: Page | None
) -> Outcome | None:
    """The body is the one the live page's Markdown was read from, under the same
    rules (``source_reading_key``): unchanged, without reading it again. None if
    that is not so under the page's lock, or an older page holds the same content
    (the full reading settles it)."""
    if not (page.is_live and page.reading_key):
        return None  # a new page, or one out of search: nothing to compare with
    reading_key = source_reading_key(
        source=page.source,
        url=page.url,
        raw=bytes(delivery.body or b""),
        content_type=delivery.content_type,
    )
    if page.reading_key != reading_key:
        return None
    with transaction.atomic():
        locked = page_lock_for(delivery, page, original_of=True)
        if locked is None:
            return Outcome.SKIPPED
        original = getattr(locked, "has_original", True)
        if original or not locked.is_live or locked.reading_key != reading_key:
            return None
        locked.mark_verified(at=delivery.received_at, crawled_at=delivery.crawled_at)
        _validators_keep(delivery, locked)
        locked.save(update_fields=VERIFIED_FIELDS)
        _redirect(pushed, locked, delivery)
        return delivery_finish(delivery, locked, Outcome.UNCHANGED)


def apply_content(
    delivery: Delivery, page: Page, pushed: Page | None, content: Content
) -> Outcome:
    if _original_of(page, content) is not None:
        return _apply_duplicate(delivery, page, pushed, content)
    kept_out = content_kept_out(content=content, source=page.source)
    if _same(page, content, kept_out):
        return _apply_unchanged(delivery, page, pushed, content)
    drafts, report = content_embed(content=content, page=page, delivery=delivery)
    sig = similarity.signature(content.markdown)
    with transaction.atomic():
        locked = page_lock_for(delivery, page)
        if locked is None:
            return Outcome.SKIPPED
        if _same(locked, content, kept_out):
            return _verified(delivery, locked, pushed, content)
        if locked.is_live and locked.content_hash == content.digest:
            # The same text, now kept out of answers or let back in.
            page_chunks_replace(
                page=locked, drafts=drafts, vectors_fresh=not report.reused
            )
            locked.not_indexed_reason = kept_out
            note = f"kept out of answers: {kept_out}" if kept_out else "answered from"
            return _verified(delivery, locked, pushed, content, note)
        if locked.is_live and _only_boilerplate_differs(locked, content):
            page_chunks_replace(
                page=locked, drafts=drafts, vectors_fresh=not report.reused
            )
            page_reread(page=locked, content=content)
            locked.not_indexed_reason = kept_out
            note = "the page read again: boilerplate learned since its last crawl"
            return _verified(delivery, locked, pushed, content, note)
        kind = _content_step(locked)
        change = change_measure(_markdown_held(locked, kind), content.markdown)
        delivery.version = PageVersion.objects.create(
            page=locked,
            source_id=locked.source_id,
            kind=kind,
            content_hash=content.digest,
            markdown=content.markdown,
            recorded_at=delivery.received_at,
            lines_added=change.lines_added,
            lines_removed=change.lines_removed,
            words_added=change.words_added,
            words_removed=change.words_removed,
            sections=change.sections,
            chunks_embedded=report.embedded,
        )
        page_chunks_replace(
            page=locked,
            drafts=drafts,
            change=delivery.version,
            vectors_fresh=not report.reused,
        )
        page_keep_body(page=locked, content=content)
        locked.not_indexed_reason = kept_out
        locked.mark_changed(
            at=delivery.received_at,
            crawled_at=delivery.crawled_at,
            title=content.title,
            markdown=content.markdown,
            digest=content.digest,
            # The response's own date of this content (a sitemap's lastmod
            # may name only the day): when the change came, for the schedule.
            modified_at=http_date(delivery.last_modified),
        )
        _validators_keep(delivery, locked)
        page_similarity_record(page=locked, sig=sig)
        locked.save()
        _redirect(pushed, locked, delivery)
        note = f"{report.embedded} new chunk texts, {report.reused} reused"
        if kept_out:
            note = f"kept out of answers: {kept_out}"
        return delivery_finish(delivery, locked, Outcome.EMBEDDED, note)


def _content_step(page: Page) -> PageVersion.Kind:
    """New content is a new page the first time, a return after a tombstone, or a
    change."""
    if page.deleted_at:
        return PageVersion.Kind.RESTORED
    # Every step records when it came: a page without that has none.
    if page.last_changed_at is None or not page.versions.exists():
        return PageVersion.Kind.NEW
    return PageVersion.Kind.CHANGED


def _markdown_held(page: Page, kind: PageVersion.Kind) -> str:
    """The Markdown the page holds before new content: none for a new page or one
    back from a tombstone (not read), else its own."""
    if kind in (PageVersion.Kind.NEW, PageVersion.Kind.RESTORED):
        return ""
    return page.markdown


def _same(page: Page, content: Content, kept_out: str) -> bool:
    """The page is live with this content, answered from (or not) as it should."""
    return (
        page.is_live
        and page.content_hash == content.digest
        and page.not_indexed_reason == kept_out
    )


def _apply_unchanged(
    delivery: Delivery, page: Page, pushed: Page | None, content: Content
) -> Outcome:
    with transaction.atomic():
        locked = page_lock_for(delivery, page)
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
    return delivery_finish(delivery, page, Outcome.UNCHANGED, note)


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
    same = Page.objects.light().filter(
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
        locked = page_lock_for(delivery, page)
        if locked is None:
            return Outcome.SKIPPED
        original = _original_of(locked, content)
        if original is None:  # it changed meanwhile: this is new content after all
            raise Retry("the original page changed while this delivery was read")
        if locked.status != Page.Status.DUPLICATE:
            _page_unindex(
                delivery, locked, PageVersion.Kind.DUPLICATE,
                content_hash=content.digest,
            )  # fmt: skip
        locked.title = content.title[:500]
        locked.mark_duplicate(
            of=original,
            at=delivery.received_at,
            crawled_at=delivery.crawled_at,
            digest=content.digest,
        )
        locked.save()
        _redirect(pushed, locked, delivery)
        return delivery_finish(
            delivery, locked, Outcome.DUPLICATE, f"same content as {original}"
        )


def _page_unindex(
    delivery: Delivery, page: Page, kind: PageVersion.Kind, **version: object
) -> None:
    """The page leaves the index (its chunks and line shapes), and the delivery
    records the version that says why."""
    delivery.version = PageVersion.objects.create(
        page=page, source_id=page.source_id, kind=kind, **version
    )
    page_chunks_replace(page=page, drafts=[], change=delivery.version)
    page_shapes_record(page=page, shapes={})


def _validators_keep(delivery: Delivery, page: Page) -> None:
    page.remember_validators(
        etag=delivery.etag,
        last_modified=delivery.last_modified,
        site_modified_at=delivery.site_modified_at,
    )


def apply_gone(delivery: Delivery, page: Page, pushed: Page | None) -> Outcome:
    """The page answers 404 or 410: a tombstone. A pushed page that led to it
    leaves search too, pointing to it: its address now ends at a missing page."""
    with transaction.atomic():
        locked = page_lock_for(delivery, page)
        if locked is None:
            return Outcome.SKIPPED
        if locked.status != Page.Status.GONE:
            _page_unindex(
                delivery, locked, PageVersion.Kind.DELETED,
                recorded_at=delivery.received_at,
            )  # fmt: skip
        locked.mark_gone(
            at=delivery.received_at,
            crawled_at=delivery.crawled_at,
            original_status=delivery.original_status or 404,
        )
        locked.save()
        _redirect(pushed, locked, delivery)
        return delivery_finish(delivery, locked, Outcome.DELETED)


def _redirect(pushed: Page | None, page: Page, delivery: Delivery) -> None:
    """The pushed URL now leads to ``page``: it leaves search and points there."""
    if pushed is None or pushed.pk == page.pk:
        return
    locked = page_lock(pushed)
    moving = locked.redirect_to_id != page.pk or locked.status != Page.Status.REDIRECTED
    moved = None
    if moving:
        moved = PageVersion.objects.create(
            page=locked,
            source_id=locked.source_id,
            kind=PageVersion.Kind.MOVED,
            recorded_at=delivery.received_at,
        )
    page_chunks_replace(page=locked, drafts=[], change=moved)
    locked.mark_redirected(
        to=page, at=delivery.received_at, crawled_at=delivery.crawled_at
    )
    locked.final_url = page.url
    locked.save()
