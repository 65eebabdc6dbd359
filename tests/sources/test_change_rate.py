from __future__ import annotations

import math
import random
import statistics

import pytest

from sources.change_rate import Check, estimate_rate, rate_from_counts

DAY, WEEK = 24.0, 168.0


def history(rate: float, checks: int, every: float, rng: random.Random) -> list[Check]:
    """Checks roughly ``every`` hours apart (±40%) of a Poisson page of ``rate``."""
    result = []
    for _ in range(checks):
        hours = every * rng.uniform(0.6, 1.4)
        result.append(Check(hours, rng.random() < 1 - math.exp(-rate * hours)))
    return result


@pytest.mark.parametrize(
    ("true_rate", "every"),
    [(1 / 1000, WEEK), (1 / WEEK, DAY), (1 / 48, DAY), (0.1, 5.0)],
)
def test_the_estimate_converges_to_the_true_rate_on_simulated_histories(
    true_rate, every
):
    rng = random.Random(7)

    def typical_error(checks: int) -> float:
        errors = []
        for _ in range(60):
            checks_seen = history(true_rate, checks, every, rng)
            estimate = estimate_rate(
                checks_seen, default_hours=WEEK, half_life_hours=math.inf
            )
            errors.append(abs(math.log(estimate / true_rate)))
        return statistics.median(errors)

    assert typical_error(400) < typical_error(25)
    assert typical_error(400) < 0.15  # within 15% of the truth


def test_it_counts_the_changes_missed_between_checks():
    rng = random.Random(3)
    checks_seen = history(1 / 10, 300, DAY, rng)  # about 2.4 changes per check
    naive = sum(c.changed for c in checks_seen) / sum(c.hours for c in checks_seen)

    estimate = estimate_rate(checks_seen, default_hours=WEEK)

    assert naive < 1 / 20
    assert 1 / 12 < estimate < 1 / 8


def test_a_page_with_no_history_starts_at_its_sources_default():
    assert estimate_rate([], default_hours=WEEK) == pytest.approx(1 / WEEK)


def test_with_a_faint_prior_regular_checks_give_the_maximum_likelihood():
    checks_seen = [Check(10.0, True)] * 3 + [Check(10.0, False)] * 7

    estimate = estimate_rate(
        checks_seen, default_hours=WEEK, spread=1e6, half_life_hours=math.inf
    )

    assert estimate == pytest.approx(-math.log(7 / 10) / 10, rel=1e-6)


def test_the_bias_reduced_estimate_for_regular_checks_stays_finite():
    assert rate_from_counts(10, 0, 24.0) == 0.0
    assert rate_from_counts(10, 3, 24.0) == pytest.approx(-math.log(7.5 / 10.5) / 24)
    assert rate_from_counts(10, 10, 24.0) == pytest.approx(math.log(21) / 24)


def test_the_bias_reduced_estimate_is_close_to_unbiased_where_counting_is_not():
    rng = random.Random(11)
    true_rate, interval, checks = 1 / 20, 24.0, 40
    corrected, counted = [], []
    for _ in range(2000):
        changes = sum(
            rng.random() < 1 - math.exp(-true_rate * interval) for _ in range(40)
        )
        corrected.append(rate_from_counts(checks, changes, interval))
        counted.append(changes / (checks * interval))

    assert statistics.mean(corrected) == pytest.approx(true_rate, rel=0.05)
    assert statistics.mean(counted) < 0.8 * true_rate


def test_a_page_that_changed_at_every_check_gets_a_finite_fast_rate():
    estimate = estimate_rate([Check(WEEK, True)] * 20, default_hours=WEEK)

    assert 1 / 30 < estimate < math.inf


def test_a_page_that_never_changes_keeps_slowing_down():
    estimates = [
        estimate_rate([Check(WEEK, False)] * checks, default_hours=WEEK)
        for checks in (1, 4, 16, 64)
    ]

    assert estimates == sorted(estimates, reverse=True)
    assert estimates[-1] < 1 / (50 * WEEK)


def test_a_page_whose_behaviour_changes_is_followed():
    busy, quiet = [Check(DAY, True)] * 90, [Check(DAY, False)] * 90

    went_quiet = estimate_rate(busy + quiet, default_hours=WEEK)
    woke_up = estimate_rate(quiet + busy, default_hours=WEEK)

    assert went_quiet < 1 / WEEK
    assert woke_up > 1 / DAY


def test_checks_of_no_length_are_ignored():
    checks_seen = [Check(DAY, True), Check(DAY, False)]

    with_noise = estimate_rate([*checks_seen, Check(0.0, True)], default_hours=WEEK)

    assert with_noise == estimate_rate(checks_seen, default_hours=WEEK)


def timed_history(
    rate: float, checks: int, every: float, rng: random.Random
) -> list[Check]:
    """Checks ``every`` hours apart of a Poisson page of ``rate`` whose site says
    when each version was made (Last-Modified): a changed check knows how long
    the new version had stood."""
    result = []
    for _ in range(checks):
        at, last = 0.0, None
        while (at := at + rng.expovariate(rate)) < every:
            last = at
        quiet = 0.0 if last is None else every - last
        result.append(Check(every, last is not None, quiet))
    return result


def test_the_sites_modification_times_sharpen_the_estimate_of_a_fast_page():
    # Changing every 10 hours, checked daily: nine checks in ten find a change,
    # which says little; how old each new version was says more. Ten checks
    # each, in 80 trials: the median |log error| halves (0.21 against 0.42).
    rng = random.Random(11)
    true_rate = 1 / 10
    with_times: list[float] = []
    without: list[float] = []
    for _ in range(80):
        seen = timed_history(true_rate, 10, DAY, rng)
        blind = [Check(c.hours, c.changed) for c in seen]
        for checks, errors in [(seen, with_times), (blind, without)]:
            estimate = estimate_rate(checks, default_hours=WEEK)
            errors.append(abs(math.log(estimate / true_rate)))

    assert statistics.median(with_times) < 0.3
    assert statistics.median(with_times) < statistics.median(without) * 0.6


def test_a_change_of_unknown_time_counts_as_before():
    checks = [Check(DAY, True), Check(DAY, False), Check(DAY, True)]

    assert estimate_rate(checks, default_hours=WEEK) == estimate_rate(
        [(c.hours, c.changed) for c in checks], default_hours=WEEK
    )
