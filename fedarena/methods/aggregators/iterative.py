"""Iterative robust centres: the geometric median (RFA) and centered clipping."""

from __future__ import annotations

import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators.base import (
    aggregator,
    ball_sensitivity,
    check_common,
    check_updates,
    coordinate_median,
    normalised_weights,
    row_sq_distances,
    vector_median,
)

CENTRES = ("median", "zero")


def check_geometric_median(n: int, f: int, *, iters: int = 100, eps: float = 1e-6, tol: float = 1e-6) -> None:
    check_common(n, f)
    if iters < 1 or eps <= 0 or tol < 0:
        raise ConfigError(f"geometric_median needs iters >= 1, eps > 0, tol >= 0; got {iters}, {eps}, {tol}")


def weiszfeld_objective(
    updates: torch.Tensor, alpha: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum_i alpha_i ||v - x_i||, the distances)."""
    dist = row_sq_distances(updates, v).sqrt()
    return alpha @ dist, dist


@aggregator("geometric_median", check=check_geometric_median, reads=("weights",), sensitivity=ball_sensitivity)
def geometric_median(
    updates: torch.Tensor,
    *,
    weights: torch.Tensor,
    losses: torch.Tensor | None,
    f: int,
    iters: int = 100,
    eps: float = 1e-6,
    tol: float = 1e-6,
) -> torch.Tensor:
    """RFA (Pillutla, Kakade, Harchaoui 2019): weighted geometric median argmin_v sum_i alpha_i ||v - x_i||,
    alpha = the aggregation weights normalised (sample counts under uniform sampling, as RFA; equal under
    size-proportional sampling, which already counted the sizes), by the smoothed Weiszfeld algorithm: start at the weighted mean, then
    beta_i = alpha_i / max(eps, ||v - x_i||), v <- sum_i beta_i x_i / sum_i beta_i, for at most ``iters``
    iterations, stopping once the objective improves by at most tol * objective. (RFA's own runs use a few
    iterations; the default here converges on typical inputs.)"""
    n = check_updates(updates, f)
    check_geometric_median(n, f, iters=iters, eps=eps, tol=tol)
    alpha = normalised_weights(weights, updates)
    v = alpha @ updates
    objective, dist = weiszfeld_objective(updates, alpha, v)
    for _ in range(iters):
        beta = alpha / dist.clamp_min(eps)
        v = (beta / beta.sum()) @ updates
        previous = objective
        objective, dist = weiszfeld_objective(updates, alpha, v)
        if float(previous - objective) <= tol * float(objective):
            break
    return v


def check_centered_clipping(
    n: int, f: int, *, tau: float | None = None, iters: int = 1, center: str = "median"
) -> None:
    check_common(n, f)
    if (tau is not None and tau <= 0) or iters < 1:
        raise ConfigError(f"centered_clipping needs tau > 0 (or null: the round's median distance) and "
                          f"iters >= 1; got tau={tau}, iters={iters}")
    if center not in CENTRES:
        raise ConfigError(f"centered_clipping: unknown center {center!r}; allowed: {', '.join(CENTRES)}")


@aggregator("centered_clipping", check=check_centered_clipping)
def centered_clipping(
    updates: torch.Tensor,
    *,
    weights: torch.Tensor,
    losses: torch.Tensor | None,
    f: int,
    tau: float | None = None,
    iters: int = 1,
    center: str = "median",
) -> torch.Tensor:
    """Centered clipping (Karimireddy, He, Jaggi, ICML 2021): v <- v + (1/n) sum_i (x_i - v) min(1, tau /
    ||x_i - v||), ``iters`` times (the paper uses one). The paper starts from the previous round's aggregate
    (server momentum); this stateless variant starts from the round's coordinate-wise median
    (center="median", default) or from zero (center="zero", i.e. the unchanged global model). Uniform weights
    as in the paper. tau None (default, scale-free): the median of the distances ||x_i - v|| from the
    starting centre, so the farther half of the updates is clipped whatever the model's scale; a number
    fixes tau in the units of the updates (an absolute tau that exceeds every distance clips nothing)."""
    n = check_updates(updates, f)
    check_centered_clipping(n, f, tau=tau, iters=iters, center=center)
    v = coordinate_median(updates) if center == "median" else updates.new_zeros(updates.shape[1])
    radius = vector_median(row_sq_distances(updates, v).sqrt()) if tau is None else tau
    for _ in range(iters):
        scale = (radius / row_sq_distances(updates, v).sqrt().clamp_min(1e-30)).clamp(max=1.0)
        v = v + (scale @ updates - scale.sum() * v) / n  # v + mean_i scale_i (x_i - v)
    return v
