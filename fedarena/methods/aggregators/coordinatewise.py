"""Coordinate-wise rules: median and trimmed mean (Yin, Chen, Ramchandran, Bartlett, ICML 2018)."""

from __future__ import annotations

import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators.base import (
    aggregator,
    ball_sensitivity,
    check_common,
    check_updates,
    columnwise,
    coordinate_median,
)


# a coordinate's median moves by at most the change of the one replaced value there: 2 bounds in L2 overall
@aggregator("median", sensitivity=ball_sensitivity)
def median(
    updates: torch.Tensor, *, weights: torch.Tensor, losses: torch.Tensor | None, f: int
) -> torch.Tensor:
    """Coordinate-wise median (Yin et al. 2018; Ditto's 'median', reference ``median_average`` = np.median):
    for an even number of updates, the mean of the two middle values of each coordinate."""
    check_updates(updates, f)
    return coordinate_median(updates)


def trim_count(n: int, f: int, beta: float | None) -> int:
    """Values dropped at each end of every coordinate: f, or floor(beta * n) when beta is set."""
    return f if beta is None else int(beta * n)


def check_trimmed_mean(n: int, f: int, *, beta: float | None = None) -> None:
    check_common(n, f)
    if beta is not None and not 0 <= beta < 0.5:
        raise ConfigError(
            f"trimmed_mean: beta is the fraction trimmed at each end and must be in [0, 0.5), got {beta}"
        )
    trimmed = trim_count(n, f, beta)
    if 2 * trimmed >= n:
        raise ConfigError(
            f"trimmed_mean drops {trimmed} values at each end of every coordinate"
            f" and needs 2 * {trimmed} < n = {n}"
        )


def trimmed_mean_sensitivity(n: int, f: int, *, beta: float | None = None) -> float:
    """Replacing one value moves every order statistic of a coordinate the same way, so the kept sum moves by at most
    the replaced value's change: 2 bounds over the n - 2t values averaged."""
    return 2.0 / (n - 2 * trim_count(n, f, beta))


@aggregator("trimmed_mean", check=check_trimmed_mean, sensitivity=trimmed_mean_sensitivity)
def trimmed_mean(
    updates: torch.Tensor,
    *,
    weights: torch.Tensor,
    losses: torch.Tensor | None,
    f: int,
    beta: float | None = None,
) -> torch.Tensor:
    """Coordinate-wise trimmed mean (Yin et al. 2018): in every coordinate drop the t largest and t smallest
    values and average the remaining n - 2t uniformly; t = f, or floor(beta * n) when ``beta`` is set."""
    n = check_updates(updates, f)
    check_trimmed_mean(n, f, beta=beta)
    trimmed = trim_count(n, f, beta)
    if trimmed == 0:
        return updates.mean(dim=0)
    return columnwise(lambda block: trimmed_block_mean(block, trimmed), updates)


def trimmed_block_mean(block: torch.Tensor, trimmed: int) -> torch.Tensor:
    """Per row of a [c, n] block: (sum - the t largest - the t smallest) / (n - 2t), summed in float64
    (two top-k passes are several times cheaper than a sort for small t)."""
    total = block.sum(dim=1, dtype=torch.float64)
    high = block.topk(trimmed, dim=1).values.sum(dim=1, dtype=torch.float64)
    low = block.topk(trimmed, dim=1, largest=False).values.sum(dim=1, dtype=torch.float64)
    return ((total - high - low) / (block.shape[1] - 2 * trimmed)).to(block.dtype)
