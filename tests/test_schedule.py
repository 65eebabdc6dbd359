from __future__ import annotations

import heapq
import math
import random
import statistics
import time

import pytest

from sources.schedule import (
    Check,
    Plan,
    allocate,
    estimate_rate,
    expected_age,
    expected_freshness,
    next_interval,
    plan_checks,
)

HOUR, DAY, WEEK = 1.0, 24.0, 168.0
MONTH = 30 * DAY


def spread_of_rates(pages: int, rng: random.Random) -> list[float]:
    """30% never change, the rest log-uniform from hourly to yearly."""
    return [
        0.0 if rng.random() < 0.3 else math.exp(rng.uniform(math.log(1 / 8760), 0))
        for _ in range(pages)
    ]


def run_source(
    rates: list[float], *, budget_per_day: float, days: float, seed: int = 1
) -> tuple[list[float], list[float]]:
    """A source run as the product runs it, from no history at all: each check
    updates its page's rate and interval, the plan is made again every day.
    Returns the pages' last intervals and rates."""
    rng = random.Random(seed)
    bounds = {"min_hours": HOUR, "max_hours": MONTH}
    histories: list[list[Check]] = [[] for _ in rates]
    estimates = [1 / WEEK] * len(rates)
    intervals = [WEEK] * len(rates)
    due = [(rng.random() * WEEK, page, 0.0) for page in range(len(rates))]
    heapq.heapify(due)
    planned_at = -math.inf
    while due[0][0] < days * DAY:
        at, page, previous = heapq.heappop(due)
        if at - planned_at >= DAY:
            plan = plan_checks(estimates, budget_per_day=budget_per_day, **bounds)
            planned_at = at
        hours = at - previous
        changed = rng.random() < 1 - math.exp(-rates[page] * hours)
        histories[page].append(Check(hours, changed))
        estimates[page] = estimate_rate(histories[page], default_hours=WEEK)
        intervals[page] = next_interval(estimates[page], plan)
        heapq.heappush(due, (at + intervals[page], page, at))
    return intervals, estimates


# -- spending a crawl budget -----------------------------------------------------------


def test_intervals_stay_within_their_bounds():
    rng = random.Random(5)
    rates = spread_of_rates(2000, rng) + [1e-12, 1e3]
    for budget in (10, 500, 2000, 100_000):
        intervals = allocate(
            rates, budget_per_day=budget, min_hours=2 * HOUR, max_hours=MONTH
        )

        assert all(2 * HOUR <= interval <= MONTH for interval in intervals)


def test_the_budget_is_spent():
    rng = random.Random(5)
    rates = spread_of_rates(10_000, rng)

    intervals = allocate(rates, budget_per_day=1429, min_hours=HOUR, max_hours=MONTH)

    assert sum(DAY / interval for interval in intervals) == pytest.approx(
        1429, rel=1e-3
    )


def test_pages_of_one_rate_share_the_budget_evenly():
    intervals = allocate(
        [1 / 50] * 100, budget_per_day=50, min_hours=1, max_hours=MONTH
    )

    assert intervals == pytest.approx([2 * DAY] * 100)


def test_a_page_changing_far_faster_than_the_budget_allows_gets_fewer_checks():
    rng = random.Random(5)
    rates = spread_of_rates(10_000, rng)
    plan = plan_checks(rates, budget_per_day=1429, min_hours=HOUR, max_hours=MONTH)

    hourly, moderate, weekly = (next_interval(r, plan) for r in (1, 1 / 20, 1 / WEEK))

    assert hourly > moderate < weekly
    assert hourly < 2 * moderate  # fewer checks, but still checked


def test_slower_pages_get_fewer_checks_and_pages_that_never_change_the_fewest():
    plan = plan_checks(
        spread_of_rates(1000, random.Random(5)),
        budget_per_day=143,
        min_hours=HOUR,
        max_hours=MONTH,
    )

    intervals = [next_interval(r, plan) for r in (1 / 20, 1 / WEEK, 1 / 2000, 0.0)]

    assert intervals == sorted(intervals)
    assert intervals[-1] == MONTH


