"""The privacy audit's equal-variance estimate (``empirical.equal_variance_*``): one Gaussian shift in the null's
variance and the Gaussian mechanism's epsilon at it. Its shift by hand, its epsilon against dp-accounting's PLD
(add/remove: the Gaussian mechanism), its standard error against the spread of many draws, its interval's lower
end false in about (1 - confidence) / 2 of ideal runs and no more, its interval's edges (a shift near zero, no
spread), and the bias it removes: on ideal statistics the fitted-variance estimate lies above the exact epsilon in
most runs, the equal-variance one in about half."""

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.pld import PLDAccountant

from fedarena.privacy.empirical import (
    equal_variance_epsilon,
    equal_variance_interval,
    equal_variance_shift,
    fitted_epsilon,
    gaussian_shift_epsilon,
    shift_standard_error,
)

DELTA = 1e-5


def pld_epsilon(mu: float, delta: float = DELTA) -> float:
    """dp-accounting's epsilon of the Gaussian mechanism of sensitivity mu over noise 1 (add/remove)."""
    acc = PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE, value_discretization_interval=1e-4)
    acc.compose(dp_accounting.GaussianDpEvent(1 / mu))
    return float(acc.get_epsilon(delta))


def draws(mu, canaries, unseen, rng):
    return rng.normal(mu, 1.0, canaries), rng.normal(0.0, 1.0, unseen)


def test_the_shift_is_the_mean_gap_in_the_unseen_standard_deviation():
    # unseen 1, 2, 3, 4: mean 2.5, sd sqrt(5/3); seen 4, 6: mean 5 (their own spread plays no part)
    seen, unseen = np.array([4.0, 6.0]), np.array([1.0, 2.0, 3.0, 4.0])
    assert equal_variance_shift(seen, unseen) == pytest.approx(2.5 / math.sqrt(5 / 3), rel=1e-12)
    assert equal_variance_epsilon(seen, unseen, DELTA) == pytest.approx(pld_epsilon(2.5 / math.sqrt(5 / 3)),
                                                                        rel=1e-3)


@pytest.mark.parametrize("mu", [0.5, 0.9441, 2.0])
def test_the_epsilon_of_a_shift_is_the_gaussian_mechanisms(mu):
    assert gaussian_shift_epsilon(mu, DELTA) == pytest.approx(pld_epsilon(mu), rel=1e-3)
    assert gaussian_shift_epsilon(-mu, DELTA) == gaussian_shift_epsilon(mu, DELTA)  # a shift down leaks as much


@pytest.mark.parametrize("spread", [1.0, 2.0])  # canaries spread as the null, or twice as wide (their own error)
def test_the_standard_error_matches_the_spread_of_many_draws(spread):
    rng = np.random.default_rng(0)
    samples = [(rng.normal(1.0, spread, 100), rng.normal(0.0, 1.0, 1000)) for _ in range(3000)]
    shifts = np.array([equal_variance_shift(s, u) for s, u in samples])
    errors = np.array([shift_standard_error(s, u) for s, u in samples])
    assert np.median(errors) == pytest.approx(shifts.std(), rel=0.05)
    assert shifts.mean() == pytest.approx(1.0, abs=0.02)  # no bias in the shift itself


def test_the_interval_is_wider_at_higher_confidence_and_holds_the_estimate():
    seen, unseen = draws(1.0, 100, 1000, np.random.default_rng(1))
    estimate = equal_variance_epsilon(seen, unseen, DELTA)
    low95, high95 = equal_variance_interval(seen, unseen, DELTA, 0.95)
    low99, high99 = equal_variance_interval(seen, unseen, DELTA, 0.99)
    assert low99 < low95 < estimate < high95 < high99


def test_the_lower_end_lies_above_the_truth_in_about_its_one_sided_share_of_ideal_runs():
    # mu of the privacy suite's audit_eps10 row (sqrt(30) / 5.8015); 2,000 ideal runs of K = 100: the 95% interval's
    # lower end is a one-sided 97.5% statement, so it lies above the exact epsilon in about 2.5% of them
    mu, rng = 0.9441, np.random.default_rng(2)
    exact = gaussian_shift_epsilon(mu, DELTA)
    above = [equal_variance_interval(*draws(mu, 100, 1000, rng), DELTA, 0.95)[0] > exact for _ in range(2000)]
    assert 0.01 <= np.mean(above) <= 0.045


def test_an_interval_around_no_shift_starts_at_zero():
    rng = np.random.default_rng(3)
    seen, unseen = rng.normal(0.0, 1.0, 20), rng.normal(0.0, 1.0, 1000)
    low, high = equal_variance_interval(seen - seen.mean() + unseen.mean(), unseen, DELTA, 0.95)  # mu = 0 exactly
    assert low == 0.0 and high > 0.0


def test_a_shift_below_the_null_gives_the_interval_of_its_size():
    rng = np.random.default_rng(4)
    seen, unseen = draws(2.0, 100, 1000, rng)
    assert equal_variance_interval(-seen, -unseen, DELTA, 0.95) == equal_variance_interval(seen, unseen, DELTA, 0.95)


def test_no_spread_in_the_null_is_no_estimate():
    seen, unseen = np.array([1.0, 2.0]), np.full(5, 0.3)
    assert math.isnan(equal_variance_shift(seen, unseen)) and math.isnan(equal_variance_epsilon(seen, unseen, DELTA))
    assert all(math.isnan(v) for v in equal_variance_interval(seen, unseen, DELTA, 0.95))
    assert math.isnan(shift_standard_error(seen, unseen))


def test_on_ideal_statistics_the_fitted_estimate_lies_above_the_truth_and_the_equal_variance_one_does_not():
    # the bias the equal-variance estimate removes (K = 100, U = 1,000, 400 runs): two variances fitted apart raise
    # the estimate at small delta wherever they differ by chance
    mu, rng = 0.9441, np.random.default_rng(5)
    exact = gaussian_shift_epsilon(mu, DELTA)
    samples = [draws(mu, 100, 1000, rng) for _ in range(400)]
    fitted = np.array([fitted_epsilon(s, u, DELTA) for s, u in samples])
    equal = np.array([equal_variance_epsilon(s, u, DELTA) for s, u in samples])
    assert np.mean(fitted > exact) > 0.75 and np.median(fitted) > 1.15 * exact
    assert 0.4 < np.mean(equal > exact) < 0.6 and np.median(equal) == pytest.approx(exact, rel=0.05)


def test_the_flags_power_against_halved_noise_falls_with_the_shift():
    # what the audit table's note and docs/semantics.md state for K = 100, U = 1,000 at confidence 0.99: halved noise
    # (the shift doubled) lifts the lower end above the exact claim in every ideal run at audit_eps10's shift
    # (sqrt(30) / 5.8015) but in only about 70% at audit_eps3's (sqrt(30) / 16.357)
    rng = np.random.default_rng(6)
    for mu, least, most in ((0.9441, 0.99, 1.0), (0.33485, 0.6, 0.8)):
        exact = gaussian_shift_epsilon(mu, DELTA)
        caught = [equal_variance_interval(*draws(2 * mu, 100, 1000, rng), DELTA, 0.99)[0] > exact for _ in range(400)]
        assert least <= np.mean(caught) <= most, (mu, np.mean(caught))
