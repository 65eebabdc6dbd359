"""A source's next day: the price of a check that spends the day's budget as pages
actually fall due, every page re-timed to it, and the budget corrected by spending.

Steady-state plans (``sources.schedule.plan_checks``) count each page's checks per
hour as if it sat at a random point of its interval. While a source learns it does
not: pages found slow at their first check are far from their next one, pages found
fast are overdue, and in the simulated month of ``bench.schedule`` a day's checks
ranged from half to 1.7 times the budget. Here each day is planned from each page's
hours since its last check, so it spends what it plans, and the checks that pages
found slow give up go to the others the next day.

Once a day per source, in this order: ``checks_for_today``, ``plan_day``, ``retime``.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable

from sources.change_rate import HOURS_PER_DAY
from sources.staleness import (
    STALE_WEIGHT,
    STILL_RATE,
    Plan,
    check_plan_bounds,
    next_interval,
    price_range,
)

# Days of spending ``checks_for_today`` is given: what each page's kept checks
# (``Page.check_hours``, the last 50) hold even for an hourly page.
SPENDING_DAYS = 2
# Groups per tenfold of rate. A day's checks fall in steps as the price rises (pages
# checked together flip together), so the groups are finer than a steady-state grid.
DAY_GROUPS_PER_DECADE = 128


def plan_day(
    pages: Iterable[tuple[float, float]],
    *,
    budget_per_day: float,
    min_hours: float,
    max_hours: float,
    stale_weight: float = STALE_WEIGHT,
) -> Plan:
    """The plan for a source's next 24 hours, for its pages re-timed to it.

    ``pages`` holds every page's rate and hours since its last check (``math.inf``
    if never checked; rate 0 for a tombstone). Re-timed (``retime``), a page of
    interval ``I`` is due ``I`` hours after its last check, at once if that is past,
    so it falls due ``⌊D/I⌋ + [age ≥ I - (D mod I)]`` times in the next ``D = 24``
    hours. The price is set where those add up to ``budget_per_day`` or just under;
    the price means what it means in ``plan_checks``, with ``κ`` from the pages and
    this budget.

    Pages are grouped by rate, ``DAY_GROUPS_PER_DECADE`` groups to a tenfold, each
    group at the interval of its mean rate (in log); the price is bisected.
    """
    check_plan_bounds(budget_per_day, min_hours, max_hours, stale_weight)
    rates, ages, still = _by_rate(pages)
    count = len(still) + sum(map(len, ages))
    stale_cost = stale_weight * count * HOURS_PER_DAY / budget_per_day
    settled = _due_in_day(max_hours, still)  # whatever the price

    def due(multiplier: float) -> float:
        plan = Plan(multiplier, stale_cost, min_hours, max_hours)
        pairs = zip(rates, ages, strict=True)
        return settled + sum(_due_in_day(next_interval(r, plan), a) for r, a in pairs)

    if due(0.0) <= budget_per_day:
        return Plan(0.0, stale_cost, min_hours, max_hours)
    if due(math.inf) >= budget_per_day:
        return Plan(math.inf, stale_cost, min_hours, max_hours)
    low, high = price_range(
        rates, stale_cost_hours=stale_cost, min_hours=min_hours, max_hours=max_hours
    )
    while high > low * (1 + 1e-9):  # due() falls in steps as the price rises
        middle = math.sqrt(low * high)
        if due(middle) > budget_per_day:
            low = middle
        else:
            high = middle
    return Plan(high, stale_cost, min_hours, max_hours)


def retime(rates: Iterable[float], plan: Plan) -> list[float]:
    """Every page's interval under its source's new plan, for one bulk update: each
    page is then due its interval after its last check (at once when that is past),
    as ``plan_day`` counted. Tombstoned pages go in with rate 0 (the longest)."""
    return [next_interval(rate, plan) for rate in rates]


def checks_for_today(
    budget_per_day: float, *, spent: float, days: float, catch_up_days: float = 7.0
) -> float:
    """The budget to give ``plan_day`` so a source's spending keeps to its budget.

    ``spent`` checks were made in the last ``days`` days against ``budget_per_day``
    a day; what they fell short (or went over) is made up over ``catch_up_days``,
    within half and twice the daily budget. Days do not spend exactly what they
    plan: crawls fail and come back, and rates move as checks come in.
    """
    if budget_per_day <= 0 or days < 0 or spent < 0 or catch_up_days <= 0:
        raise ValueError("need a positive budget and catch-up, and no negative counts")
    owed = budget_per_day * days - spent
    today = budget_per_day + owed / catch_up_days
    return min(max(today, budget_per_day / 2), 2 * budget_per_day)


def _by_rate(
    pages: Iterable[tuple[float, float]],
) -> tuple[list[float], list[list[float]], list[float]]:
    """Groups' mean rates and sorted ages, and the sorted ages of still pages."""
    groups: dict[int, tuple[list[float], list[float]]] = {}
    still: list[float] = []
    for rate, age in pages:
        if not 0 <= rate < math.inf:
            raise ValueError("rates must be finite and not negative")
        if rate < STILL_RATE:
            still.append(age)
            continue
        exponent = math.log10(rate)
        key = round(exponent * DAY_GROUPS_PER_DECADE)
        exponents, ages = groups.setdefault(key, ([], []))
        exponents.append(exponent)
        ages.append(age)
    rates = [10.0 ** (sum(logs) / len(logs)) for logs, _ in groups.values()]
    return rates, [sorted(ages) for _, ages in groups.values()], sorted(still)


def _due_in_day(interval: float, ages: list[float]) -> float:
    """Checks in the next day of pages at this interval, of these ages (sorted)."""
    whole, rest = divmod(HOURS_PER_DAY, interval)
    return len(ages) * (whole + 1) - bisect_left(ages, interval - rest)
