"""A source's schedule for its next day, and every page re-timed to it.

Once a day per adaptive source (the hourly schedule plans the sources whose plan
is a day old): the day's budget is the source's crawl budget corrected by what
the last days spent (``checks_for_today``); the plan is made from every page's
change rate and hours since its last check (``plan_day``), so the day spends
what it plans; then every page the schedule times is re-timed to the plan in
one statement: due its new interval after its last check, at once when that is
past. Between plans each check times its page under the plan in force
(``Page.interval``). ``sources.day_plan`` says why a day plan rather than a
steady-state one.

A source is planned once a day however many planners run (the schedule's job on
several worker nodes, a copy of it the queue offers again): each holds the
source's advisory lock while it reads the source's plan and makes a new one, so
one that waited reads the plan just made and leaves it.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import cast

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from kbsite import locks
from sources import schedule, sql
from sources.day_plan import SPENDING_DAYS
from sources.models import HOUR, Page, Source

DAY = timedelta(days=1)
# A plan is made again once it is this old.
PLAN_LIFETIME = DAY


def source_schedule_replan(
    *, source: Source, now: datetime | None = None
) -> schedule.Plan | None:
    """Plan the source's next day and re-time its pages; None (and no plan kept)
    for a source that is not adaptive or has nothing to plan."""
    now = now or timezone.now()
    plan = _day_plan(source, now) if source.adaptive_recrawl else None
    stored = None
    if plan is not None:
        stored = {
            "multiplier": plan.multiplier if math.isfinite(plan.multiplier) else "inf",
            "stale_cost_hours": plan.stale_cost_hours,
            "planned_at": now.isoformat(),
        }
    Source.objects.filter(pk=source.pk).update(schedule_plan=stored)
    source.schedule_plan = stored
    if plan is not None:
        pages_retime(source=source, now=now)
    return plan


def sources_schedule_replan(*, now: datetime | None = None) -> int:
    """Plan every adaptive source whose plan is a day old (or missing); returns
    how many got a plan."""
    now = now or timezone.now()
    adaptive = Source.objects.filter(adaptive_recrawl=True).order_by("pk")
    return sum(_replan_if_old(pk, now) for pk in adaptive.values_list("pk", flat=True))


def _replan_if_old(source_id: int, now: datetime) -> bool:
    """Plan the source if its plan is a day old (or missing), under its lock: the
    plan is read after the lock is taken, so a plan another planner made
    meanwhile is seen. Whether a plan was made."""
    with transaction.atomic():
        locks.xact_lock_wait(lock=locks.DAY_PLANS, key=source_id)
        source = Source.objects.filter(pk=source_id, adaptive_recrawl=True).first()
        if source is None:
            return False
        made = (source.schedule_plan or {}).get("planned_at")
        if made and now - datetime.fromisoformat(made) < PLAN_LIFETIME:
            return False
        return source_schedule_replan(source=source, now=now) is not None


def pages_retime(*, source: Source, now: datetime) -> int:
    """Every live page the schedule times (its rate known, no interval of its own,
    no failure backing off, no change announced since its last check) due its
    interval under the source's plan after its last check, at once when that is
    past; in one statement."""
    plan = source.plan()
    if plan is None:
        return 0
    pages = (
        source.pages.filter(
            status=Page.Status.LIVE,
            change_rate__isnull=False,
            recrawl_every=None,
            failure_count=0,
            last_verified_at__isnull=False,
        )
        # A sitemap dated it after its last check: it stays due until checked.
        .exclude(site_modified_at__gt=F("last_verified_at"))
        .values_list("pk", "change_rate", "last_verified_at")
    )
    ids, due = [], []
    for pk, rate, verified in pages.iterator():
        ids.append(pk)
        interval = schedule.next_interval(cast(float, rate), plan)  # not null here
        due.append(max(now, cast(datetime, verified) + HOUR * interval))
    if not ids:
        return 0
    return sql.pages_next_crawl_set(ids=ids, due=due)


def checks_since(verified: datetime | None, hours: list[float], since: datetime) -> int:
    """Checks of a page at or after ``since``, from its last check and the hours
    between its recorded checks."""
    if verified is None or verified < since:
        return 0
    count, at = 1, verified
    for gap in reversed(hours):
        at -= HOUR * gap
        if at < since:
            break
        count += 1
    return count


def _day_plan(source: Source, now: datetime) -> schedule.Plan | None:
    default_rate = HOUR / source.recrawl_every
    since = now - SPENDING_DAYS * DAY
    pages: list[tuple[float, float]] = []
    live = spent = 0
    fixed_per_day = 0.0
    rows = source.pages.values_list(
        "status", "change_rate", "last_verified_at", "check_hours", "recrawl_every"
    )
    for status, rate, verified, hours, own in rows.iterator():
        spent += checks_since(verified, hours, since)
        if own:
            fixed_per_day += DAY / own  # checked at its own interval, whatever
        elif status in {Page.Status.GONE, Page.Status.REDIRECTED}:
            pages.append((0.0, _age(verified, now)))
        elif status == Page.Status.LIVE:
            live += 1
            rate = default_rate if rate is None else rate
            pages.append((rate, _age(verified, now)))
    # A budget set by hand pays for the pages timed by hand too; the default is
    # what checking each page the schedule times once per recheck interval costs.
    if source.crawl_budget:
        budget = source.crawl_budget - fixed_per_day
    else:
        budget = live * default_rate * 24
    if not pages or budget <= 0:
        return None
    observed = min(SPENDING_DAYS, (now - source.created_at) / DAY)
    today = schedule.checks_for_today(
        budget, spent=max(spent - fixed_per_day * observed, 0), days=max(observed, 0)
    )
    return schedule.plan_day(
        pages,
        budget_per_day=today,
        min_hours=source.recrawl_min / HOUR,
        max_hours=source.recrawl_max / HOUR,
    )


def _age(verified: datetime | None, now: datetime) -> float:
    return math.inf if verified is None else max((now - verified) / HOUR, 0.0)
