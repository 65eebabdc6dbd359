"""One page's staleness, and how often checking it pays at a given price.

A page changing as a Poisson process of rate ``λ`` (per hour) and checked every
``I`` hours is current a share ``F`` of the time and, while stale, has missed its
first change ``A`` hours ago on average (``expected_freshness``, ``expected_age``).
Its cost is ``A + κ(1 - F)``: ``κ`` hours for a copy that just went stale.
``sources.schedule`` prices a check for a whole source (``Plan``);
``next_interval`` is one page's interval at that price.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# Slower than this (once in 100 million years) a page counts as never changing.
STILL_RATE = 1e-12
# Weight of a stale copy's staleness next to its age, in uniform intervals (pages
# over checks per hour): ``κ`` in ``gain_per_check``.
STALE_WEIGHT = 0.5
# Below this r = λ·interval the closed forms lose digits; their series take over.
_SERIES_BELOW = 0.05


@dataclass(frozen=True)
class Plan:
    """What a source's pages need to compute their own intervals.

    ``multiplier`` is the price of one more check per hour, in hours² of staleness:
    0 when the budget covers every changing page at ``min_hours``, infinite when it
    cannot even cover every page at ``max_hours``.
    """

    multiplier: float
    stale_cost_hours: float
    min_hours: float
    max_hours: float


def check_plan_bounds(
    budget_per_day: float, min_hours: float, max_hours: float, stale_weight: float
) -> None:
    """Refuse a plan of no budget, of bounds out of order or a negative weight."""
    if not 0 < min_hours <= max_hours:
        raise ValueError("need 0 < min_hours <= max_hours")
    if budget_per_day <= 0 or stale_weight < 0:
        raise ValueError("budget_per_day must be positive")


def price_range(
    rates: Sequence[float],
    *,
    stale_cost_hours: float,
    min_hours: float,
    max_hours: float,
) -> tuple[float, float]:
    """Prices of a check at which pages of these (changing) rates are all at
    ``min_hours``, and all at ``max_hours``: any plan's price lies between."""
    fmin, fmax = 1.0 / max_hours, 1.0 / min_hours
    low = min(gain_per_check(rate, fmax, stale_cost_hours) for rate in rates)
    high = max(gain_per_check(rate, fmin, stale_cost_hours) for rate in rates)
    return low, high


def next_interval(rate: float, plan: Plan, *, gone: bool = False) -> float:
    """Hours until a page of this rate is checked again under its source's plan:
    where one more check gains what it costs, within the plan's bounds. Cheap
    enough to run at every check of every page.

    Tombstoned pages (and pages that never change) wait the longest interval.
    """
    if gone:
        return plan.max_hours
    return 1.0 / check_frequency(
        rate,
        multiplier=plan.multiplier,
        stale_cost_hours=plan.stale_cost_hours,
        min_hours=plan.min_hours,
        max_hours=plan.max_hours,
    )


def expected_freshness(rate: float, interval_hours: float) -> float:
    """Share of time the copy equals the page: ``(1 - e^(-λI)) / (λI)``."""
    x = rate * interval_hours
    if x <= 0:
        return 1.0
    return -math.expm1(-x) / x


def expected_age(rate: float, interval_hours: float) -> float:
    """Mean age in hours (time since the first change the copy misses, 0 while it
    is current): ``I/2 - 1/λ + (1 - e^(-λI)) / (λ²I)``."""
    x = rate * interval_hours
    if x <= 0:
        return 0.0
    if x < _SERIES_BELOW:
        excess = x**3 / 6 - x**4 / 24 + x**5 / 120 - x**6 / 720
    else:
        excess = x * x / 2 - x - math.expm1(-x)
    return interval_hours * excess / (x * x)


def _g(r: float) -> float:
    """``r²/2 - 1 + (1 + r)e^-r``: rises from 0 like ``r³/3``, then like ``r²/2``."""
    if r < _SERIES_BELOW:
        return r**3 / 3 - r**4 / 8 + r**5 / 30 - r**6 / 144
    return r * r / 2 - _h(r)