def test_the_allocation_beats_uniform_on_freshness_and_age():
    rates = spread_of_rates(10_000, random.Random(5))
    uniform = len(rates) * DAY / 1429
    adaptive = allocate(rates, budget_per_day=1429, min_hours=HOUR, max_hours=MONTH)

    def mean(measure, intervals):
        return statistics.mean(map(measure, rates, intervals))

    assert mean(expected_freshness, adaptive) > mean(
        expected_freshness, [uniform] * 10_000
    )
    assert mean(expected_age, adaptive) < 0.6 * mean(expected_age, [uniform] * 10_000)


def test_no_small_shift_of_checks_between_two_pages_lowers_the_cost():
    rates = [1 / 3, 1 / 40, 1 / 300, 1 / 5000]
    plan = plan_checks(rates, budget_per_day=4, min_hours=HOUR, max_hours=10 * MONTH)
    stale_cost = plan.stale_cost_hours

    def cost(frequencies: list[float]) -> float:
        return sum(
            expected_age(r, 1 / f) + stale_cost * (1 - expected_freshness(r, 1 / f))
            for r, f in zip(rates, frequencies, strict=True)
        )

    best = [1 / next_interval(rate, plan) for rate in rates]
    for giver in range(4):
        for taker in range(4):
            if giver != taker:
                moved = list(best)
                moved[giver] -= 1e-4 * best[giver]
                moved[taker] += 1e-4 * best[giver]
                assert cost(moved) >= cost(best) - 1e-9


def test_a_budget_too_small_for_the_longest_interval_checks_every_page_at_it():
    plan = plan_checks([1.0, 0.1, 0.0], budget_per_day=1, min_hours=1, max_hours=DAY)

    assert plan.multiplier == math.inf
    assert next_interval(1.0, plan) == DAY


def test_a_budget_for_everything_checks_every_changing_page_at_the_shortest():
    plan = plan_checks([1.0, 1e-6, 0.0], budget_per_day=100, min_hours=1, max_hours=DAY)

    assert [next_interval(r, plan) for r in (1.0, 1e-6, 0.0)] == [1, 1, DAY]


def test_tombstoned_pages_wait_the_longest_interval():
    plan = Plan(multiplier=100.0, stale_cost_hours=10.0, min_hours=1, max_hours=MONTH)

    assert next_interval(1.0, plan, gone=True) == MONTH


def test_it_plans_100000_pages_in_well_under_two_seconds():
    rates = spread_of_rates(100_000, random.Random(5))
    started = time.process_time()  # this process's CPU, whatever else runs

    allocate(rates, budget_per_day=14_290, min_hours=HOUR, max_hours=MONTH)

    assert time.process_time() - started < 2.0


# -- learning and planning together ------------------------------------------------


def test_a_changelog_page_converges_to_the_shortest_interval():
    rates = [1.0] + [1 / 48] * 20  # changes hourly, among pages changing every 2 days

    intervals, estimates = run_source(rates, budget_per_day=150, days=14)

    assert intervals[0] == HOUR
    assert estimates[0] > 1 / 2


def test_an_archive_page_drifts_to_the_maximum_interval():
    rng = random.Random(5)
    rates = [0.0] * 5 + [
        math.exp(rng.uniform(math.log(1 / 8760), 0)) for _ in range(45)
    ]

    after_a_month, _ = run_source(rates, budget_per_day=50 / 7, days=30)
    after_half_a_year, _ = run_source(rates, budget_per_day=50 / 7, days=180)

    assert all(2 * WEEK < interval < MONTH for interval in after_a_month[:5])
    assert after_half_a_year[:5] == [MONTH] * 5


def test_expected_freshness_and_age_match_a_simulated_page():
    rng = random.Random(9)
    rate, interval = 1 / 30, 40.0
    fresh = age = 0.0
    for _ in range(20_000):
        first_change = rng.expovariate(rate)
        fresh += min(first_change, interval)
        age += max(interval - first_change, 0) ** 2 / 2
    hours = 20_000 * interval

    assert fresh / hours == pytest.approx(expected_freshness(rate, interval), rel=0.02)
    assert age / hours == pytest.approx(expected_age(rate, interval), rel=0.03)
    assert expected_freshness(0.0, interval) == 1.0
    assert expected_age(1e-9, interval) == pytest.approx(1e-9 * interval**2 / 6)
