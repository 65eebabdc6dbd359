"""How often a page changes, from its own history of checks.

Pure arithmetic on floats, with no Django: rates are changes per hour, intervals are
hours. Pages are modelled as Cho and Garcia-Molina model them: changes arrive as a
Poisson process of rate ``λ``, and a check only tells whether the page changed at
least once since the previous check, unless the site says when the content found
was last modified (its ``Last-Modified``): then the check knows when the last
change came. ``sources.schedule`` turns the rates into intervals under a crawl
budget.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

HOURS_PER_DAY = 24.0
# The checks of a page its change rate is estimated from (``Page.check_hours``).
CHECKS_KEPT = 50
# Before its first check a page changes about once per its source's interval, give
# or take a factor e^PRIOR_SPREAD (90): two standard deviations span a weekly
# source's pages from hourly (168 times faster, e^5.1) to yearly (52 times slower,
# e^4). The narrower e^3 moved pages more slowly on their first checks: in the
# simulated month of ``bench.schedule`` it cut 0.6 points less staleness (4 seeds).
PRIOR_SPREAD = 4.5
# A check this much older than the latest one counts half as much.
HALF_LIFE_HOURS = 30 * HOURS_PER_DAY
# The prior fades with the checks, down to this share of its weight.
PRIOR_FLOOR = 0.05
# Rates are sought between once in 100,000 years and 10,000 times an hour.
_LOWEST_LOG_RATE, _HIGHEST_LOG_RATE = math.log(1e-9), math.log(1e4)


class Check(NamedTuple):
    """One successful check of a page."""

    hours: float  # since the previous check (or since the page was first fetched)
    changed: bool  # the content differed from what the previous check saw
    # For a change: hours the new content had stood when the check found it, by
    # the site's Last-Modified (within ``hours``); 0 when the site did not say.
    quiet: float = 0.0


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
    history: Sequence[Check] | Sequence[tuple[float, bool]],
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

    A change whose time the site gave (``Check.quiet``, the hours the new content
    had stood) says more: the last change came exactly then and none since, with
    likelihood ``λ·e^(-λq)``; so it counts ``log λ - λq`` in place of its term
    in the first sum (the hours before that change tell nothing more: changes
    arrive independently). A page found changed at every daily check is then
    told apart from one changing every hour by how old each new version was.

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
    history: Sequence[Check] | Sequence[tuple[float, bool]], half_life_hours: float
) -> tuple[list[tuple[float, float]], float, float]:
    """(weight, hours) of the checks that saw a change, weighted unchanged hours,
    and the hours the history covers. A change whose time is known is (weight,
    0): the change is certain where it came, and its quiet hours are unchanged
    ones."""
    changed: list[tuple[float, float]] = []
    unchanged = 0.0
    age = 0.0
    for check in reversed(history):
        hours, was_changed, *known = check
        if hours <= 0:
            continue
        weight = 2.0 ** (-age / half_life_hours)
        if weight < 1e-9:
            return changed, unchanged, math.inf  # the rest counts for nothing
        quiet = float(known[0]) if known else 0.0
        if was_changed and 0 < quiet < hours:
            changed.append((weight, 0.0))
            unchanged += weight * quiet
        elif was_changed:
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
            share = _phi(x)
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


def _phi(x: float) -> float:
    """``x / (e^x - 1)``, with its limit 1 at 0 (a change at a known time)."""
    if x <= 0:
        return 1.0
    return x / math.expm1(x) if x < 700 else 0.0
