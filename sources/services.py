"""Work on sources and pages that spans rows: boilerplate counts, schedule plans."""

from __future__ import annotations

import math

from django.conf import settings
from django.db import connection
from django.db.models import F

from sources import schedule
from sources.models import HOUR, LineShape, Page, Source


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
        # Locks taken in shape order, as the insert below does: no deadlocks.
        rows = LineShape.objects.filter(source_id=page.source_id, shape__in=removed)
        locked = rows.order_by("shape").select_for_update().values("pk")
        LineShape.objects.filter(pk__in=locked).update(pages=F("pages") - 1)
    if added:
        _increment(page.source_id, {shape: shapes[shape] for shape in added})
    page.line_shapes = sorted(new)


def _increment(source_id: int, shapes: dict[int, str]) -> None:
    # One statement, and no lost update when two pages add the same shape at once.
    table = LineShape._meta.db_table
    rows = [(source_id, shape, 1, shapes[shape][:300]) for shape in sorted(shapes)]
    values = ", ".join(["(%s, %s, %s, %s)"] * len(rows))
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (source_id, shape, pages, example) VALUES {values} "
            "ON CONFLICT (source_id, shape) DO UPDATE SET pages = "
            f"{table}.pages + 1",
            [value for row in rows for value in row],
        )


def source_schedule_replan(*, source: Source) -> schedule.Plan | None:
    """Work out the source's price of a check from its live pages' change rates and
    its crawl budget (by default what checking each page once per recheck interval
    costs); gone and redirected pages' checks come off the budget first. Each page
    takes its new interval at its next check."""
    plan = None
    if source.adaptive_recrawl:
        default_rate = HOUR / source.recrawl_every
        live = source.pages.filter(status=Page.Status.LIVE)
        rates = [
            default_rate if rate is None else rate
            for rate in live.values_list("change_rate", flat=True)
        ]
        resting = source.pages.filter(
            status__in=[Page.Status.GONE, Page.Status.REDIRECTED]
        ).count()
        budget = source.crawl_budget or len(rates) * default_rate * 24
        budget -= resting * 24 * HOUR / source.recrawl_max
        if rates and budget > 0:
            plan = schedule.plan_checks(
                rates,
                budget_per_day=budget,
                min_hours=source.recrawl_min / HOUR,
                max_hours=source.recrawl_max / HOUR,
            )
    stored = None
    if plan is not None:
        multiplier = plan.multiplier
        stored = {
            "multiplier": multiplier if math.isfinite(multiplier) else "inf",
            "stale_cost_hours": plan.stale_cost_hours,
        }
    Source.objects.filter(pk=source.pk).update(schedule_plan=stored)
    source.schedule_plan = stored
    return plan


def sources_schedule_replan() -> int:
    """Re-plan every adaptive source; returns how many got a plan."""
    return sum(
        source_schedule_replan(source=source) is not None
        for source in Source.objects.filter(adaptive_recrawl=True)
    )
