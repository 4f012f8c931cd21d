"""SignGuard (Xu, Huang, Wang and Zhao, ICDCS 2022): norm filtering and sign-statistics clustering.

Variant: the authors' ``signguard_multiclass`` (JianXu95/SignGuard, ``aggregators/signguard.py``), the one the
paper evaluates, with its constants: a norm filter 0.1 < |g| / median < 3.0, a sign clustering by mean shift on
one random window of 10% of the coordinates, and the mean of the kept updates clipped to the median norm.
Version 2: the mean shift is ``meanshift`` (sklearn's algorithm, distances computed directly; version 1 called
sklearn, 14x slower a call); in rounding-boundary cases the two label a point differently (``meanshift``).
"""

from __future__ import annotations

import numpy as np
import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators.base import (
    RoundDraw,
    aggregator,
    check_common,
    check_updates,
    vector_median,
)
from fedarena.methods.aggregators.meanshift import estimate_bandwidth, mean_shift_labels

FEATURE_GUARD = 1e-8  # the authors divide each sign fraction by its maximum + 1e-8


def check_signguard(n: int, f: int, *, lower: float = 0.1, upper: float = 3.0, window: float = 0.1) -> None:
    check_common(n, f)
    if not 0 <= lower < upper:
        raise ConfigError(f"signguard keeps updates with lower < norm / median norm < upper and needs 0 <= lower "
                          f"< upper; got lower={lower}, upper={upper}")
    if not 0 < window <= 1:
        raise ConfigError(f"signguard's window is the fraction of coordinates its sign statistics read, in (0, 1]; "
                          f"got {window}")


def sign_features(updates: torch.Tensor, start: int, width: int) -> np.ndarray:
    """[n, 3]: each update's fractions of positive, zero and negative coordinates in the window, each divided by
    its largest value over the updates (+1e-8)."""
    signs = torch.sign(updates[:, start:start + width]).cpu().numpy()
    fractions = np.stack([(signs == s).sum(axis=1) / width for s in (1.0, 0.0, -1.0)], axis=1)
    return fractions / (fractions.max(axis=0) + FEATURE_GUARD)


def largest_cluster(features: np.ndarray) -> np.ndarray:
    """Rows of the most populous mean-shift cluster (flat kernel, bandwidth estimated at quantile 0.5 as the
    authors, bin seeding, orphans left out: ``meanshift``, sklearn's MeanShift step for step); ties go to the
    lower label. A bandwidth of 0 (at least half the rows share one feature vector) keeps the largest group of
    identical rows."""
    bandwidth = estimate_bandwidth(features, quantile=0.5, n_samples=50)
    if bandwidth <= 0:
        _, inverse, counts = np.unique(features, axis=0, return_inverse=True, return_counts=True)
        return np.flatnonzero(inverse.reshape(-1) == np.argmax(counts))
    labels = mean_shift_labels(features, bandwidth)
    counts = np.bincount(labels[labels >= 0])
    return np.flatnonzero(labels == np.argmax(counts)) if counts.size else np.arange(0)


def signguard_selection(updates: torch.Tensor, *, f: int, round: RoundDraw | None = None, lower: float = 0.1,
                        upper: float = 3.0, window: float = 0.1) -> torch.Tensor:
    """The rows SignGuard keeps: norm within (lower, upper) times the median norm (np.median) and in the largest
    sign cluster. The window's start is drawn from the round's seed stream, uniform over [0, d - width) as the
    authors' ``torch.randint`` (width = int(window * d), at least 1)."""
    clean = torch.nan_to_num(updates, nan=0.0)
    return _kept(clean, clean.norm(dim=1), f=f, round=round, lower=lower, upper=upper, window=window)


def _kept(clean: torch.Tensor, norms: torch.Tensor, *, f: int, round: RoundDraw | None, lower: float, upper: float,
          window: float) -> torch.Tensor:
    """``signguard_selection`` of updates without NaN (``clean``) and their norms."""
    n, d = clean.shape
    check_signguard(n, f, lower=lower, upper=upper, window=window)
    median = vector_median(norms)
    by_norm = ((norms > lower * median) & (norms < upper * median)).cpu().numpy()
    width = max(1, int(window * d))
    gen = (round or RoundDraw.rows_in_order(n)).generator()
    start = int(torch.randint(0, d - width, (1,), generator=gen)) if d > width else 0
    by_sign = np.zeros(n, dtype=bool)
    by_sign[largest_cluster(sign_features(clean, start, width))] = True
    return torch.from_numpy(np.flatnonzero(by_norm & by_sign))


@aggregator("signguard", check=check_signguard, reads=("round",), selects=signguard_selection, version=2)
def signguard(updates: torch.Tensor, *, weights: torch.Tensor, losses: torch.Tensor | None, f: int,
              round: RoundDraw | None = None, lower: float = 0.1, upper: float = 3.0,
              window: float = 0.1) -> torch.Tensor:
    """SignGuard (Xu et al., ICDCS 2022): the mean of the kept updates (``signguard_selection``), each clipped to the round's median
    norm (the lower middle value for an even count, as the authors' ``torch.median``). f is not read. No update
    kept: a zero update (the model stays; the authors' mean over no row is NaN)."""
    check_updates(updates, f)
    clean = torch.nan_to_num(updates, nan=0.0)
    norms = clean.norm(dim=1)
    kept = _kept(clean, norms, f=f, round=round, lower=lower, upper=upper, window=window)
    if kept.numel() == 0:
        return updates.new_zeros(updates.shape[1])
    factors = torch.where(norms > 0, norms.clamp(max=norms.median()) / norms, torch.zeros_like(norms))
    coeff = updates.new_zeros(updates.shape[0])
    coeff[kept.to(updates.device)] = factors[kept.to(updates.device)] / kept.numel()
    return coeff @ clean
