"""fedarena/privacy/empirical.py checked exactly, one behaviour per test (the mutation score of the module:
docs/testing.md): the two constants (the linear cut-off 1e-12 and the infinite estimate past 700); the tail masses
of the privacy loss of two Gaussians on every branch (linear rising and falling, constant loss, a quadratic above
or below epsilon everywhere, two roots opening up or down) against the roots found numerically; the two-Gaussian
epsilon against the Gaussian mechanism's closed form (Balle and Wang 2018) and against a numerical root of the
hockey-stick divergence, over every bracket of its search (below 0.5, below 1, between 3 and 4.5, near 600, just
below, at and above 700), nearly equal variances (a quadratic kept at s = 1000, a line at s = 0.01), and the
refused inputs (NaN); ``fitted_epsilon``'s ddof 1; the bootstrap's percentile order statistics, its NaN filtering,
its single resample and its resample sizes; the Clopper-Pearson upper bounds by their closed forms and the binomial
tail; the exact cosine null at d = 2, 3 and 5 (arccos t / pi, (1 - t) / 2, (2 - 3t + t^3) / 4) and its clipping;
the lower bound's formula in both directions, its Bonferroni divisor, its unseen counts with ties, an empty and a
hopeless sample at 0 (make mutants MODULE=fedarena/privacy/empirical.py)."""

import math

import numpy as np
import pytest
from scipy import optimize, special, stats

from fedarena.privacy import empirical
from fedarena.privacy.empirical import (
    bootstrap_interval,
    cosine_log_sf,
    epsilon_lower_bound,
    fitted_epsilon,
    rate_upper,
    two_gaussian_epsilon,
)

# --- independent references ----------------------------------------------------------------------------------------


def gaussian_mechanism_delta(mu, eps):
    """Balle and Wang (2018), Theorem 8: delta(eps) of N(mu, 1) against N(0, 1), e^eps times a tail in logs."""
    return special.ndtr(mu / 2 - eps / mu) - math.exp(eps + special.log_ndtr(-mu / 2 - eps / mu))


def gaussian_mechanism_epsilon(mu, delta):
    if gaussian_mechanism_delta(mu, 0.0) <= delta:
        return 0.0
    return optimize.brentq(lambda e: gaussian_mechanism_delta(mu, e) - delta, 0.0, 2000.0, xtol=1e-14, rtol=1e-15)


def loss_tails(m1, s1, m2, s2, eps):
    """(P[L > eps], Q[L > eps]) with L = log p / q from scipy's log densities: the roots of L - eps located on a
    grid and refined by brentq, each interval's mass from normal tails (no quadratic formula)."""
    def loss(x):  # the log densities, -((x - m) / s)^2 / 2 - log s - log sqrt(2 pi) each
        return (-0.5 * ((x - m1) / s1) ** 2 - math.log(s1)) - (-0.5 * ((x - m2) / s2) ** 2 - math.log(s2)) - eps

    span = 40 * max(s1, s2)
    grid = np.linspace(min(m1, m2) - span, max(m1, m2) + span, 4_001)
    values = loss(grid)
    signs = np.sign(values)
    roots = [grid[i] if values[i] == 0 else optimize.brentq(loss, grid[i], grid[i + 1], xtol=1e-15, rtol=1e-15)
             for i in np.flatnonzero(signs[:-1] != signs[1:]) if values[i + 1] != 0 or values[i] == 0]
    edges = [-math.inf, *roots, math.inf]
    p = q = 0.0
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        probe = (lo + hi) / 2 if math.isfinite(lo) and math.isfinite(hi) else (
            (hi - 1.0) if math.isfinite(hi) else (lo + 1.0) if math.isfinite(lo) else 0.0)
        if loss(probe) > 0:
            p += stats.norm.cdf(hi, m1, s1) - stats.norm.cdf(lo, m1, s1) if math.isfinite(lo) and math.isfinite(hi) \
                else stats.norm.cdf(hi, m1, s1) if math.isfinite(hi) else stats.norm.sf(lo, m1, s1) \
                if math.isfinite(lo) else 1.0
            q += stats.norm.cdf(hi, m2, s2) - stats.norm.cdf(lo, m2, s2) if math.isfinite(lo) and math.isfinite(hi) \
                else stats.norm.cdf(hi, m2, s2) if math.isfinite(hi) else stats.norm.sf(lo, m2, s2) \
                if math.isfinite(lo) else 1.0
    return p, q


