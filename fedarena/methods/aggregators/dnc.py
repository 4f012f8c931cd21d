"""Divide-and-Conquer (DnC; Shejwalkar & Houmansadr, NDSS 2021, Algorithm 2): spectral outlier removal on
random coordinate subsets."""

from __future__ import annotations

import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators.base import RoundDraw, aggregator, check_common, check_updates, subset_mean


def check_dnc(n: int, f: int, *, iters: int = 1, sub_dim: int = 10000, c: float = 1.0) -> None:
    check_common(n, f)
    if iters < 1 or sub_dim < 1 or c <= 0:
        raise ConfigError(f"dnc needs iters >= 1, sub_dim >= 1 and c > 0; got {iters}, {sub_dim}, {c}")
    if int(c * f) >= n:
        raise ConfigError(f"dnc removes int(c * f) = {int(c * f)} of n = {n} updates each iteration and needs "
                          "fewer than n")


def spectral_scores(block: torch.Tensor) -> torch.Tensor:
    """[n] squared projections of the centred rows on their top right singular vector, computed from the
    small n x n Gram matrix (its top eigenvector u gives the projections sigma * u)."""
    centred = block - block.mean(0)
    values, vectors = torch.linalg.eigh((centred @ centred.T).double())
    return (values[-1].clamp_min(0) * vectors[:, -1] ** 2).to(block.dtype)  # (sigma u_i)^2 = lambda u_i^2


def coordinates(d: int, sub_dim: int, gen: torch.Generator) -> torch.Tensor:
    """``sub_dim`` coordinates of d drawn without replacement; all of them, in order, when d <= sub_dim."""
    if d <= sub_dim:
        return torch.arange(d)
    return torch.randperm(d, generator=gen)[:sub_dim]


@aggregator("dnc", check=check_dnc, reads=("round",))
def dnc(updates: torch.Tensor, *, weights: torch.Tensor, losses: torch.Tensor | None, f: int, iters: int = 1,
        sub_dim: int = 10000, c: float = 1.0, round: RoundDraw | None = None) -> torch.Tensor:
    """DnC (NDSS 2021, Algorithm 2): ``iters`` times, take ``sub_dim`` random coordinates (all when
    d <= sub_dim), centre the updates on them, score each by its squared projection on the top right
    singular vector and drop the int(c * f) highest; average uniformly the updates kept by every iteration
    (if no update survives every iteration, those kept by the last one). The paper's values are iters = 1,
    c = 1 and sub_dim = 10,000. As Algorithm 2 (and Blades, FLPoison), the coordinates are drawn afresh at
    every aggregation, here from the round's seed stream (``round``: trial seed and round), so a run is
    reproducible and a resumed run draws the same ones."""
    n = check_updates(updates, f)
    check_dnc(n, f, iters=iters, sub_dim=sub_dim, c=c)
    gen = (round or RoundDraw.rows_in_order(n)).generator()
    kept = torch.ones(n, dtype=torch.bool, device=updates.device)
    for _ in range(iters):
        cols = coordinates(updates.shape[1], sub_dim, gen).to(updates.device)
        scores = spectral_scores(updates[:, cols])
        this_time = torch.ones_like(kept)
        this_time[torch.argsort(scores, descending=True, stable=True)[: int(c * f)]] = False
        kept = kept & this_time if bool((kept & this_time).any()) else this_time  # never an empty set
    return subset_mean(updates, torch.nonzero(kept).squeeze(1))
