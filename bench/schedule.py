"""A simulated month of recrawling: uniform, change-proportional and adaptive schedules.

10,000 pages (``--pages``): 30% never change, the rest change as Poisson processes
with rates spread log-uniformly from once an hour to once a year. Every schedule gets
the same crawl budget, one check per page per week on average (1,429 a day for 10,000
pages), within the same bounds (1 hour to 30 days):

- uniform: every page every week;
- change-proportional: interval ∝ 1 / true rate (pages that never change at the
  longest interval), scaled to the budget;
- adaptive, learned: ``sources.schedule`` as the product runs it, knowing nothing at
  the start: every page starts at the uniform interval, each check's outcome goes into
  the page's history and sets its rate and next interval; once a day the source's
  plan is made for the next 24 hours from every page's rate and time since its last
  check, and every page is re-timed to it. It sees only what a planner sees: when
  each page was checked and whether its content had changed;
- adaptive, true rates: the same allocation given the true rates, an upper reference.

Each starts in the steady state of weekly crawling (or, with known rates, of its own
intervals), and checks happen exactly when due, with no cap on a day's crawls: the
plans alone hold the budget, and the crawls actually made are printed, a day's on
average and the fewest and most of any day. Reported over the month (and the
learned schedule over its last week too): freshness, the share of time a page's copy
is current; the mean age of a stale copy, how long ago it missed its first change;
and the mean staleness age over all copies (0 while current). Last, the CPU time of
planning 100,000 pages from their rates, in the steady state and for a day.

    .venv/bin/python -m bench.schedule [--pages 10000] [--days 30] [--seed 7]
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sources import schedule
from sources.change_rate import CHECKS_KEPT
from sources.day_plan import SPENDING_DAYS

HOURS_PER_DAY = schedule.HOURS_PER_DAY
MIN_HOURS = 1.0
MAX_HOURS = 30 * HOURS_PER_DAY
NEVER_CHANGE = 0.3
FASTEST, SLOWEST = 1.0, 1.0 / (365 * HOURS_PER_DAY)  # changes per hour
STEP_HOURS = 0.5  # checks are processed in steps this long, each at its own time


def true_rates(pages: int, rng: np.random.Generator) -> np.ndarray:
    rates = np.exp(rng.uniform(math.log(SLOWEST), math.log(FASTEST), pages))
    rates[rng.random(pages) < NEVER_CHANGE] = 0.0
    return rates


@dataclass
class Tally:
    """Page-hours current, and summed age over page-hours, from ``start`` on."""

    start: float
    fresh: float = 0.0
    age: float = 0.0
    hours: float = 0.0

    def add(self, synced: np.ndarray, changed: np.ndarray, until: np.ndarray) -> None:
        """Copies synced at ``synced``, first missed change at ``changed``, looked at
        up to ``until``."""
        since = np.maximum(synced, self.start)
        self.fresh += float(np.maximum(np.minimum(changed, until) - since, 0).sum())
        stale_from = np.maximum(changed, self.start)
        stale = stale_from < until  # also false for copies that never go stale
        missed, end, start = changed[stale], until[stale], stale_from[stale]
        self.age += float(((end - missed) ** 2 - (start - missed) ** 2).sum()) / 2
        self.hours += float(np.maximum(until - since, 0).sum())

    def row(self) -> tuple[float, float, float]:
        stale = self.hours - self.fresh
        return (
            self.fresh / self.hours,
            self.age / stale if stale else 0.0,
            self.age / self.hours,
        )


class Month:
    """Pages, their copies and their next checks, simulated a step at a time."""

    def __init__(
        self,
        rates: np.ndarray,
        intervals: np.ndarray,
        *,
        days: float,
        seed: int,
    ) -> None:
        # A stream of its own: phases drawn from the rates' stream would follow them.
        self.rng = np.random.default_rng([seed, 1])
        self.rates = rates
        self.intervals = intervals.astype(float)
        self.end = days * HOURS_PER_DAY
        # Steady state of checking every ``intervals``: a uniform phase in the cycle.
        self.synced = -self.rng.random(len(rates)) * self.intervals
        self.due = self.synced + self.intervals
        self.changes = self.synced + self._waits(np.arange(len(rates)))
        self.crawls = 0
        self.per_day = np.zeros(math.ceil(days), dtype=int)
        last_week = max(self.end - 7 * HOURS_PER_DAY, 0.0)
        self.tallies = [Tally(0.0), Tally(last_week)]

    def _waits(self, pages: np.ndarray) -> np.ndarray:
        """Hours to each page's next change (infinite for pages that never change)."""
        rates = self.rates[pages]
        waits = np.full(len(pages), np.inf)
        changing = rates > 0
        waits[changing] = self.rng.exponential(1.0 / rates[changing])
        return waits

    def run(self) -> Month:
        now = 0.0
        while now < self.end:
            if now % HOURS_PER_DAY == 0:
                self.replan(now)
            now = min(now + STEP_HOURS, self.end)
            self.check(np.flatnonzero(self.due <= now))
        every = np.arange(len(self.rates))
        for tally in self.tallies:
            tally.add(self.synced, self.changes, np.full(len(every), self.end))
        return self

    def check(self, pages: np.ndarray) -> None:
        at = self.due[pages]
        for tally in self.tallies:
            tally.add(self.synced[pages], self.changes[pages], at)
        self.observe(pages, at - self.synced[pages], self.changes[pages] <= at)
        self.synced[pages] = at
        self.changes[pages] = at + self._waits(pages)
        self.due[pages] = at + self.intervals[pages]
        self.crawls += len(pages)
        day = np.minimum(at // HOURS_PER_DAY, len(self.per_day) - 1).astype(int)
        np.add.at(self.per_day, day, 1)

    def observe(
        self, pages: np.ndarray, hours: np.ndarray, changed: np.ndarray
    ) -> None:
        """What a crawl learns; only the learning schedule listens."""

    def replan(self, now: float) -> None:
        """Called at the start of every day; only the learning schedule plans."""


class LearningMonth(Month):
    """The product's schedule: rates estimated from each page's own checks.

    As the product runs it: each check updates the page's rate and its next
    interval at once, under its source's current plan. Once a day the plan is made
    again for the next 24 hours from every page's rate and hours since its last
    check, for the budget corrected by the last two days' spending, and every page is
    re-timed to it: due its new interval after its last check, at once if past.
    """

    def __init__(self, rates: np.ndarray, *, budget: float, days: float, seed: int):
        self.default_hours = len(rates) * HOURS_PER_DAY / budget
        uniform = np.full(len(rates), self.default_hours)
        super().__init__(rates, uniform, days=days, seed=seed)
        self.budget = budget
        self.histories: list[list[tuple[float, bool]]] = [[] for _ in rates]
        self.estimates = [1.0 / self.default_hours] * len(rates)
        self.plan = plan(self.estimates, budget)

    def observe(
        self, pages: np.ndarray, hours: np.ndarray, changed: np.ndarray
    ) -> None:
        for page, interval, was_changed in zip(
            pages.tolist(), hours.tolist(), changed.tolist(), strict=True
        ):
            history = self.histories[page]
            history.append((interval, was_changed))
            del history[:-CHECKS_KEPT]  # what a page keeps
            rate = schedule.estimate_rate(history, default_hours=self.default_hours)
            self.estimates[page] = rate
            self.intervals[page] = schedule.next_interval(rate, self.plan)

    def replan(self, now: float) -> None:
        day = int(now // HOURS_PER_DAY)
        recent = self.per_day[max(day - SPENDING_DAYS, 0) : day]
        today = schedule.checks_for_today(
            self.budget, spent=float(recent.sum()), days=len(recent)
        )
        ages = (now - self.synced).tolist()
        self.plan = schedule.plan_day(
            zip(self.estimates, ages, strict=True),
            budget_per_day=today,
            min_hours=MIN_HOURS,
            max_hours=MAX_HOURS,
        )
        self.intervals = np.array(schedule.retime(self.estimates, self.plan))
        self.due = np.maximum(self.synced + self.intervals, now)


def plan(rates: list[float], budget: float) -> schedule.Plan:
    return schedule.plan_checks(
        rates, budget_per_day=budget, min_hours=MIN_HOURS, max_hours=MAX_HOURS
    )


def proportional(rates: np.ndarray, budget: float) -> np.ndarray:
    """Intervals ∝ 1/rate within the bounds, scaled by bisection to the budget."""
    per_hour = budget / HOURS_PER_DAY
    low, high = math.log(1e-6), math.log(1e9)
    for _ in range(100):
        middle = (low + high) / 2
        spent = np.clip(math.exp(middle) * rates, 1 / MAX_HOURS, 1 / MIN_HOURS).sum()
        if spent > per_hour:
            high = middle
        else:
            low = middle
    return 1 / np.clip(math.exp(low) * rates, 1 / MAX_HOURS, 1 / MIN_HOURS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=10_000, help="pages simulated")
    parser.add_argument("--days", type=float, default=30, help="days simulated")
    parser.add_argument("--seed", type=int, default=7, help="random seed")
    args = parser.parse_args()

    budget = args.pages / 7  # a check per page per week
    rates = true_rates(args.pages, np.random.default_rng([args.seed, 0]))
    month = {"days": args.days, "seed": args.seed}
    schedules: dict[str, Callable[[], Month]] = {
        "uniform": lambda: Month(rates, uniform(rates, budget), **month),
        "change-proportional": lambda: Month(
            rates, proportional(rates, budget), **month
        ),
        "adaptive, learned": lambda: LearningMonth(rates, budget=budget, **month),
        "adaptive, true rates": lambda: Month(rates, known(rates, budget), **month),
    }
    print(
        f"{args.pages:,} pages over {args.days:g} days, {budget:,.0f} crawls a day, "
        f"intervals from {MIN_HOURS:g} h to {MAX_HOURS / HOURS_PER_DAY:g} days"
    )
    print(
        f"{'schedule':<24}{'crawls/day':>11}{'day range':>14}{'freshness':>11}"
        f"{'stale copy age':>16}{'staleness age':>15}{'seconds':>9}"
    )
    ages = {}
    for name, start in schedules.items():
        started = time.perf_counter()
        run = start().run()
        seconds = f"{time.perf_counter() - started:.1f}"
        ages[name] = run.tallies[0].row()[2]
        days = f"{run.per_day.min():,}–{run.per_day.max():,}"
        spend = (f"{run.crawls / args.days:,.0f}", days)
        print(line(name, spend, run.tallies[0].row(), seconds))
        if isinstance(run, LearningMonth):
            print(line("  its last 7 days", ("", ""), run.tallies[1].row(), ""))
    cut = 1 - ages["adaptive, learned"] / ages["uniform"]
    print(f"adaptive, learned: {cut:.1%} less mean staleness age than uniform")
    steady, day = allocation_seconds()
    print(f"intervals for 100,000 pages from their rates: {steady:.2f} s")
    print(f"a day's plan for 100,000 pages and their new intervals: {day:.2f} s")


def allocation_seconds() -> tuple[float, float]:
    """CPU time of ``plan_checks`` and every page's interval over 100,000 rates, and
    of ``plan_day`` and ``retime`` over 100,000 rates and hours since their checks."""
    rng = np.random.default_rng(0)
    rates = true_rates(100_000, rng).tolist()
    ages = rng.uniform(0, 14 * HOURS_PER_DAY, len(rates)).tolist()
    bounds = {"min_hours": MIN_HOURS, "max_hours": MAX_HOURS}
    started = time.process_time()
    schedule.retime(rates, plan(rates, len(rates) / 7))
    middle = time.process_time()
    pages = zip(rates, ages, strict=True)
    day = schedule.plan_day(pages, budget_per_day=len(rates) / 7, **bounds)
    schedule.retime(rates, day)
    return middle - started, time.process_time() - middle


def uniform(rates: np.ndarray, budget: float) -> np.ndarray:
    return np.full(len(rates), len(rates) * HOURS_PER_DAY / budget)


def known(rates: np.ndarray, budget: float) -> np.ndarray:
    chosen = plan(rates.tolist(), budget)
    return np.array([schedule.next_interval(rate, chosen) for rate in rates.tolist()])


def line(
    name: str, spend: tuple[str, str], row: tuple[float, float, float], seconds: str
) -> str:
    freshness, stale_age, age = row
    return (
        f"{name:<24}{spend[0]:>11}{spend[1]:>14}{freshness:>11.1%}"
        f"{stale_age:>14.1f} h{age:>13.1f} h{seconds:>9}"
    )


if __name__ == "__main__":
    main()
