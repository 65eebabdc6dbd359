"""Adaptive recrawl intervals: how often each page changes, and how often to check it.

Pure arithmetic on floats, with no Django: rates are changes per hour, intervals are
hours, a crawl budget is checks per day. Pages are modelled as Cho and Garcia-Molina
model them: changes arrive as a Poisson process of rate ``λ``, and a check only tells
whether the page changed at least once since the previous check.

Three steps, so a planner can run the expensive one rarely:

1. ``estimate_rate``: a page's rate from its own history of checks.
2. ``plan_checks``: for one source, the price of a check (a Lagrange multiplier) that
   spends the source's crawl budget where it lowers staleness most.
3. ``next_interval``: one page's interval from its rate and its source's plan.

``allocate`` does 2 and 3 for a whole list of rates. ``expected_freshness`` and
``expected_age`` give the steady state of a page checked at a fixed interval.

Failed crawls are not observations and are not scheduled here: ``Page.mark_failed``
brings them back sooner with its own exponential backoff.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

HOURS_PER_DAY = 24.0
# Before its first check a page changes about once per its source's interval, give
# or take a factor e^PRIOR_SPREAD (20): pages of one site range from hourly to yearly.
PRIOR_SPREAD = 3.0
# A check this much older than the latest one counts half as much.
HALF_LIFE_HOURS = 30 * HOURS_PER_DAY
# The prior fades with the checks, down to this share of its weight.
PRIOR_FLOOR = 0.05
# Rates are sought between once in 100,000 years and 10,000 times an hour.
_LOWEST_LOG_RATE, _HIGHEST_LOG_RATE = math.log(1e-9), math.log(1e4)
# Slower than this (once in 100 million years) a page counts as never changing.
_STILL = 1e-12
# Weight of a stale copy's staleness next to its age, in uniform intervals: see
# ``plan_checks``.
STALE_WEIGHT = 0.5
# Nodes per tenfold of rate on which the multiplier is solved (see ``plan_checks``).
GRID_PER_DECADE = 32
# Below this r = λ·interval the closed forms lose digits; their series take over.
_SERIES_BELOW = 0.05


class Check(NamedTuple):
    """One successful check of a page."""

    hours: float  # since the previous check (or since the page was first fetched)
    changed: bool  # the content differed from what the previous check saw


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


# -- estimating a page's rate of change ----------------------------------------------


def rate_from_counts(checks: int, changes: int, interval_hours: float) -> float:
    """Cho and Garcia-Molina's bias-reduced estimator for checks at one interval.

    ``changes`` of ``checks`` checks ``interval_hours`` apart found a change. Each
    hides any further changes, so the naive ``changes / (checks * interval)``
    undercounts fast pages; ``-log((n - X + 0.5) / (n + 0.5)) / I`` does not, and
    stays finite when every check found a change.
    """
    if checks < 0 or not 0 <= changes <= checks or interval_hours <= 0:
        raise ValueError("need 0 <= changes <= checks and a positive interval")
    return -math.log((checks - changes + 0.5) / (checks + 0.5)) / interval_hours


def estimate_rate(
    history: Sequence[tuple[float, bool]],
    *,
    default_hours: float,
    spread: float = PRIOR_SPREAD,
    half_life_hours: float = HALF_LIFE_HOURS,
) -> float:
    """A page's change rate (per hour) from its checks, oldest first.

    A check ``t`` hours after the previous one sees a change with probability
    ``1 - exp(-λt)``: however many changes happened, it sees one, so the
    likelihood accounts for the changes it missed (unlike counting changes per
    hour). The estimate is the ``λ`` that maximizes, with ``u = log λ``,

        Σ_changed w·log(1 - e^(-λt))  -  λ·Σ_unchanged w·t  -  p·(u - u0)² / 2

    The last term is the prior: before its first check a page is believed to change
    about once per ``default_hours`` (its source's interval, ``u0``), give or take
    a factor ``e^spread``. So a new page starts at its source's default, and two
    lopsided histories stay finite: a page that changed at every check (where the
    likelihood alone says "infinitely fast") and one that never changed ("never").

    Recency: a check ``a`` hours older than the latest weighs ``w = 2^(-a /
    half_life)``, so a page whose behaviour changes is followed. The prior is older
    than every check and fades with them (``p`` down to ``PRIOR_FLOOR / spread²``),
    so a page that keeps not changing keeps slowing down towards its source's
    longest interval. Checks of zero or negative length carry no information.

    The objective is concave in ``u``; its maximum is found by Newton's method.
    For checks all at one interval and a faint prior it is the plain maximum
    likelihood ``-log((n - X) / n) / I``, which ``rate_from_counts`` corrects for
    small samples.
    """
    if default_hours <= 0 or spread <= 0 or half_life_hours <= 0:
        raise ValueError("default_hours, spread and half_life_hours must be positive")
    changed, unchanged, age = _weighted_checks(history, half_life_hours)
    fading = max(2.0 ** (-age / half_life_hours), PRIOR_FLOOR)
    return _most_probable_rate(
        changed, unchanged, center=-math.log(default_hours), pull=fading / spread**2
    )


def _weighted_checks(
    history: Sequence[tuple[float, bool]], half_life_hours: float
) -> tuple[list[tuple[float, float]], float, float]:
    """(weight, hours) of the checks that saw a change, weighted unchanged hours,
    and the hours the history covers."""
    changed: list[tuple[float, float]] = []
    unchanged = 0.0
    age = 0.0
    for hours, was_changed in reversed(history):
        if hours <= 0:
            continue
        weight = 2.0 ** (-age / half_life_hours)
        if weight < 1e-9:
            return changed, unchanged, math.inf  # the rest counts for nothing
        if was_changed:
            changed.append((weight, hours))
        else:
            unchanged += weight * hours
        age += hours
    return changed, unchanged, age


def _most_probable_rate(
    changed: list[tuple[float, float]], unchanged: float, *, center: float, pull: float
) -> float:
    """Newton's method on the slope of the objective in ``u = log λ``.

    With ``φ(x) = x / (e^x - 1)``, the slope is ``Σ w·φ(λt) - λU - p(u - u0)`` and
    falls as ``u`` grows, so a bracket is kept and halved whenever a step would
    leave it; steps are at most a factor ``e²`` in rate.
    """
    u, low, high = center, _LOWEST_LOG_RATE, _HIGHEST_LOG_RATE
    for _ in range(100):
        rate = math.exp(u)
        slope = -rate * unchanged - pull * (u - center)
        curve = -rate * unchanged - pull
        for weight, hours in changed:
            x = rate * hours
            share = x / math.expm1(x) if x < 700 else 0.0
            slope += weight * share
            curve += weight * share * (1.0 - x - share)  # x·φ'(x) = φ(1 - x - φ)
        if slope > 0:
            low = u
        else:
            high = u
        step = max(-2.0, min(2.0, -slope / curve))  # curve < 0: the prior sees to it
        if abs(step) <= 1e-10:
            break
        u += step
        if not low < u < high:
            u = (low + high) / 2
    return math.exp(u)


# -- what a page checked every I hours looks like ------------------------------------


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


# -- spending a crawl budget ---------------------------------------------------------


def plan_checks(
    rates: Iterable[float],
    *,
    budget_per_day: float,
    min_hours: float,
    max_hours: float,
    stale_weight: float = STALE_WEIGHT,
) -> Plan:
    """The plan that spends ``budget_per_day`` checks on pages of these rates best.

    The objective is the mean over pages of the time-average of ``κ + age`` while a
    copy is stale (0 while it is current): ``A(λ, f) + κ·(1 - F(λ, f))`` for a page
    checked ``f`` times an hour, with ``F = (f/λ)(1 - e^(-r))`` and ``A`` as in
    ``expected_age``, ``r = λ/f``. ``κ`` is ``stale_weight`` uniform intervals
    (pages / budget): a copy that just went stale already costs something.

    Each term is convex in ``f``, so with the budget ``Σf = B`` and the bounds the
    optimum is where every page's marginal gain equals one price ``μ`` (Lagrange),
    or a bound where it cannot:

        -∂A/∂f - κ·∂(1-F)/∂f  =  (g(r) + κλ·h(r)) / λ²  =  μ

    with ``g(r) = r²/2 - 1 + (1+r)e^-r`` and ``h(r) = 1 - (1+r)e^-r``; the left side
    falls as ``f`` grows. For slow pages it reads ``λ/(3f³) + κλ/(2f²)``, so their
    frequency grows with ``λ^(1/3)`` to ``λ^(1/2)``: moderately changing pages get
    more checks. For pages much faster than the budget it reads
    ``1/(2f²) + κ/λ``, so ``f = 1/√(2(μ - κ/λ))`` falls back towards ``1/√(2μ)``
    as λ grows: pages that change faster than they can be kept fresh get fewer
    checks, yet never none, which is what maximizing freshness alone would give
    them. Without ``κ`` (``stale_weight=0``) it is the age-optimal schedule, where
    the fastest pages share the largest frequency.

    ``μ`` is the root of ``Σf(μ) = B``. To find it fast for 100,000 pages, the sum
    is taken over a grid of rates, ``GRID_PER_DECADE`` nodes to a tenfold, each page
    counting towards its two neighbouring nodes (linear interpolation in log λ);
    the intervals then spend the budget to within about 1e-5. Pages that never
    change (rate 0) are checked at ``max_hours`` and count against the budget.
    """
    if not 0 < min_hours <= max_hours:
        raise ValueError("need 0 < min_hours <= max_hours")
    if budget_per_day <= 0 or stale_weight < 0:
        raise ValueError("budget_per_day must be positive")
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
        return idle * fmin + sum(w * _frequency(lam, candidate) for lam, w in pairs)

    # At ``low`` every changing page is at min_hours, at ``high`` every page at
    # max_hours: the budget lies between.
    low = min(_gain_per_check(lam, fmax, stale_cost) for lam in nodes)
    high = max(_gain_per_check(lam, fmin, stale_cost) for lam in nodes)
    return plan(_solve_multiplier(lambda m: spent(m) / budget, low, high))


def next_interval(rate: float, plan: Plan, *, gone: bool = False) -> float:
    """Hours until a page of this rate is checked again under its source's plan:
    where one more check gains what it costs, within the plan's bounds. Cheap
    enough to run at every check of every page.

    Tombstoned pages (and pages that never change) wait the longest interval.
    """
    if gone:
        return plan.max_hours
    return 1.0 / _frequency(rate, plan)


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
    changing = [rate for rate in rates if rate >= _STILL]
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


def _gain_per_check(rate: float, frequency: float, stale_cost: float) -> float:
    """The fall in cost from one more check per hour, ``(g(r) + κλ·h(r)) / λ²``."""
    r = rate / frequency
    return (_g(r) + stale_cost * rate * _h(r)) / (rate * rate)


def _frequency(rate: float, plan: Plan) -> float:
    """Checks per hour where the gain of one more check equals the plan's price."""
    fmin, fmax = 1.0 / plan.max_hours, 1.0 / plan.min_hours
    if rate < _STILL or plan.multiplier == math.inf:
        return fmin
    if plan.multiplier <= 0:
        return fmax
    s = plan.stale_cost_hours * rate
    target = plan.multiplier * rate * rate
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