def pair_epsilon(m1, s1, m2, s2, delta):
    """The smallest eps at which the hockey-stick divergence, the larger of both directions, is at most delta."""
    def divergence(eps):
        p, q = loss_tails(m1, s1, m2, s2, eps)
        q2, p2 = loss_tails(m2, s2, m1, s1, eps)
        return max(p - math.exp(eps) * q, q2 - math.exp(eps) * p2)

    if divergence(0.0) <= delta:
        return 0.0
    return optimize.brentq(lambda e: divergence(e) - delta, 0.0, 60.0, xtol=1e-13, rtol=1e-14)


def clopper_pearson_upper(k, n, alpha):
    """The p at which P[Binomial(n, p) <= k] = alpha (1 where k = n)."""
    if k >= n:
        return 1.0
    return optimize.brentq(lambda p: stats.binom.cdf(k, n, p) - alpha, 1e-300, 1.0, xtol=1e-16, rtol=1e-15)


def lower_bound(seen, delta, alpha, fpr_of):
    """Jagielski et al.'s bound from the module's formula: thresholds at the sorted seen values, j of them below
    the j-th, each rate's Clopper-Pearson bound at alpha / n; false positive rates from ``fpr_of(t, alpha)``."""
    seen = sorted(seen)
    n = len(seen)
    best = 0.0
    for j, t in enumerate(seen):
        fnr = clopper_pearson_upper(j, n, alpha / n)
        fpr = fpr_of(t, alpha / n)
        for num, den in ((1 - delta - fnr, fpr), (1 - delta - fpr, fnr)):
            if num > 0 and den > 0:
                best = max(best, math.log(num) - math.log(den))
    return best


def normal_null(t, alpha):
    return stats.norm.sf(t)


# --- the constants -------------------------------------------------------------------------------------------------

def test_the_linear_cut_off_is_1e_12_and_estimates_past_700_are_infinite():
    assert empirical.FLAT == 1e-12
    assert empirical.MAX_EPSILON == 700.0


# --- the tail masses of the privacy loss, every branch -------------------------------------------------------------

@pytest.mark.parametrize("pair", [
    (0.9, 0.6, 0.3, 0.6),     # equal variances, b = 1.67: the loss rises
    (0.2, 2.0, 0.9, 2.0),     # b = -0.175: the loss falls
    (0.5, 1.0, -0.25, 1.0),   # b = 0.75 (in (0, 1))
    (1.5, 1.3, 0.4, 0.8),     # s2 < s1: the loss opens upwards (a > 0), two roots
    (0.7, 0.9, -0.3, 1.6),    # s2 > s1: opens downwards (a < 0), two roots
    (0.3, 0.5, -0.2, 0.7),    # a < 0, variances below 1
    (0.4, 2.5, 1.1, 1.7),     # a > 0, variances above 1
])
@pytest.mark.parametrize("eps", [0.0, 0.35, 1.3])
def test_the_tail_masses_are_the_normal_masses_where_the_loss_exceeds_epsilon(pair, eps):
    expected = loss_tails(*pair, eps)
    assert empirical._tail_masses(*pair, eps) == pytest.approx(expected, rel=1e-9, abs=1e-15)


def test_a_downward_loss_with_a_small_discriminant_keeps_the_mass_between_its_roots():
    # a = 0.5 / 1.44 - 0.5, b = 0, c = log 1.2: the discriminant is 0.111 (in (0, 1)), the roots +-0.66
    expected = loss_tails(0.0, 1.0, 0.0, 1.2, 0.0)
    assert expected[0] > 0.4
    assert empirical._tail_masses(0.0, 1.0, 0.0, 1.2, 0.0) == pytest.approx(expected, rel=1e-9)


