"""Deriving pages again from their stored bodies when the rules that read them
change (the boilerplate learned for their source), without crawling.

A new reading of the same body is not a change of the site: it records no version
and moves no freshness date. The page's latest version takes the new reading, and
a version whose only difference from the one before was lines now known as
boilerplate (a new footer on every page, counted as content until enough pages
carried it) is dropped, with ``last_changed_at`` back at the change that remains.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import F, QuerySet, Value
from django.db.models.functions import Concat
from django_q.tasks import async_task

from ingest.delivery.content import content_embed, page_lock, page_similarity_record
from ingest.delivery.models import Delivery
from ingest.reading import similarity, wire
from ingest.reading.content import Content, EmptyContent
from ingest.reading.extract import EXTRACTOR_VERSION
from ingest.reading.rules import content_kept_out, source_content, source_restrip
from retrieval.indexing import page_chunks_replace
from sources.models import Page, PageVersion, Source
from sources.services import source_boilerplate_refresh

TASK = "ingest.tasks.source_pages_rederive_task"
Kind = PageVersion.Kind


# A check of a source's stripped lines counts its live pages, so it costs more as
# the source grows: 20 ms at 100,000 pages just written (4 ms once vacuumed),
# against 0.5 ms at 1,000. A process reading a source's pages checks before each
# one while the source has fewer than READ_CHECK_SHARE live pages, and after that
# before one in every ``live // READ_CHECK_SHARE + 1`` it reads: about the same
# cost a page whatever the source's size. A shape crossing a bar is then noticed
# within about a hundredth of the source's pages read by each process (a worker
# the cluster replaces starts checking at once); the pages read meanwhile under
# the old set carry the shape, and are derived again with every page that does
# when the set moves. The 10-minute refresh checks every source whatever was read.
READ_CHECK_SHARE = 100


class _ReadPace:
    """For each source, how many more of its pages this process reads before it
    checks the source's stripped lines again."""

    def __init__(self) -> None:
        self._left: dict[int, int] = {}

    def due(self, source_id: int) -> bool:
        left = self._left.get(source_id, 0)
        if left:
            self._left[source_id] = left - 1
        return not left

    def counted(self, source_id: int, live: int) -> None:
        self._left[source_id] = live // READ_CHECK_SHARE


READ_PACE = _ReadPace()


def source_boilerplate_catch_up(*, source: Source, reading: bool = False) -> bool:
    """Bring the source's stripped lines up to date with its counts; when they
    moved, queue the re-derivation of the pages they touch. True if they moved.

    ``reading``: a page of the source is about to be read, and the check is made
    only when due (``READ_CHECK_SHARE``)."""
    if reading and not READ_PACE.due(source.pk):
        return False

    def queue(moved: set[int]) -> None:
        async_task(TASK, source.pk, sorted(moved), task_name=f"rederive {source}")

    # Queued in the commit that moves the set: a set moved with no job queued
    # would never be caught up with (a later refresh finds it current).
    moved, live = source_boilerplate_refresh(source=source, then=queue)
    READ_PACE.counted(source.pk, live)
    return bool(moved)


def sources_boilerplate_refresh() -> int:
    """For every source, catch up with its counts (pages may stop arriving before a
    shape crosses the line); returns how many sources had pages to derive again."""
    return sum(
        source_boilerplate_catch_up(source=source) for source in Source.objects.all()
    )


# The source's settings that decide how its pages are read: when one changes,
# every page is derived again from its stored body, without a crawl.
READING_FIELDS = ("content_selector", "boilerplate_patterns", "index_source_listings")


def source_reading_changed(*, source: Source) -> int:
    """Queue, once the change commits, the re-derivation of every live page of
    the source that keeps its body; returns how many pages that is."""
    pages = source.pages.filter(status=Page.Status.LIVE).exclude(raw_body=None)
    count = pages.count()
    if count:
        transaction.on_commit(
            lambda: async_task(TASK, source.pk, None, task_name=f"rederive {source}")
        )
    return count


def source_pages_rederive(*, source: Source, shapes: list[int] | None) -> int:
    """Derive again the live pages carrying these shapes (None: every live page);
    returns how many changed."""
    pages = source.pages.filter(status=Page.Status.LIVE)
    if shapes is not None:
        pages = pages.filter(line_shapes__overlap=shapes)
    changed = 0
    for page in pages.exclude(raw_body=None).select_related("source").iterator():
        changed += page_rederive(page=page)
    return changed


def page_rederive(*, page: Page) -> bool:
    """New Markdown and chunks from the page's stored body, under the source's current
    rules; only chunk texts new to the index are embedded. False if nothing changed
    (or a newer delivery got there first)."""
    return page_rederive_counted(page=page) is not None


def pages_stale_extraction() -> QuerySet[Page]:
    """Live pages whose Markdown an older extractor made, with their stored body."""
    pages = Page.objects.filter(status=Page.Status.LIVE).exclude(raw_body=None)
    stale = pages.exclude(extractor_version=EXTRACTOR_VERSION).order_by("pk")
    return stale.select_related("source")


def page_rederive_counted(*, page: Page) -> int | None:
    """``page_rederive``, returning the tokens embedded for it (None: unchanged)."""
    seen = page.last_crawled_at
    try:
        content = source_content(
            source=page.source,
            url=page.url,
            raw=bytes(page.raw_body or b""),
            content_type=page.raw_content_type,
        )
    except (wire.DeliveryError, EmptyContent):
        return None
    kept_out = content_kept_out(content=content, source=page.source)
    if (
        content.digest == page.content_hash
        and page.not_indexed_reason == kept_out
        and page.release_notes == content.release_notes
    ):
        if page.extractor_version != EXTRACTOR_VERSION:
            Page.objects.filter(pk=page.pk).update(extractor_version=EXTRACTOR_VERSION)
        return None
    drafts, report = content_embed(content=content, page=page)
    sig = similarity.signature(content.markdown)
    with transaction.atomic():
        locked = page_lock(page)
        if locked.last_crawled_at != seen or not locked.is_live:
            return None
        page_chunks_replace(page=locked, drafts=drafts)
        page_reread(page=locked, content=content)
        locked.not_indexed_reason = kept_out
        page_similarity_record(page=locked, sig=sig)
        locked.save()
    return report.tokens


def page_reread(*, page: Page, content: Content) -> None:
    """Give the page a new reading of its body and bring its history in line (see
    the module's docstring). Call inside the transaction that saves the page."""
    page.mark_rederived(
        title=content.title, markdown=content.markdown, digest=content.digest
    )
    page.extractor_version = EXTRACTOR_VERSION
    page.release_notes = content.release_notes
    page.reading_key = content.reading_key
    history = page.versions.order_by("-recorded_at", "-pk").iterator(chunk_size=4)
    latest = next(history, None)
    if latest is None:
        return
    for older in history:
        if latest.kind != Kind.CHANGED or older.kind in PageVersion.TOMBSTONES:
            break
        if source_restrip(source=page.source, markdown=older.markdown) != (
            content.markdown
        ):
            break
        Delivery.objects.filter(version=latest).update(
            error=Concat(F("error"), Value("; only boilerplate, learned later"))
        )
        latest.delete()
        latest = older
        page.last_changed_at = older.recorded_at
    latest.markdown = content.markdown
    latest.content_hash = content.digest
    latest.save(update_fields=["markdown", "content_hash"])
