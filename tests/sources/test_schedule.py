from __future__ import annotations

import heapq
import math
import random
import statistics
import time
from dataclasses import dataclass

import pytest

from sources.schedule import (
    Check,
    Plan,
    allocate,
    checks_for_today,
    estimate_rate,
    expected_age,
    expected_freshness,
    next_interval,
    plan_checks,
    plan_day,
    retime,
)

HOUR, DAY, WEEK = 1.0, 24.0, 168.0
MONTH = 30 * DAY
BOUNDS = {"min_hours": HOUR, "max_hours": MONTH}


def spread_of_rates(pages: int, rng: random.Random) -> list[float]:
    """30% never change, the rest log-uniform from hourly to yearly."""
    return [
        0.0 if rng.random() < 0.3 else math.exp(rng.uniform(math.log(1 / 8760), 0))
        for _ in range(pages)
    ]


def checks_in_a_day(pages: list[tuple[float, float]], intervals: list[float]) -> int:
    """Checks in the next 24 hours of pages of these ages, each due its interval
    after its last check (at once when that is past), then every interval."""
    count = 0
    for (_, age), interval in zip(pages, intervals, strict=True):
        wait = max(interval - age, 0.0)
        while wait < DAY:
            count += 1
            wait += interval
    return count


@dataclass
class Outcome:
    intervals: list[float]
    estimates: list[float]
    crawls: int
    freshness: float
    staleness_age: float


def simulate(
    rates: list[float], *, budget_per_day: float, days: int, learn: bool, seed: int = 1
) -> Outcome:
    """A source of Poisson pages crawled for ``days`` from the steady state of
    weekly crawling (each page at a random point of its week, nothing learned).

    Learning, it runs as the product does: each check updates its page's rate and
    interval; every day the plan is made for the next 24 hours and every page is
    re-timed to it. Otherwise every page is checked weekly. Freshness and the mean
    staleness age (hours since the first missed change, 0 while current) are
    measured over the run."""
    rng = random.Random(seed)

    def wait(rate: float) -> float:
        return rng.expovariate(rate) if rate > 0 else math.inf

    synced = [-rng.random() * WEEK for _ in rates]
    missed = [at + wait(rate) for at, rate in zip(synced, rates, strict=True)]
    histories: list[list[Check]] = [[] for _ in rates]
    estimates, intervals = [1 / WEEK] * len(rates), [WEEK] * len(rates)
    plan = plan_checks(estimates, budget_per_day=budget_per_day, **BOUNDS)
    spent: list[int] = []
    fresh = age = 0.0

    def look(page: int, until: float) -> None:
        nonlocal fresh, age
        first = missed[page]  # the copy's first missed change
        fresh += max(min(first, until) - max(synced[page], 0.0), 0.0)
        if first < until:
            age += ((until - first) ** 2 - (max(first, 0.0) - first) ** 2) / 2

    for day in range(days):
        now = day * DAY
        if learn:
            week = spent[-7:]
            today = checks_for_today(budget_per_day, spent=sum(week), days=len(week))
            ages = [now - at for at in synced]
            pages = zip(estimates, ages, strict=True)
            plan = plan_day(pages, budget_per_day=today, **BOUNDS)
            intervals = retime(estimates, plan)
        due = [
            (max(at + every, now), page)
            for page, (at, every) in enumerate(zip(synced, intervals, strict=True))
        ]
        heapq.heapify(due)
        spent.append(0)
        while due[0][0] < now + DAY:
            at, page = heapq.heappop(due)
            look(page, at)
            changed = missed[page] <= at
            if learn:
                histories[page].append(Check(at - synced[page], changed))
                estimates[page] = estimate_rate(histories[page], default_hours=WEEK)
                intervals[page] = next_interval(estimates[page], plan)
            synced[page], missed[page] = at, at + wait(rates[page])
            spent[-1] += 1
            heapq.heappush(due, (at + intervals[page], page))
    for page in range(len(rates)):
        look(page, days * DAY)
    page_hours = len(rates) * days * DAY
    return Outcome(
        intervals, estimates, sum(spent), fresh / page_hours, age / page_hours
    )


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


# -- planning a day ------------------------------------------------------------------


def test_a_days_plan_spends_the_days_budget_whatever_the_pages_ages():
    rng = random.Random(5)
    rates = spread_of_rates(3000, rng)
    for ages in ([rng.uniform(0, WEEK) for _ in rates], [0.0] * 1500 + [WEEK] * 1500):
        pages = list(zip(rates, ages, strict=True))

        plan = plan_day(pages, budget_per_day=500, **BOUNDS)

        assert checks_in_a_day(pages, retime(rates, plan)) == pytest.approx(
            500, rel=0.02
        )