def test_an_upward_loss_with_a_below_one_and_a_small_discriminant():
    # a = 0.5 / 0.81 - 0.5 / 1.21 = 0.204 (in (0, 1)), two roots close together
    expected = loss_tails(0.1, 1.1, 0.0, 0.9, 0.0)
    assert 0 < expected[0] < 1
    assert empirical._tail_masses(0.1, 1.1, 0.0, 0.9, 0.0) == pytest.approx(expected, rel=1e-9)


def test_a_loss_above_epsilon_everywhere_has_all_the_mass():
    # N(0, 4) against N(0, 1): L = x^2 (0.5 - 0.125) - log 2 >= -0.69 > -1 everywhere
    assert empirical._tail_masses(0.0, 2.0, 0.0, 1.0, -1.0) == (1.0, 1.0)


def test_a_loss_below_epsilon_everywhere_has_no_mass():
    # N(0, 1) against N(0, 4): L = log 2 - 0.375 x^2 <= 0.69 < 1 everywhere
    assert empirical._tail_masses(0.0, 1.0, 0.0, 2.0, 1.0) == (0.0, 0.0)
    assert empirical._tail_masses(0.3, 0.5, 0.3, 1.5, 1.2) == (0.0, 0.0)


def test_a_constant_loss_exceeds_epsilon_only_strictly_below_it():
    # identical Gaussians: L = 0, so P[L > eps] is 1 for eps < 0 and 0 from eps = 0 on
    assert empirical._tail_masses(0.4, 1.5, 0.4, 1.5, -0.5) == (1.0, 1.0)
    assert empirical._tail_masses(0.4, 1.5, 0.4, 1.5, 0.0) == (0.0, 0.0)
    assert empirical._tail_masses(0.4, 1.5, 0.4, 1.5, 0.5) == (0.0, 0.0)


def test_the_divergence_is_the_larger_direction():
    p, q = loss_tails(1.5, 1.3, 0.4, 0.8, 0.6)
    q2, p2 = loss_tails(0.4, 0.8, 1.5, 1.3, 0.6)
    expected = max(p - math.exp(0.6) * q, q2 - math.exp(0.6) * p2)
    assert empirical._delta(1.5, 1.3, 0.4, 0.8, 0.6) == pytest.approx(expected, rel=1e-9)
    assert empirical._delta(0.4, 0.8, 1.5, 1.3, 0.6) == pytest.approx(expected, rel=1e-9)


# --- the two-Gaussian epsilon --------------------------------------------------------------------------------------

@pytest.mark.parametrize("mu", [0.1, 0.6, 1.0, 1.35, 2.5, 4.0])
def test_equal_variances_give_the_gaussian_mechanisms_closed_form(mu):
    # mu = 0.1: eps 0.34 (below 0.5); 1.0: 4.38 (between 3 and 4.5); the rest cross other doublings
    expected = gaussian_mechanism_epsilon(mu, 1e-5)
    assert two_gaussian_epsilon(mu, 1.0, 0.0, 1.0, 1e-5) == pytest.approx(expected, rel=1e-8)
    assert two_gaussian_epsilon(0.0, 1.0, mu, 1.0, 1e-5) == pytest.approx(expected, rel=1e-8)
    # the loss depends on the distance in standard deviations only
    assert two_gaussian_epsilon(0.3, 0.5, 0.3 + 0.5 * mu, 0.5, 1e-5) == pytest.approx(expected, rel=1e-8)
    assert two_gaussian_epsilon(2.0 + 3.0 * mu, 3.0, 2.0, 3.0, 1e-5) == pytest.approx(expected, rel=1e-8)


@pytest.mark.parametrize("pair", [(1.5, 1.3, 0.4, 0.8), (0.7, 0.9, -0.3, 1.6), (0.3, 0.5, -0.2, 0.7),
                                  (0.4, 2.5, 1.1, 1.7), (2.0, 1.2, -1.0, 1.0)])
@pytest.mark.parametrize("delta", [1e-5, 0.05])
def test_unequal_variances_give_the_divergences_root(pair, delta):
    assert two_gaussian_epsilon(*pair, delta) == pytest.approx(pair_epsilon(*pair, delta), rel=1e-8)


def test_a_small_epsilon_below_one_is_found_in_the_first_bracket():
    expected = gaussian_mechanism_epsilon(0.05, 1e-3)
    assert 0 < expected < 0.5
    assert two_gaussian_epsilon(0.05, 1.0, 0.0, 1.0, 1e-3) == pytest.approx(expected, rel=1e-8)


