"""Averages and norm/loss-based filters: mean, weighted_mean, clipping, k_norm, k_loss.

Variants follow Ditto's reference implementation (litian96/ditto, ``flearn/trainers_global/fedbase.py``
and ``flearn/utils/tf_utils.py``) as described in Ditto (Li et al., ICML 2021) Section 4.3 / Appendix D.
"""

from __future__ import annotations

import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators.base import (
    aggregator,
    ball_sensitivity,
    check_common,
    check_updates,
    mean_sensitivity,
    normalised_weights,
    pre_aggregator,
    require_losses,
    subset_mean,
    vector_median,
)

NORM_GUARD = 1e-10  # the reference's l2_clip divides by norm + 1e-10


@aggregator("mean", sensitivity=mean_sensitivity, sum_only=True)
def mean(
    updates: torch.Tensor, *, weights: torch.Tensor, losses: torch.Tensor | None, f: int
) -> torch.Tensor:
    """Uniform mean of the updates (Ditto Algorithm 2 / FedAvg as in Ditto: clients are sampled with
    probability proportional to their sample counts, and their updates are averaged uniformly)."""
    check_updates(updates, f)
    return updates.mean(dim=0)


@aggregator("weighted_mean", reads=("weights",), sensitivity=mean_sensitivity, sum_only=True)
def weighted_mean(
    updates: torch.Tensor, *, weights: torch.Tensor, losses: torch.Tensor | None, f: int
) -> torch.Tensor:
    """Weighted mean sum_i w_i u_i / sum_i w_i of the aggregation weights: FedAvg (McMahan et al. 2017) with
    uniform sampling, where the weights are the sample counts; under size-proportional sampling the weights
    are equal (sizes already counted by the sampling) and this is the uniform mean."""
    check_updates(updates, f)
    return normalised_weights(weights, updates) @ updates


def median_norm_factors(updates: torch.Tensor) -> torch.Tensor:
    """[n] factors min(1, threshold / (norm_i + 1e-10)), threshold = the median norm (np.median)."""
    norms = updates.norm(dim=1)
    threshold = vector_median(norms)
    return torch.where(norms > threshold, threshold / (norms + NORM_GUARD), torch.ones_like(norms))


@pre_aggregator("clip")
def clip_to_median_norm(updates: torch.Tensor) -> torch.Tensor:
    """Rescale every update whose L2 norm exceeds the median norm of the round down to that median
    (Ditto's 'clipping', reference ``l2_clip``: threshold = np.median of the norms, factor
    threshold / (norm + 1e-10); Sun et al. 2019 use a fixed threshold instead). Returns a new tensor."""
    return updates * median_norm_factors(updates)[:, None]


@aggregator("clipping", sensitivity=ball_sensitivity)
def clipping(
    updates: torch.Tensor, *, weights: torch.Tensor, losses: torch.Tensor | None, f: int
) -> torch.Tensor:
    """Norm clipping to the round's median update norm (``clip_to_median_norm``), then the uniform mean
    (Ditto Appendix D: 'we set the threshold to be the median of the gradient norms')."""
    n = check_updates(updates, f)
    return (median_norm_factors(updates) / n) @ updates


def check_keeps_one(n: int, f: int, **params) -> None:
    check_common(n, f)
    if f >= n:
        raise ConfigError(f"this rule keeps n - f updates and needs f < n, got n={n}, f={f}")


@aggregator("k_norm", check=check_keeps_one, sensitivity=ball_sensitivity)
def k_norm(
    updates: torch.Tensor, *, weights: torch.Tensor, losses: torch.Tensor | None, f: int
) -> torch.Tensor:
    """Drop the f updates with the largest L2 norms and average the other n - f uniformly (Ditto's 'k-norm',
    after the norm-based anomaly detector of Bagdasaryan et al. 2020; reference ``k_norm_average``)."""
    n = check_updates(updates, f)
    check_keeps_one(n, f)
    keep = torch.argsort(updates.norm(dim=1), stable=True)[: n - f]
    return subset_mean(updates, keep)


@aggregator("k_loss", check=check_keeps_one, reads=("losses",))
def k_loss(
    updates: torch.Tensor, *, weights: torch.Tensor, losses: torch.Tensor | None, f: int
) -> torch.Tensor:
    """Return the single update whose training loss at the global model is the (n - f)-th smallest, i.e. the
    (f + 1)-th largest (Ditto's 'k-loss', reference ``k_loss_average``: ``argsort(losses)[n - f - 1]``)."""
    n = check_updates(updates, f)
    check_keeps_one(n, f)
    order = torch.argsort(require_losses(losses, updates, "k_loss"), stable=True)
    return updates[order[n - f - 1]].clone()
