"""Adaptive recrawl intervals: spending a source's crawl budget on its pages.

Pure arithmetic on floats, with no Django: rates are changes per hour, intervals are
hours, a crawl budget is checks per day. This module is the public face of four:
``sources.change_rate`` estimates a page's rate from its checks,
``sources.staleness`` prices one page's staleness (``Plan``, ``next_interval``),
this one spends a budget in the steady state (``plan_checks``) and
``sources.day_plan`` plans a source's next day. A planner does:

1. At every check of a page: ``estimate_rate`` from its history of checks, then
   ``next_interval`` under its source's current plan; the next check is due that
   many hours later.
2. Once a day per source: ``checks_for_today`` (the budget, corrected by what the
   last days spent), ``plan_day`` over every page's rate and hours since its last
   check, then ``retime`` every page: its new interval, due that long after its last
   check (at once when that is past). ``plan_day`` counts on every page re-timed.

``allocate`` applies ``plan_checks`` to a list of rates. Failed crawls are not
observations and are not scheduled here: ``Page.mark_failed`` brings them back
sooner with its own exponential backoff.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

from sources.change_rate import (
    HALF_LIFE_HOURS,
    HOURS_PER_DAY,
    PRIOR_FLOOR,
    PRIOR_SPREAD,
    Check,
    estimate_rate,
    rate_from_counts,
)
from sources.day_plan import checks_for_today, plan_day, retime
from sources.staleness import (
    STALE_WEIGHT,
    STILL_RATE,
    Plan,
    check_plan_bounds,
    expected_age,
    expected_freshness,
    next_interval,
    price_range,
)

__all__ = [
    "GRID_PER_DECADE",
    "HALF_LIFE_HOURS",
    "HOURS_PER_DAY",
    "PRIOR_FLOOR",
    "PRIOR_SPREAD",
    "STALE_WEIGHT",
    "Check",
    "Plan",
    "allocate",
    "checks_for_today",
    "estimate_rate",
    "expected_age",
    "expected_freshness",
    "next_interval",
    "plan_checks",
    "plan_day",
    "rate_from_counts",
    "retime",
]

# Nodes per tenfold of rate on which the multiplier is solved.
GRID_PER_DECADE = 32


def plan_checks(
    rates: Iterable[float],
    *,
    budget_per_day: float,
    min_hours: float,
    max_hours: float,
    stale_weight: float = STALE_WEIGHT,
) -> Plan:
    """The plan that spends ``budget_per_day`` checks on pages of these rates best,
    in the steady state where each page sits at a random point of its interval.

    The objective is the mean over pages of ``A + κ(1 - F)`` (see
    ``sources.staleness``), with ``κ`` ``stale_weight`` uniform intervals (pages /
    budget): a copy that just went stale already costs something. Each term is
    convex in the page's checks per hour ``f``, so with the budget ``Σf = B`` and
    the bounds the optimum is where every page's ``gain_per_check`` equals one
    price ``μ`` (Lagrange), or a bound where it cannot.

    ``μ`` is the root of ``Σf(μ) = B``. To find it fast for 100,000 pages, the sum
    is taken over a grid of rates, ``GRID_PER_DECADE`` nodes to a tenfold, each page
    counting towards its two neighbouring nodes (linear interpolation in log λ);
    the intervals then spend the budget to within about 1e-5. Pages that never
    change (rate 0) are checked at ``max_hours`` and count against the budget.
    """
    check_plan_bounds(budget_per_day, min_hours, max_hours, stale_weight)
    rates = list(rates)
    budget = budget_per_day / HOURS_PER_DAY
    stale_cost = stale_weight * len(rates) / budget

    def plan(multiplier: float) -> Plan:
        return Plan(multiplier, stale_cost, min_hours, max_hours)

    fmin, fmax = 1.0 / max_hours, 1.0 / min_hours
    nodes, weights, idle = _rate_grid(rates)
    if (len(rates) - idle) * fmax + idle * fmin <= budget:
        return plan(0.0)  # every changing page at min_hours, budget to spare
    if len(rates) * fmin >= budget:
        return plan(math.inf)  # every page at max_hours, over budget

    def spent(multiplier: float) -> float:
        candidate = plan(multiplier)
        pairs = zip(nodes, weights, strict=True)
        return idle * fmin + sum(w / next_interval(lam, candidate) for lam, w in pairs)

    low, high = price_range(
        nodes, stale_cost_hours=stale_cost, min_hours=min_hours, max_hours=max_hours
    )
    return plan(_solve_multiplier(lambda m: spent(m) / budget, low, high))


def allocate(
    rates: Sequence[float],
    *,
    budget_per_day: float,
    min_hours: float,
    max_hours: float,
    stale_weight: float = STALE_WEIGHT,
) -> list[float]:
    """Intervals in hours for pages of these rates: ``plan_checks``, then each page."""
    plan = plan_checks(
        rates,
        budget_per_day=budget_per_day,
        min_hours=min_hours,
        max_hours=max_hours,
        stale_weight=stale_weight,
    )
    return [next_interval(rate, plan) for rate in rates]


def _solve_multiplier(
    share: Callable[[float], float], low: float, high: float
) -> float:
    """The μ between ``low`` and ``high`` where ``share(μ)`` (budget spent over
    budget, falling in μ) is 1: regula falsi, Illinois variant, on log share against
    log μ, which is close to a straight line of slope -1/3 to -1/2."""
    a, b = math.log(low), math.log(high)
    fa, fb = math.log(share(low)), math.log(share(high))
    last = 0
    c = (a + b) / 2
    for _ in range(100):
        c = (a * fb - b * fa) / (fb - fa)
        fc = math.log(share(math.exp(c)))
        if abs(fc) < 1e-10 or b - a < 1e-12:
            break
        if fc > 0:
            a, fa = c, fc
            if last > 0:
                fb /= 2  # the same end kept twice: halve the other to move it
            last = 1
        else:
            b, fb = c, fc
            if last < 0:
                fa /= 2
            last = -1
    return math.exp(c)


def _rate_grid(rates: list[float]) -> tuple[list[float], list[float], int]:
    """Grid nodes in rate, how many pages count towards each, pages of rate 0.

    Fewer pages than grid nodes are their own nodes, exactly.
    """
    changing = [rate for rate in rates if rate >= STILL_RATE]
    idle = len(rates) - len(changing)
    if not changing:
        return [], [], idle
    if not math.isfinite(max(changing)):
        raise ValueError("rates must be finite")
    logs = [math.log10(rate) for rate in changing]
    low = min(logs)
    steps = max(1, math.ceil((max(logs) - low) * GRID_PER_DECADE))
    if len(logs) <= steps:
        return changing, [1.0] * len(logs), idle
    width = (max(logs) - low) / steps or 1.0
    weights = [0.0] * (steps + 1)
    for value in logs:
        position = (value - low) / width
        node = min(int(position), steps - 1)
        upper = position - node
        weights[node] += 1.0 - upper
        weights[node + 1] += upper
    nodes = [10.0 ** (low + i * width) for i in range(steps + 1)]
    return nodes, weights, idle