def test_identical_gaussians_are_indistinguishable_at_epsilon_0():
    assert two_gaussian_epsilon(0.3, 0.7, 0.3, 0.7, 1e-5) == 0.0
    # a delta at least the total variation distance needs no epsilon either
    tv = special.ndtr(0.25) - special.ndtr(-0.25)  # N(0.5, 1) against N(0, 1)
    assert two_gaussian_epsilon(0.5, 1.0, 0.0, 1.0, tv + 1e-9) == 0.0
    assert two_gaussian_epsilon(0.5, 1.0, 0.0, 1.0, tv - 1e-3) > 0.0


def test_nearly_equal_large_variances_keep_their_quadratic_term():
    # s2 = s1 (1 + 1e-3) at s1 = 1000: a = -1e-9, far above 1e-12 / s^2 = 1e-18, so the loss stays quadratic and
    # its curvature moves epsilon by ~2e-5 of itself from the line through the same two Gaussians
    for pair in [(3000.0, 1000.0, 0.0, 1001.0), (0.0, 1001.0, 3000.0, 1000.0)]:
        expected = pair_epsilon(*pair, 1e-5)
        assert two_gaussian_epsilon(*pair, 1e-5) == pytest.approx(expected, rel=1e-9)


def test_nearly_equal_small_variances_are_the_gaussian_mechanism():
    # s2 = s1 (1 + 1e-13) at s1 = 0.01: |a| = 1e-9, below 1e-12 / s^2 = 1e-8: linear, the Gaussian mechanism
    expected = gaussian_mechanism_epsilon(1.5, 1e-5)
    assert two_gaussian_epsilon(0.015, 0.01, 0.0, 0.01 * (1 + 1e-13), 1e-5) == pytest.approx(expected, rel=1e-10)


def test_a_divergence_of_exactly_delta_at_700_gives_700_not_infinity():
    # delta set to the pair's own divergence at 700: the smallest epsilon reaching it is 700 itself
    delta = empirical._delta(36.94, 1.0, 0.0, 1.0, 700.0)
    assert 0.25 < delta < 0.35
    assert two_gaussian_epsilon(36.94, 1.0, 0.0, 1.0, delta) == 700.0


def test_an_epsilon_near_600_is_found_in_the_last_bracket():
    expected = gaussian_mechanism_epsilon(33.0, 0.1)  # 585.8: high is capped at 700, low 350
    assert 512 < expected < 700
    assert two_gaussian_epsilon(33.0, 1.0, 0.0, 1.0, 0.1) == pytest.approx(expected, rel=1e-8)


def test_an_epsilon_just_below_700_is_finite_and_one_just_above_is_infinite():
    below, above = gaussian_mechanism_epsilon(36.91, 0.3), gaussian_mechanism_epsilon(36.94, 0.3)
    assert 690 < below < 700 < above < 701
    assert two_gaussian_epsilon(36.91, 1.0, 0.0, 1.0, 0.3) == pytest.approx(below, rel=1e-8)
    assert two_gaussian_epsilon(36.94, 1.0, 0.0, 1.0, 0.3) == math.inf
    assert two_gaussian_epsilon(40.0, 1.0, 0.0, 1.0, 1e-5) == math.inf


@pytest.mark.parametrize("pair", [(1.0, 0.0, 0.0, 1.0), (1.0, 1.0, 0.0, 0.0), (1.0, -1.0, 0.0, 1.0),
                                  (1.0, 1.0, 0.0, -0.5), (math.inf, 1.0, 0.0, 1.0), (0.0, 1.0, math.nan, 1.0),
                                  (0.0, math.inf, 0.0, 1.0), (0.0, 1.0, 0.0, math.nan)])
def test_a_pair_without_two_positive_finite_deviations_has_no_epsilon(pair):
    assert math.isnan(two_gaussian_epsilon(*pair, 1e-5))


def test_deviations_below_one_are_valid():
    assert two_gaussian_epsilon(0.3, 0.5, 0.0, 0.5, 1e-5) == pytest.approx(gaussian_mechanism_epsilon(0.6, 1e-5),
                                                                          rel=1e-8)


