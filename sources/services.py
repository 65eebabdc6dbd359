"""Work on sources and pages that spans rows: boilerplate counts."""

from __future__ import annotations

import math

from django.conf import settings
from django.db.models import F

from sources import sql
from sources.models import LineShape, Page, Source


def source_common_shapes(*, source: Source) -> set[int]:
    """Line shapes on enough of the source's live pages to count as boilerplate."""
    live = source.pages.filter(status=Page.Status.LIVE).count()
    threshold = max(
        settings.BOILERPLATE_MIN_PAGES,
        math.ceil(live * settings.BOILERPLATE_MIN_SHARE / 100),
    )
    shapes = LineShape.objects.filter(source=source, pages__gte=threshold)
    return set(shapes.values_list("shape", flat=True))


def source_boilerplate_refresh(*, source: Source) -> set[int]:
    """Bring the source's stripped set up to date with its counts.

    Returns the shapes that came in or went out, whose pages now need deriving again
    (empty if nothing moved, or another process got there first).
    """
    fresh = source_common_shapes(source=source)
    old = set(source.common_shapes)
    if fresh == old:
        return set()
    moved = Source.objects.filter(pk=source.pk, common_shapes=sorted(old)).update(
        common_shapes=sorted(fresh)
    )
    source.common_shapes = sorted(fresh)
    return fresh ^ old if moved else set()


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