def _h(r: float) -> float:
    """``1 - (1 + r)e^-r``: rises from 0 like ``r²/2`` to 1."""
    if r < _SERIES_BELOW:
        return r * r / 2 - _g(r)
    return -math.expm1(-r) - r * math.exp(-r)


def gain_per_check(rate: float, frequency: float, stale_cost_hours: float) -> float:
    """The fall in cost from one more check per hour, for a page checked
    ``frequency`` (``f``) times an hour, with ``κ = stale_cost_hours``:

        -∂A/∂f - κ·∂(1-F)/∂f  =  (g(r) + κλ·h(r)) / λ²,   r = λ/f

    with ``F = (f/λ)(1 - e^(-r))``, ``g(r) = r²/2 - 1 + (1+r)e^-r`` and ``h(r) = 1 -
    (1+r)e^-r``. The cost is convex in ``f``: the gain falls as ``f`` grows. For
    slow pages it reads ``λ/(3f³) + κλ/(2f²)``, so at one price their frequency
    grows with ``λ^(1/3)`` to ``λ^(1/2)``: moderately changing pages get more
    checks. For pages much faster than their checks it reads ``1/(2f²) + κ/λ``, so
    ``f = 1/√(2(μ - κ/λ))`` falls back towards ``1/√(2μ)`` as λ grows: pages that
    change faster than they can be kept fresh get fewer checks, yet never none,
    which is what maximizing freshness alone would give them. Without ``κ`` it is
    the age-optimal schedule, where the fastest pages share the largest frequency.
    """
    r = rate / frequency
    return (_g(r) + stale_cost_hours * rate * _h(r)) / (rate * rate)


def check_frequency(
    rate: float,
    *,
    multiplier: float,
    stale_cost_hours: float,
    min_hours: float,
    max_hours: float,
) -> float:
    """Checks per hour where the gain of one more check equals ``multiplier`` (the
    price of a check), within one check per ``max_hours`` and per ``min_hours``.

    Pages that never change, and any page when the price is infinite, get the
    fewest checks; with a price of 0, every changing page gets the most.
    """
    fmin, fmax = 1.0 / max_hours, 1.0 / min_hours
    if rate < STILL_RATE or multiplier == math.inf:
        return fmin
    if multiplier <= 0:
        return fmax
    s = stale_cost_hours * rate
    target = multiplier * rate * rate
    # In r = λ/f the condition is G(r) = g(r) + s·h(r) = target, G rising.
    low, high = rate / fmax, rate / fmin
    if _g(low) + s * _h(low) >= target:
        return fmax
    if _g(high) + s * _h(high) <= target:
        return fmin
    return rate / _solve_gain(target, s, low, high)


def _solve_gain(target: float, s: float, low: float, high: float) -> float:
    """The r in (low, high) where G(r) = g(r) + s·h(r) = target.

    Newton's method on ``log G`` against ``log r``, which is nearly a straight line
    of slope 2 to 3, so it takes a few steps; a step that would leave the bracket
    bisects it instead. The start is exact for large r, where G = r²/2 - 1 + s.
    """
    r = math.sqrt(2 * max(target - s + 1, 0.0))
    if r < 3:  # small r: G ≈ r³/3 + s·r²/2
        r = (3 * target) ** (1 / 3)
        if s > 0:
            r = min(r, math.sqrt(2 * target / s))
    r = min(max(r, low), high)
    goal = math.log(target)
    for _ in range(200):
        gain = _g(r) + s * _h(r)
        if gain > target:
            high = r
        else:
            low = r
        slope = r * r * (-math.expm1(-r) + s * math.exp(-r))  # r·G'(r)
        step = (math.log(gain) - goal) * gain / slope
        if abs(step) <= 1e-10:
            break
        r *= math.exp(-step)
        if not low < r < high:
            r = math.sqrt(low * high)
    return r * math.exp(-step)