# --- fitted_epsilon ------------------------------------------------------------------------------------------------

def test_the_fitted_gaussians_use_the_sample_mean_and_the_ddof_1_deviation():
    # seen: mean 2, variance (4 + 1 + 0 + 9) / 3; unseen: mean 0, variance (0.25 + 0.25 + 2.25 + 2.25) / 3
    seen, unseen = np.array([0.0, 1.0, 2.0, 5.0]), np.array([0.5, -0.5, 1.5, -1.5])
    expected = pair_epsilon(2.0, math.sqrt(14 / 3), 0.0, math.sqrt(5 / 3), 0.01)
    assert fitted_epsilon(seen, unseen, 0.01) == pytest.approx(expected, rel=1e-8)


def test_a_constant_sample_has_no_fitted_epsilon():
    assert math.isnan(fitted_epsilon(np.array([1.0, 1.0, 1.0]), np.array([0.0, 1.0, 2.0]), 1e-5))


# --- the bootstrap interval ----------------------------------------------------------------------------------------

def scripted(monkeypatch, values):
    """fitted_epsilon replaced by a script of values; returns the calls' arguments."""
    calls, values = [], iter(values)

    def fake(seen, unseen, delta):
        calls.append((np.array(seen), np.array(unseen), delta))
        return next(values)

    monkeypatch.setattr(empirical, "fitted_epsilon", fake)
    return calls


def test_the_interval_is_the_lower_and_higher_order_statistics(monkeypatch):
    # 11 estimates 1..11 at 75%: the 0.125 and 0.875 quantiles lie at positions 1.25 and 8.75 of 0..10
    scripted(monkeypatch, [5.0, 11.0, 2.0, 8.0, 1.0, 10.0, 3.0, 7.0, 9.0, 4.0, 6.0])
    assert bootstrap_interval(np.zeros(3), np.zeros(2), 1e-5, 11, 0.75, np.random.default_rng(0)) == (2.0, 10.0)


def test_the_interval_at_90_percent_of_ten_estimates_is_their_range(monkeypatch):
    # positions 0.45 and 8.55: the lower rounds down to the smallest, the higher up to the largest
    scripted(monkeypatch, [3.0, 1.0, 4.0, 10.0, 5.0, 9.0, 2.0, 6.0, 8.0, 7.0])
    assert bootstrap_interval(np.zeros(3), np.zeros(2), 1e-5, 10, 0.9, np.random.default_rng(0)) == (1.0, 10.0)


def test_a_single_resample_gives_its_estimate_at_both_ends(monkeypatch):
    calls = scripted(monkeypatch, [2.5])
    assert bootstrap_interval(np.arange(4.0), np.arange(3.0), 1e-5, 1, 0.95, np.random.default_rng(0)) == (2.5, 2.5)
    assert len(calls) == 1


def test_no_resamples_give_no_interval(monkeypatch):
    calls = scripted(monkeypatch, [])
    low, high = bootstrap_interval(np.arange(4.0), np.arange(3.0), 1e-5, 0, 0.95, np.random.default_rng(0))
    assert math.isnan(low) and math.isnan(high) and calls == []


def test_undefined_estimates_are_left_out(monkeypatch):
    scripted(monkeypatch, [math.nan, 3.0, math.nan, 1.0, 2.0])
    assert bootstrap_interval(np.zeros(3), np.zeros(2), 1e-5, 5, 0.5, np.random.default_rng(0)) == (1.0, 3.0)


def test_only_undefined_estimates_give_no_interval(monkeypatch):
    scripted(monkeypatch, [math.nan, math.nan])
    low, high = bootstrap_interval(np.zeros(3), np.zeros(2), 1e-5, 2, 0.9, np.random.default_rng(0))
    assert math.isnan(low) and math.isnan(high)


def test_an_infinite_estimate_stays_an_infinite_end(monkeypatch):
    scripted(monkeypatch, [1.0, math.inf, 2.0])
    assert bootstrap_interval(np.zeros(3), np.zeros(2), 1e-5, 3, 0.5, np.random.default_rng(0)) == (1.0, math.inf)


