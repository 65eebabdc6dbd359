"""How a run of the delivery job ends: the page locked, what the decision says
written to it, and the delivery's outcome recorded, in one transaction (a delivery
with no page to change records its outcome alone).

A run may change a page only if the page shows no newer crawl, checked under the
page's row lock (``ingest.delivery.outcome.decide``), and only if the delivery is
still its to finish: the outcome is recorded by a conditional update in the
transaction that changed the page, which rolls back if another run of the delivery
finished it first. So two runs of one delivery, or deliveries of two crawls of one
page, never both apply.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from ingest.delivery.content import page_keep_body, page_lock, page_similarity_record
from ingest.delivery.models import Delivery
from ingest.delivery.outcome import Change, Decision, Read, Reading, decide
from ingest.delivery.rederive import page_reread
from ingest.fetchers.http import http_date
from ingest.pushing.models import Push
from kbsite.textdiff import change_measure
from retrieval.indexing import page_chunks_replace
from sources.models import Page, PageVersion
from sources.services import page_shapes_record

Outcome = Delivery.Outcome


class Retry(Exception):
    """Worth running again: the job is retried like any failed one."""


class Superseded(Exception):
    """Another run of this delivery recorded its outcome first: what this run
    changed in the transaction is rolled back."""


# What a check that found the content the page holds writes to the page's row (the
# other changes save the whole row).
VERIFIED_FIELDS = [
    "check_hours", "check_changed", "check_quiet_hours", "change_rate",
    "last_verified_at", "last_crawled_at", "original_status", "failure_count",
    "last_error", "next_crawl_at", "etag", "last_modified", "site_modified_at",
]  # fmt: skip
VERIFIED = {Change.VERIFIED, Change.VERIFIED_READING}
# The changes that swap the page's chunks for the reading's.
CHUNKS_SWAPPED = {Change.REINDEXED, Change.REREAD, Change.CHANGED}
# The changes that keep the delivered body as the page's (a new one keeps it too).
BODY_KEPT = {Change.VERIFIED_BODY, Change.REINDEXED, Change.REREAD}
# The changes after which a pushed URL that led to the page points to it: every
# one that reached the page's content or its absence (not a failure, not nothing).
REDIRECTED = {
    Change.GONE, Change.DUPLICATE, Change.VERIFIED, Change.VERIFIED_READING,
    Change.VERIFIED_BODY, Change.REINDEXED, Change.REREAD, Change.CHANGED,
}  # fmt: skip


def delivery_apply(
    delivery: Delivery, page: Page | None, pushed: Page | None, reading: Reading
) -> Outcome | None:
    """Apply what was read to ``page`` under its lock and record the outcome, in one
    transaction; a URL no source covers, or a page its source's scope now leaves
    out, only records it (there is nothing of a page to change). None if the body
    read before under the same rules is no longer the page's: read it
    (``delivery_read`` with ``again``) and apply that."""
    if page is None or reading.kind == Read.REJECTED:
        # Nothing of a page to change (a rejected page left search as it moved
        # out of its source's scope): the outcome alone, and its push's with it.
        with transaction.atomic():
            return delivery_finish(delivery, page, reading.outcome, reading.reason)
    with transaction.atomic():
        locked = page_lock(page, original_of=reading.asks_for_original)
        decision = decide(delivery, locked, reading)
        if decision is None:
            return None
        if decision.change == Change.RETRY:
            raise Retry(decision.note)
        if decision.change != Change.NOTHING:
            decision_write(delivery, locked, reading, decision)
            locked.save(
                update_fields=VERIFIED_FIELDS if decision.change in VERIFIED else None
            )
        if decision.change in REDIRECTED:
            _redirect(pushed, locked, delivery)
        return delivery_finish(delivery, locked, decision.outcome, decision.note)


def decision_write(
    delivery: Delivery, page: Page, reading: Reading, decision: Decision
) -> None:
    """Write the decision to the locked page (saved by the caller: only
    ``VERIFIED_FIELDS`` for a check that found its content)."""
    content, change = reading.content, decision.change
    if change == Change.FAILURE:
        page.mark_failed(
            at=delivery.received_at,
            error=decision.note,
            original_status=delivery.original_status,
        )
        return
    if change == Change.GONE:
        if page.status != Page.Status.GONE:
            _page_unindex(
                delivery, page, PageVersion.Kind.DELETED,
                recorded_at=delivery.received_at,
            )  # fmt: skip
        page.mark_gone(
            at=delivery.received_at,
            crawled_at=delivery.crawled_at,
            original_status=delivery.original_status or 404,
        )
        return
    if change == Change.DUPLICATE:
        assert content is not None and decision.original is not None
        if page.status != Page.Status.DUPLICATE:
            _page_unindex(
                delivery, page, PageVersion.Kind.DUPLICATE,
                content_hash=content.digest,
            )  # fmt: skip
        page.title = content.title[:500]
        page.mark_duplicate(
            of=decision.original,
            at=delivery.received_at,
            crawled_at=delivery.crawled_at,
            digest=content.digest,
        )
        return
    if change in CHUNKS_SWAPPED:
        _chunks_swap(delivery, page, reading, change)
        # Whether the page is answered from goes with the chunks it now has.
        page.not_indexed_reason = reading.kept_out
    if change == Change.CHANGED:
        _page_change(delivery, page, reading)
    else:
        if change in BODY_KEPT:
            assert content is not None
            page_keep_body(page=page, content=content)
        page.mark_verified(at=delivery.received_at, crawled_at=delivery.crawled_at)
    page.remember_validators(
        etag=delivery.etag,
        last_modified=delivery.last_modified,
        site_modified_at=delivery.site_modified_at,
    )


def _chunks_swap(
    delivery: Delivery, page: Page, reading: Reading, change: Change
) -> None:
    """The page's chunks become the reading's: new content records its version
    first (the chunks are swapped with the change they come from); a page read
    again under boilerplate learned since brings its history in line after."""
    content, report = reading.content, reading.report
    assert content is not None and report is not None
    if change == Change.CHANGED:
        kind = _content_step(page)
        measured = change_measure(_markdown_held(page, kind), content.markdown)
        delivery.version = PageVersion.objects.create(
            page=page,
            source_id=page.source_id,
            kind=kind,
            content_hash=content.digest,
            markdown=content.markdown,
            recorded_at=delivery.received_at,
            lines_added=measured.lines_added,
            lines_removed=measured.lines_removed,
            words_added=measured.words_added,
            words_removed=measured.words_removed,
            sections=measured.sections,
            chunks_embedded=report.embedded,
        )
    page_chunks_replace(
        page=page,
        drafts=reading.drafts,
        change=delivery.version if change == Change.CHANGED else None,
        vectors_fresh=not report.reused,
    )
    if change == Change.REREAD:
        page_reread(page=page, content=content)


def _page_change(delivery: Delivery, page: Page, reading: Reading) -> None:
    """New content becomes the page's: its body, Markdown and hash, when it
    changed, and the near-duplicate it is flagged as (its chunks and version are
    swapped in first, ``_chunks_swap``)."""
    content = reading.content
    assert content is not None
    page_keep_body(page=page, content=content)
    page.not_indexed_reason = reading.kept_out
    page.mark_changed(
        at=delivery.received_at,
        crawled_at=delivery.crawled_at,
        title=content.title,
        markdown=content.markdown,
        digest=content.digest,
        # The response's own date of this content (a sitemap's lastmod may name
        # only the day): when the change came, for the schedule.
        modified_at=http_date(delivery.last_modified),
    )
    page_similarity_record(page=page, sig=reading.signature)


def _markdown_held(page: Page, kind: PageVersion.Kind) -> str:
    """The Markdown the page holds before new content: none for a new page or one
    back from a tombstone (not read), else its own."""
    if kind in (PageVersion.Kind.NEW, PageVersion.Kind.RESTORED):
        return ""
    return page.markdown


def _content_step(page: Page) -> PageVersion.Kind:
    """New content is a new page the first time, a return after a tombstone, or a
    change."""
    if page.deleted_at:
        return PageVersion.Kind.RESTORED
    # Every step records when it came: a page without that has none.
    if page.last_changed_at is None or not page.versions.exists():
        return PageVersion.Kind.NEW
    return PageVersion.Kind.CHANGED


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


def delivery_finish(
    delivery: Delivery, page: Page | None, outcome: Outcome, note: str = ""
) -> Outcome:
    """Record the outcome. Raises ``Superseded`` if another run of the delivery
    recorded one first (inside a transaction, what this run changed rolls back)."""
    if not delivery.mark_done(
        outcome=outcome, note=note, page_id=page.pk if page else None
    ):
        raise Superseded(f"delivery {delivery.pk} was finished by another run")
    if delivery.push_id:
        Push.objects.filter(pk=delivery.push_id).update(
            state=Push.State.DELIVERED, delivered_at=timezone.now()
        )
    return outcome
