"""The estimators of one-shot empirical privacy estimation (Andrew et al., ICLR 2024, "One-shot Empirical Privacy
Estimation for Federated Learning"): the epsilon between two fitted Gaussians (the estimate), its bootstrap interval,
and a lower bound at a stated confidence (the evidence against a claim).

- **Estimate.** A statistic of the inserted canaries is fitted by N(m1, s1^2), that of the unseen ones by
  N(m2, s2^2); the estimate is the smallest epsilon at which the pair is (epsilon, delta)-indistinguishable in both
  directions. The privacy loss log p(x) / q(x) is a quadratic in x, so the set where it exceeds epsilon is bounded by
  its roots and its mass under either Gaussian is a sum of normal tails (Steinke 2022, Section 5); equal variances
  give the Gaussian mechanism of sensitivity |m1 - m2| / s (Balle and Wang, ICML 2018). It is a point estimate:
  fitting the two variances apart raises it at small delta wherever they differ by chance.
- **Lower bound** (Jagielski et al., NeurIPS 2020): for each threshold t, a test "inserted if the statistic >= t"
  has false positive and false negative rates whose one-sided upper confidence bounds FPR+ and FNR+ give
  epsilon >= max(log((1 - delta - FNR+) / FPR+), log((1 - delta - FPR+) / FNR+)); the bound is the largest over
  the thresholds at the inserted canaries' values. The rates' bounds are Clopper-Pearson's (exact coverage; the
  authors' Jeffreys intervals are approximate) at alpha divided by the number of thresholds (Bonferroni: the
  largest of many bounds is a bound too; without it, ideal statistics at mu = 2 certified 10.006 where the truth
  is 9.997). The false positive rate comes from the unseen statistics, or from the exact null distribution where
  one is known (a random direction's cosine with a fixed vector: the final model's change).
- **Equal-variance estimate.** One Gaussian shift fitted with the null's variance: mu = (mean of the inserted -
  mean of the unseen) / the unseen's standard deviation, and the epsilon of the Gaussian mechanism of that
  sensitivity (Balle and Wang 2018) at delta. Where the mechanism is Gaussian and a canary's statistic is the null's
  shifted (full participation, the final model: the sufficient statistic), it estimates the exact add/remove
  epsilon with no variance ratio to fit by chance. Its interval is the shift's Student-t interval (the inserted
  mean's error from their own spread, the unseen mean's and standard deviation's by the delta method) mapped
  through the epsilon, which rises with |mu|; its lower end is a one-sided confidence statement, which the flag
  reads, resting on the Gaussian shift model (the thresholded bound above rests on none).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy import optimize, special, stats

FLAT = 1e-12  # |quadratic coefficient| below which the loss is taken as linear (equal variances)
MAX_EPSILON = 700.0  # e^eps overflows a float beyond ~709: an estimate past this is reported infinite


def _cdf(x: float) -> float:
    return float(special.ndtr(x))  # the standard normal CDF (scipy.stats' is ~50x slower a call)


def _tail_masses(m1: float, s1: float, m2: float, s2: float, eps: float) -> tuple[float, float]:
    """(P[L > eps], Q[L > eps]) for P = N(m1, s1^2), Q = N(m2, s2^2) and the privacy loss L = log p / q."""
    a = 0.5 / s2**2 - 0.5 / s1**2
    b = m1 / s1**2 - m2 / s2**2
    c = 0.5 * (m2 / s2) ** 2 - 0.5 * (m1 / s1) ** 2 + math.log(s2 / s1) - eps
    if abs(a) < FLAT * max(1.0 / s1**2, 1.0 / s2**2):  # linear: b x + c > 0
        if b == 0:
            return (1.0, 1.0) if c > 0 else (0.0, 0.0)
        edge, sign = -c / b, (1.0 if b > 0 else -1.0)  # the mass above the edge (b > 0) or below it
        return _cdf(sign * (m1 - edge) / s1), _cdf(sign * (m2 - edge) / s2)
    disc = b * b - 4 * a * c
    if disc <= 0:  # the quadratic keeps a's sign everywhere
        return (1.0, 1.0) if a > 0 else (0.0, 0.0)
    low, high = sorted(((-b - math.sqrt(disc)) / (2 * a), (-b + math.sqrt(disc)) / (2 * a)))

    def mass(m: float, s: float) -> float:
        if a > 0:  # outside the roots: two tails, each computed as a tail (no 1 - inside cancellation)
            return _cdf((low - m) / s) + _cdf((m - high) / s)
        return max(_cdf((high - m) / s) - _cdf((low - m) / s), 0.0)

    return mass(m1, s1), mass(m2, s2)


def _delta(m1: float, s1: float, m2: float, s2: float, eps: float) -> float:
    """The hockey-stick divergence at ``eps`` of the pair, the larger of both directions."""
    def one_way(ma, sa, mb, sb):
        p, q = _tail_masses(ma, sa, mb, sb, eps)
        return p - math.exp(eps) * q

    return max(one_way(m1, s1, m2, s2), one_way(m2, s2, m1, s1))


def two_gaussian_epsilon(m1: float, s1: float, m2: float, s2: float, delta: float) -> float:
    """The smallest epsilon >= 0 at which N(m1, s1^2) and N(m2, s2^2) are (epsilon, delta)-indistinguishable
    (NaN where a standard deviation is not positive and finite; infinity past ``MAX_EPSILON``)."""
    if not all(math.isfinite(v) for v in (m1, s1, m2, s2)) or s1 <= 0 or s2 <= 0:
        return math.nan
    gap = lambda eps: _delta(m1, s1, m2, s2, eps) - delta  # noqa: E731 (decreasing in eps)
    if gap(0.0) <= 0:
        return 0.0
    high = 1.0
    while gap(high) > 0:
        if high >= MAX_EPSILON:
            return math.inf
        high = min(2.0 * high, MAX_EPSILON)
    low = 0.0 if high == 1.0 else (high / 2 if high < MAX_EPSILON else MAX_EPSILON / 2)
    return float(optimize.brentq(gap, low, high, xtol=1e-9, rtol=1e-10))


def fitted_epsilon(seen: np.ndarray, unseen: np.ndarray, delta: float) -> float:
    """The epsilon between the Gaussians fitted to the two samples (mean and standard deviation, ddof 1)."""
    return two_gaussian_epsilon(float(np.mean(seen)), float(np.std(seen, ddof=1)), float(np.mean(unseen)),
                                float(np.std(unseen, ddof=1)), delta)


def bootstrap_interval(seen: np.ndarray, unseen: np.ndarray, delta: float, resamples: int, confidence: float,
                       rng: np.random.Generator) -> tuple[float, float]:
    """The percentile interval of ``fitted_epsilon`` over ``resamples`` resamplings of both samples with
    replacement (NaN, NaN without resamples); an infinite end stays infinite."""
    if resamples < 1:
        return math.nan, math.nan
    estimates = np.array([fitted_epsilon(rng.choice(seen, len(seen)), rng.choice(unseen, len(unseen)), delta)
                          for _ in range(resamples)])
    estimates = estimates[~np.isnan(estimates)]
    if len(estimates) == 0:
        return math.nan, math.nan
    tail = (1.0 - confidence) / 2
    return (float(np.quantile(estimates, tail, method="lower")),  # order statistics: no inf - inf interpolation
            float(np.quantile(estimates, 1 - tail, method="higher")))


def rate_upper(count: np.ndarray, total: int, alpha: float) -> np.ndarray:
    """One-sided upper confidence bounds, at level 1 - alpha, of binomial rates with ``count`` of ``total``
    (Clopper-Pearson: the Beta(count + 1, total - count) quantile; 1 where every trial succeeded)."""
    count = np.asarray(count, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        bound = stats.beta.ppf(1 - alpha, count + 1, np.maximum(total - count, 1e-300))
    return np.where(count >= total, 1.0, bound)


def cosine_log_sf(dim: int) -> Callable[[np.ndarray], np.ndarray]:
    """log P[cos >= t] for the cosine of a uniformly random unit direction in R^dim with any fixed vector: cos^2 is
    Beta(1/2, (dim - 1)/2), so for t >= 0 the tail is I_{1 - t^2}((dim - 1)/2, 1/2) / 2."""
    def log_sf(t: np.ndarray) -> np.ndarray:
        t = np.clip(np.asarray(t, dtype=np.float64), -1.0, 1.0)
        upper = 0.5 * special.betainc((dim - 1) / 2, 0.5, 1.0 - t * t)
        with np.errstate(divide="ignore"):
            return np.where(t >= 0, np.log(upper), np.log1p(-upper))

    return log_sf


def epsilon_lower_bound(seen: np.ndarray, delta: float, alpha: float, unseen: np.ndarray | None = None,
                        null_log_sf: Callable[[np.ndarray], np.ndarray] | None = None) -> float:
    """The largest epsilon the thresholded tests certify, each rate's bound at level 1 - alpha jointly over the
    thresholds (see the module): false positives from ``null_log_sf`` (an exact null) where given, else from the
    ``unseen`` statistics."""
    thresholds = np.sort(np.asarray(seen, dtype=np.float64))
    alpha = alpha / max(len(thresholds), 1)  # Bonferroni over the thresholds
    false_negatives = np.arange(len(thresholds))  # the seen below each threshold (the threshold's own counts)
    fnr = rate_upper(false_negatives, len(thresholds), alpha)
    if null_log_sf is not None:
        log_fpr = null_log_sf(thresholds)
    else:
        ordered = np.sort(np.asarray(unseen, dtype=np.float64))
        false_positives = len(ordered) - np.searchsorted(ordered, thresholds, side="left")
        log_fpr = np.log(rate_upper(false_positives, len(ordered), alpha))
    with np.errstate(divide="ignore", invalid="ignore"):
        first = np.log(1.0 - delta - fnr) - log_fpr
        second = np.log(1.0 - delta - np.exp(log_fpr)) - np.log(fnr)
        bounds = np.fmax(first, second)
    bounds = bounds[~np.isnan(bounds)]
    return float(max(0.0, bounds.max())) if len(bounds) else 0.0


def equal_variance_shift(seen: np.ndarray, unseen: np.ndarray) -> float:
    """mu: the inserted statistics' mean above the unseen ones', in the unseen ones' standard deviation (ddof 1);
    NaN where that is not positive and finite (no spread to measure a shift in)."""
    scale = float(np.std(unseen, ddof=1))
    if not 0 < scale < math.inf:
        return math.nan
    return float((np.mean(seen) - np.mean(unseen)) / scale)


def gaussian_shift_epsilon(mu: float, delta: float) -> float:
    """The epsilon at ``delta`` of the Gaussian mechanism of sensitivity |mu| over noise 1 (NaN for NaN; the
    divergence is taken both ways, so a shift down is a shift up)."""
    return two_gaussian_epsilon(mu, 1.0, 0.0, 1.0, delta)


def equal_variance_epsilon(seen: np.ndarray, unseen: np.ndarray, delta: float) -> float:
    """The equal-variance estimate (see the module): the Gaussian mechanism's epsilon at the fitted shift."""
    return gaussian_shift_epsilon(equal_variance_shift(seen, unseen), delta)