def test_each_resample_draws_both_samples_to_their_sizes_from_their_values(monkeypatch):
    calls = scripted(monkeypatch, [1.0] * 6)
    seen, unseen = np.array([1.0, 2.0, 3.0, 4.0, 5.0]), np.array([-1.0, -2.0, -3.0])
    bootstrap_interval(seen, unseen, 0.02, 6, 0.95, np.random.default_rng(3))
    assert len(calls) == 6
    for s, u, delta in calls:
        assert len(s) == 5 and len(u) == 3 and delta == 0.02
        assert set(s) <= set(seen) and set(u) <= set(unseen)


def test_the_real_bootstrap_of_a_constant_sample_has_no_interval():
    low, high = bootstrap_interval(np.full(4, 1.0), np.arange(4.0), 1e-5, 3, 0.95, np.random.default_rng(0))
    assert math.isnan(low) and math.isnan(high)


# --- Clopper-Pearson upper bounds ----------------------------------------------------------------------------------

def test_the_upper_bounds_closed_forms_at_no_and_all_but_one_success():
    # Beta(1, n) and Beta(n, 1) quantiles: 1 - alpha^(1/n) and (1 - alpha)^(1/n)
    bound = rate_upper(np.array([0, 4]), 5, 0.1)
    np.testing.assert_allclose(bound, [1 - 0.1 ** (1 / 5), 0.9 ** (1 / 5)], rtol=1e-12)


def test_the_upper_bound_leaves_alpha_below_its_count():
    counts = np.array([1, 2, 3, 6])
    bound = rate_upper(counts, 10, 0.05)
    np.testing.assert_allclose(stats.binom.cdf(counts, 10, bound), 0.05, rtol=1e-9)
    np.testing.assert_allclose(bound, [clopper_pearson_upper(k, 10, 0.05) for k in counts], rtol=1e-9)


def test_every_trial_succeeding_bounds_the_rate_at_one():
    np.testing.assert_array_equal(rate_upper(np.array([3, 7]), 3, 0.05)[:1], [1.0])
    assert rate_upper(np.array([7]), 7, 0.2)[0] == 1.0
    assert rate_upper(np.array([0]), 1, 0.25)[0] == pytest.approx(0.75, rel=1e-12)


# --- the exact cosine null -----------------------------------------------------------------------------------------

T = np.array([-1.5, -1.0, -0.6, -0.2, 0.0, 0.3, 0.75, 0.95])


def test_the_cosine_tail_in_three_dimensions_is_uniform():
    # Archimedes: a uniform direction's cosine with a fixed vector in R^3 is uniform on [-1, 1]
    expected = np.log((1 - np.clip(T, -1, 1)) / 2)
    np.testing.assert_allclose(cosine_log_sf(3)(T), expected, rtol=1e-12, atol=1e-15)


def test_the_cosine_tail_in_two_dimensions_is_the_angles():
    # a uniform angle theta: P[cos theta >= t] = arccos(t) / pi
    expected = np.log(np.arccos(np.clip(T, -1, 1)) / np.pi)
    np.testing.assert_allclose(cosine_log_sf(2)(T), expected, rtol=1e-12, atol=1e-15)


def test_a_cosine_of_one_or_beyond_has_no_tail_and_of_minus_one_or_below_all_of_it():
    got = cosine_log_sf(7)(np.array([1.0, 1.5, -1.0, -2.0]))
    assert got[0] == -math.inf and got[1] == -math.inf and got[2] == 0.0 and got[3] == 0.0


def test_the_cosine_tail_in_five_dimensions():
    # d = 5: the cosine has density (3/4)(1 - t^2), so P[cos >= t] = (2 - 3t + t^3) / 4
    t = np.array([-0.7, -0.1, 0.0, 0.4, 0.8])
    np.testing.assert_allclose(cosine_log_sf(5)(t), np.log((2 - 3 * t + t**3) / 4), rtol=1e-12)


# --- the lower bound -----------------------------------------------------------------------------------------------

def test_the_lower_bound_against_an_exact_null():
    seen, delta, alpha = np.array([2.5, 0.5, 3.5, 1.5]), 1e-5, 0.05
    expected = lower_bound(seen, delta, alpha, normal_null)
    assert expected > 1
    assert epsilon_lower_bound(seen, delta, alpha, null_log_sf=stats.norm.logsf) == pytest.approx(expected, rel=1e-9)


