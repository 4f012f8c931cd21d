"""Is a column's bold entry significantly better than its runner-up?

Each table column bolds the entry with the best score (e.g. Ditto's mean - std). With several seeds per
cell the ordering can be noise, so the best entry is compared with the runner-up (the second-best score
of the column) by Welch's t-test (two-sided, unequal variances) on the per-seed scores: mean, standard
deviation over seeds and seed count of each. The ordering is significant when p < ``ALPHA``; where it is
not, the table marks the bold entry with ``NOT_SIGNIFICANT`` and a note names the runner-up. A test needs
at least two seeds in both cells; otherwise the verdict is "untested" (p is NaN).

Welch's test rather than overlapping confidence intervals: two 95% intervals can overlap although the
difference is significant, so "no overlap" would call too few orderings significant. Welch's test rather
than a paired test: the cells of a column need not share their seeds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

ALPHA = 0.05
NOT_SIGNIFICANT = "‡"


@dataclass(frozen=True)
class Scored:
    """One entry of a column: its row, mean score, std of the score over seeds and seed count."""

    row: str
    mean: float
    sd: float
    n: int


@dataclass(frozen=True)
class Verdict:
    """The best entry of a column against the runner-up; ``p`` is NaN when untested."""

    best: str
    runner_up: str
    p: float

    @property
    def tested(self) -> bool:
        return bool(np.isfinite(self.p))

    @property
    def significant(self) -> bool:
        return self.tested and self.p < ALPHA


def welch_p(a: Scored, b: Scored) -> float:
    """Two-sided p-value of Welch's t-test from summary statistics; NaN with fewer than two seeds in a
    cell. Two cells without spread are significantly different exactly when their means differ."""
    if a.n < 2 or b.n < 2 or not (np.isfinite(a.sd) and np.isfinite(b.sd)):
        return float("nan")
    if a.sd == 0 and b.sd == 0:
        return 0.0 if a.mean != b.mean else 1.0
    result = stats.ttest_ind_from_stats(a.mean, a.sd, a.n, b.mean, b.sd, b.n, equal_var=False)
    return float(result.pvalue)


def column_verdict(entries: list[Scored]) -> Verdict | None:
    """The verdict of one column (None with fewer than two entries with a finite score). A tie for the best
    score compares the tied entries: equal means give p = 1, never significant."""
    ranked = sorted((e for e in entries if np.isfinite(e.mean)), key=lambda e: e.mean, reverse=True)
    if len(ranked) < 2:
        return None
    best, runner_up = ranked[0], ranked[1]
    return Verdict(best.row, runner_up.row, welch_p(best, runner_up))