def shift_standard_error(seen: np.ndarray, unseen: np.ndarray) -> float:
    """The standard error of ``equal_variance_shift``: the inserted mean's (their own spread, not assumed equal),
    the unseen mean's, and the unseen standard deviation's through mu (delta method: sd(s) / s ~ (2 (U - 1))^-1/2)."""
    scale, mu = float(np.std(unseen, ddof=1)), equal_variance_shift(seen, unseen)
    if math.isnan(mu):
        return math.nan
    return float(math.sqrt(np.var(seen, ddof=1) / (len(seen) * scale**2) + 1.0 / len(unseen)
                           + mu**2 / (2 * (len(unseen) - 1))))


def equal_variance_interval(seen: np.ndarray, unseen: np.ndarray, delta: float,
                            confidence: float) -> tuple[float, float]:
    """The two-sided interval at ``confidence`` of the equal-variance estimate: the shift's Student-t interval
    (K - 1 degrees of freedom: the inserted mean's error dominates) mapped through the epsilon of |mu|; its lower
    end alone holds at (1 + confidence) / 2 (one-sided)."""
    mu, error = equal_variance_shift(seen, unseen), shift_standard_error(seen, unseen)
    if math.isnan(mu) or math.isnan(error):
        return math.nan, math.nan
    half = float(stats.t.ppf((1 + confidence) / 2, len(seen) - 1)) * error
    low, high = mu - half, mu + half
    nearest = 0.0 if low <= 0 <= high else min(abs(low), abs(high))  # the epsilon is lowest where |mu| is
    return gaussian_shift_epsilon(nearest, delta), gaussian_shift_epsilon(max(abs(low), abs(high)), delta)
