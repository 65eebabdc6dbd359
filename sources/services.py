"""Work on sources and pages that spans rows: boilerplate counts, and what a
sitemap says about when pages changed."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.db.models import F, Value
from django.db.models.functions import Least

from kbsite.sitemaps import Entry
from sources import sql
from sources.models import LineShape, Page, Source

# URLs looked up at once (PostgreSQL takes at most 65,535 parameters a query).
URL_BATCH = 10_000


def source_boilerplate_refresh(
    *, source: Source, then: Callable[[set[int]], object] | None = None
) -> tuple[set[int], int]:
    """Bring the source's stripped set up to date with its counts; ``then`` is
    called with the shapes that moved in the transaction that moves them.

    The set is the line shapes on enough of the source's live pages to count as
    boilerplate (one statement, which counts the live pages too): on at least
    ``BOILERPLATE_MIN_PAGES`` pages and ``BOILERPLATE_MIN_SHARE`` % of them, or
    for a shape the source's stored set strips already ``BOILERPLATE_KEEP_SHARE`` %.

    Returns the shapes that came in or went out, whose pages now need deriving again
    (empty if nothing moved, or another process got there first), and the source's
    live pages the statement counted.
    """
    counted = sql.common_shapes_count(
        source_id=source.pk,
        min_pages=settings.BOILERPLATE_MIN_PAGES,
        min_share=settings.BOILERPLATE_MIN_SHARE,
        keep_share=settings.BOILERPLATE_KEEP_SHARE,
    )
    fresh, old = set(counted.shapes), set(source.common_shapes)
    if fresh == old:
        return set(), counted.live
    with transaction.atomic():
        moved = Source.objects.filter(pk=source.pk, common_shapes=sorted(old)).update(
            common_shapes=sorted(fresh)
        )
        if moved and then is not None:
            then(fresh ^ old)
    if not moved:
        # Another process moved the set first: read again under its set.
        source.refresh_from_db(fields=["common_shapes"])
        return set(), counted.live
    source.common_shapes = sorted(fresh)
    return fresh ^ old, counted.live


def page_shapes_record(*, page: Page, shapes: dict[int, str]) -> None:
    """Move the page's contribution to the source's counts to ``shapes``
    (shape → an example line). Call inside the transaction that saves the page."""
    old, new = set(page.line_shapes), set(shapes)
    added, removed = new - old, old - new
    if removed:
        # Locks taken in shape order, as the count's insert does: no deadlocks.
        rows = LineShape.objects.filter(source_id=page.source_id, shape__in=removed)
        locked = rows.order_by("shape").select_for_update().values("pk")
        LineShape.objects.filter(pk__in=locked).update(pages=F("pages") - 1)
    if added:
        _increment(page.source_id, {shape: shapes[shape] for shape in added})
    page.line_shapes = sorted(new)


def _increment(source_id: int, shapes: dict[int, str]) -> None:
    examples = {shape: line[:300] for shape, line in shapes.items()}
    sql.line_shapes_count_up(source_id=source_id, examples=examples)


def pages_sitemap_dated(
    *, source: Source, entries: Iterable[Entry], now: datetime
) -> list[int]:
    """The source's pages a sitemap dates after their last check (``entries``:
    sitemap entries under their canonical URLs), in the entries' order. Their
    ``site_modified_at`` becomes the lastmod, and they are due now: the schedule
    waits no longer for a change the site announces. A page backing off after a
    failed crawl keeps its time, and a page out of every scope is left alone.

    The last check is the later of the last verification and the last crawl (a
    tombstone's), and a lastmod of a day alone counts until that day's end; a
    page never checked counts as dated after it."""
    dated = {e.url: e for e in entries if e.lastmod and e.changed_by}
    urls = list(dated)
    found: dict[str, int] = {}
    for start in range(0, len(urls), URL_BATCH):
        rows = (
            source.pages.filter(url__in=urls[start : start + URL_BATCH])
            .exclude(status=Page.Status.GONE, next_crawl_at=None)
            .order_by()
            .values_list("pk", "url", "last_verified_at", "last_crawled_at")
        )
        for pk, url, verified, crawled in rows:
            checked = max((t for t in (verified, crawled) if t), default=None)
            changed_by = dated[url].changed_by
            if checked is None or (changed_by and changed_by > checked):
                found[url] = pk
    by_lastmod: dict[datetime, list[int]] = {}
    for url, pk in found.items():
        lastmod = dated[url].lastmod
        if lastmod:
            by_lastmod.setdefault(lastmod, []).append(pk)
    for lastmod, ids in by_lastmod.items():
        # One statement per date (a sitemap's pages often share their build's).
        Page.objects.filter(pk__in=ids).update(site_modified_at=lastmod)
        Page.objects.filter(pk__in=ids, failure_count=0).update(
            next_crawl_at=Least(F("next_crawl_at"), Value(now))
        )
    return [found[url] for url in urls if url in found]
