"""The tensor side of differential privacy: clipping, Gaussian noise and the adaptive clip bound. Pure functions
over stacked updates [n, d]; every draw comes from the generator the caller passes (a seeded stream)."""

from __future__ import annotations

import math

import torch


def clip_rows(updates: torch.Tensor, bound: float) -> torch.Tensor:
    """Each row scaled to L2 norm at most ``bound``: u * min(1, bound / ||u||) (a zero row stays zero), a row with
    a non-finite entry zeroed first (TFF's zeroing): every round then releases the mechanism's output, and
    whether a round is kept never depends on one device's value."""
    updates = zero_non_finite(updates)
    norms = updates.norm(dim=1)
    factors = torch.where(norms > bound, bound / norms.clamp_min(torch.finfo(updates.dtype).tiny), 1.0)
    return updates * factors.to(updates.dtype)[:, None]


def zero_non_finite(updates: torch.Tensor) -> torch.Tensor:
    """``updates`` [n, d] with every row that holds a NaN or an infinity replaced by zeros (the rows as they are,
    no copy, where all are finite: the usual case costs one reduction)."""
    if math.isfinite(float(updates.sum())):  # a NaN or an infinity anywhere makes the sum non-finite
        return updates
    return torch.where(torch.isfinite(updates).all(dim=1, keepdim=True), updates, torch.zeros_like(updates))


def gaussian(like: torch.Tensor, std: float, generator: torch.Generator) -> torch.Tensor:
    """N(0, std^2) noise of ``like``'s shape, dtype and device (zeros where std is 0, drawing nothing)."""
    if std == 0:
        return torch.zeros_like(like)
    return torch.randn(like.shape, generator=generator, device=like.device, dtype=like.dtype) * std


def local_privatize(updates: torch.Tensor, clip: float, noise_multiplier: float,
                    generator: torch.Generator) -> torch.Tensor:
    """Local DP: every row clipped to ``clip`` plus its own N(0, (noise_multiplier clip)^2 I) noise."""
    clipped = clip_rows(updates, clip)
    return clipped + gaussian(clipped, noise_multiplier * clip, generator)


def unclipped_count(updates: torch.Tensor, bound: float) -> int:
    """How many rows have L2 norm at most ``bound`` (the bits b_i of adaptive clipping; a non-finite row counts
    as the zero row it is clipped to)."""
    return int((zero_non_finite(updates).norm(dim=1) <= bound).sum())


def next_clip(bound: float, unclipped: int, n: int, target_quantile: float, clip_lr: float, count_noise: float,
              generator: torch.Generator) -> float:
    """Andrew et al. (NeurIPS 2021), geometric update: the noisy fraction of unclipped updates
    b = (sum_i b_i + N(0, count_noise^2)) / n moves the bound to bound * exp(-clip_lr (b - target_quantile)), so
    it settles where a ``target_quantile`` share of the norms lie below it."""
    noise = float(torch.randn((), generator=generator, device=generator.device, dtype=torch.float64)) * count_noise
    fraction = (unclipped + noise) / n
    return bound * math.exp(-clip_lr * (fraction - target_quantile))