def test_the_lower_bound_from_its_mirrored_form():
    # 40 inserted statistics just above 0 against N(0, 1): no threshold has a small false positive rate, and the
    # bound comes from log((1 - delta - FPR+) / FNR+) at the lowest threshold
    seen, delta, alpha = 0.01 + 1e-3 * np.arange(40), 1e-3, 0.05
    expected = lower_bound(seen, delta, alpha, normal_null)
    fnr0 = clopper_pearson_upper(0, 40, alpha / 40)
    assert expected == pytest.approx(math.log(1 - delta - stats.norm.sf(0.01)) - math.log(fnr0), rel=1e-12)
    assert epsilon_lower_bound(seen, delta, alpha, null_log_sf=stats.norm.logsf) == pytest.approx(expected, rel=1e-9)


def test_the_lower_bound_from_unseen_counts_counts_ties_as_false_positives():
    # unseen >= 2.0: 3 of 63 (2.0 itself included); >= 3.0: 1; >= 4.0: 0
    seen = np.array([3.0, 2.0, 4.0])
    unseen = np.concatenate([[2.5, 3.0, 2.0], np.linspace(-3.0, 1.5, 60)])
    delta, alpha = 1e-5, 0.3
    counts = {2.0: 3, 3.0: 1, 4.0: 0}
    expected = lower_bound(seen, delta, alpha, lambda t, a: clopper_pearson_upper(counts[t], 63, a))
    assert expected > 0
    assert epsilon_lower_bound(seen, delta, alpha, unseen) == pytest.approx(expected, rel=1e-9)


def test_the_lower_bound_from_many_unseen():
    rng = np.random.default_rng(5)
    seen, unseen = rng.normal(3.0, 1.0, 30), rng.normal(0.0, 1.0, 400)
    delta, alpha = 1e-5, 0.05

    def fpr(t, a):
        return clopper_pearson_upper(int((unseen >= t).sum()), len(unseen), a)

    expected = lower_bound(seen, delta, alpha, fpr)
    assert expected > 1
    assert epsilon_lower_bound(seen, delta, alpha, unseen) == pytest.approx(expected, rel=1e-9)


def test_one_threshold_is_bounded_at_alpha_itself():
    # FNR+ = 1 - alpha = 0.95, FPR = P[N(0, 1) >= 1.8] = 0.0359: log((0.05 - delta) / 0.0359) = 0.33, in (0, 1)
    expected = math.log(0.05 - 1e-5) - stats.norm.logsf(1.8)
    assert 0 < expected < 1
    assert epsilon_lower_bound(np.array([1.8]), 1e-5, 0.05, null_log_sf=stats.norm.logsf) == pytest.approx(
        expected, rel=1e-9)


def test_a_sample_that_certifies_nothing_gives_0():
    # inserted statistics below the null: every bound is negative or undefined
    assert epsilon_lower_bound(np.array([-3.0, -2.0]), 1e-5, 0.05, null_log_sf=stats.norm.logsf) == 0.0
    assert epsilon_lower_bound(np.array([-3.0, -2.0]), 1e-5, 0.05, np.array([0.0, 1.0, 2.0])) == 0.0


def test_no_inserted_statistics_give_0():
    assert epsilon_lower_bound(np.array([]), 1e-5, 0.05, null_log_sf=stats.norm.logsf) == 0.0
    assert epsilon_lower_bound(np.array([]), 1e-5, 0.05, np.array([0.0, 1.0])) == 0.0


def test_the_lower_bound_with_the_cosine_null():
    # the exact null of d = 3 is uniform: P[cos >= t] = (1 - t) / 2
    seen, delta, alpha = np.array([0.9, 0.99, 0.999, 0.5]), 1e-5, 0.1
    expected = lower_bound(seen, delta, alpha, lambda t, a: (1 - t) / 2)
    assert epsilon_lower_bound(seen, delta, alpha, null_log_sf=cosine_log_sf(3)) == pytest.approx(expected, rel=1e-9)