def test_pages_far_from_their_next_check_leave_the_day_to_the_others():
    rng = random.Random(5)
    rates = spread_of_rates(3000, rng)
    steady = plan_checks(rates, budget_per_day=500, **BOUNDS)
    intervals = retime(rates, steady)
    half_just_checked = [
        (rate, 0.0 if page % 2 else rng.random() * intervals[page])
        for page, rate in enumerate(rates)
    ]

    plan = plan_day(half_just_checked, budget_per_day=500, **BOUNDS)

    assert checks_in_a_day(half_just_checked, intervals) < 0.7 * 500
    assert plan.multiplier < steady.multiplier  # cheaper checks: shorter intervals
    assert checks_in_a_day(half_just_checked, retime(rates, plan)) == pytest.approx(
        500, rel=0.02
    )


def test_overdue_pages_do_not_all_fall_due_on_one_day():
    rng = random.Random(5)
    rates = spread_of_rates(3000, rng)
    steady = plan_checks(rates, budget_per_day=500, **BOUNDS)
    overdue = [(rate, rng.uniform(0, 2 * WEEK)) for rate in rates]

    plan = plan_day(overdue, budget_per_day=500, **BOUNDS)

    assert checks_in_a_day(overdue, retime(rates, steady)) > 2 * 500
    assert checks_in_a_day(overdue, retime(rates, plan)) <= 500 * 1.02


def test_a_day_with_budget_for_everything_or_nothing_sits_at_the_bounds():
    pages = [(1.0, 0.0), (0.01, 5.0), (0.0, math.inf)]

    assert plan_day(pages, budget_per_day=1000, **BOUNDS).multiplier == 0
    assert plan_day(pages, budget_per_day=0.5, **BOUNDS).multiplier == math.inf
    assert plan_day([], budget_per_day=10, **BOUNDS).multiplier == 0


def test_spending_short_of_the_budget_is_made_up_over_the_next_days():
    assert checks_for_today(100, spent=0, days=0) == 100
    assert checks_for_today(100, spent=630, days=7) == pytest.approx(110)
    assert checks_for_today(100, spent=770, days=7) == pytest.approx(90)
    assert checks_for_today(100, spent=0, days=30) == 200  # at most twice
    assert checks_for_today(100, spent=10_000, days=7) == 50  # at least half


def test_it_plans_a_day_of_100000_pages_and_retimes_them_in_well_under_two_seconds():
    rng = random.Random(5)
    rates = spread_of_rates(100_000, rng)
    pages = [(rate, rng.uniform(0, 2 * WEEK)) for rate in rates]
    started = time.process_time()  # this process's CPU, whatever else runs

    retime(rates, plan_day(pages, budget_per_day=14_290, **BOUNDS))

    assert time.process_time() - started < 2.0


# -- learning and planning together ------------------------------------------------


def test_a_changelog_page_converges_to_the_shortest_interval():
    rates = [1.0] + [1 / 48] * 20  # changes hourly, among pages changing every 2 days

    source = simulate(rates, budget_per_day=150, days=14, learn=True)

    assert source.intervals[0] == HOUR
    assert source.estimates[0] > 1 / 2


@pytest.mark.slow  # months of checks simulated
def test_an_archive_page_drifts_to_the_maximum_interval():
    rng = random.Random(5)
    rates = [0.0] * 5 + [
        math.exp(rng.uniform(math.log(1 / 8760), 0)) for _ in range(45)
    ]

    after_a_month = simulate(rates, budget_per_day=50 / 7, days=30, learn=True)
    after_half_a_year = simulate(rates, budget_per_day=50 / 7, days=180, learn=True)

    assert all(2 * WEEK < interval < MONTH for interval in after_a_month.intervals[:5])
    assert after_half_a_year.intervals[:5] == [MONTH] * 5


@pytest.mark.slow  # a month of checks simulated
def test_a_month_of_learning_from_nothing_beats_weekly_crawling_at_its_budget():
    rates = spread_of_rates(2000, random.Random(5))
    budget = len(rates) / 7  # a check per page per week

    weekly = simulate(rates, budget_per_day=budget, days=30, learn=False)
    learned = simulate(rates, budget_per_day=budget, days=30, learn=True)

    assert learned.crawls == pytest.approx(weekly.crawls, rel=0.01)
    assert learned.staleness_age < 0.85 * weekly.staleness_age
    assert learned.freshness > weekly.freshness


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
