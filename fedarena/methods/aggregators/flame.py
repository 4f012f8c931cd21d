"""FLAME (Nguyen et al., "FLAME: Taming Backdoors in Federated Learning", USENIX Security 2022, Algorithm 1):
cosine clustering with HDBSCAN, adaptive clipping to the median norm, and adaptive Gaussian noise."""

from __future__ import annotations

import math

import numpy as np
import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators.backdoor_defenses import clip_factors, gaussian_noise
from fedarena.methods.aggregators.base import (
    RoundDraw,
    aggregator,
    check_common,
    check_updates,
    column_blocks,
    vector_median,
)
from fedarena.search_space import log_uniform


def check_flame(n: int, f: int, *, lam: float = 0.001) -> None:
    check_common(n, f)
    if n < 2:
        raise ConfigError(f"flame clusters the updates with HDBSCAN (min_cluster_size n // 2 + 1 >= 2) and needs "
                          f"n >= 2 updates, got n={n}")
    if not 0 <= lam < math.inf:
        raise ConfigError(f"flame needs a finite noise level lam >= 0 (noise std = lam * the median norm), "
                          f"got {lam}")


def cosine_distances(updates: torch.Tensor) -> np.ndarray:
    """[n, n] float64 cosine distances 1 - cos(u_i, u_j), from the Gram matrix summed block by block in
    float64 (no [n, d] copy). A zero update is at distance 1 from every other one (cosine 0)."""
    gram = torch.zeros(updates.shape[0], updates.shape[0], dtype=torch.float64, device=updates.device)
    for cols in column_blocks(updates):
        block = updates[:, cols].double()
        gram += block @ block.T
    inv = gram.diagonal().sqrt()
    inv = torch.where(inv > 0, 1 / inv, torch.zeros_like(inv))
    dist = (1 - gram * inv[:, None] * inv[None, :]).clamp(0, 2)
    dist = (dist + dist.T) / 2  # exactly symmetric, whatever the matmul's rounding
    dist.fill_diagonal_(0)
    return dist.cpu().numpy()


def majority_cluster(updates: torch.Tensor) -> torch.Tensor:
    """Indices of the updates HDBSCAN puts in the majority cluster (FLAME's dynamic clustering), all of them
    where it finds none. HDBSCAN (scikit-learn) on the precomputed cosine distances with min_cluster_size =
    n // 2 + 1 and min_samples = 1, as the paper, and allow_single_cluster=True, as FLPoison's FLAME (hdbscan
    package): with a minimum size above n / 2 the only possible cluster is the root, which HDBSCAN never
    selects otherwise (every point would be noise); so the cluster kept, if any, is unique. Its members are
    the points still in it when it dissolves: the outliers, and honest updates that leave the dense core
    before it dissolves, are labelled noise and dropped."""
    from sklearn.cluster import HDBSCAN  # imported on use: scikit-learn is slow to import

    n = updates.shape[0]
    labels = HDBSCAN(min_cluster_size=n // 2 + 1, min_samples=1, metric="precomputed",
                     allow_single_cluster=True, copy=True).fit(cosine_distances(updates)).labels_
    kept = np.flatnonzero(labels >= 0) if (labels >= 0).any() else np.arange(n)
    return torch.as_tensor(kept, dtype=torch.long, device=updates.device)


@aggregator("flame", check=check_flame, reads=("round",), search={"lam": log_uniform(1e-4, 1e-2)})
def flame(
    updates: torch.Tensor, *, weights: torch.Tensor, losses: torch.Tensor | None, f: int, lam: float = 0.001,
    round: RoundDraw | None = None,
) -> torch.Tensor:
    """FLAME (Nguyen et al., USENIX Security 2022, Algorithm 1) on the updates u_i = W_i - G (local model
    minus global model): (1) keep the majority cluster of HDBSCAN on the pairwise cosine distances of the
    updates (``majority_cluster``: min_cluster_size n // 2 + 1, min_samples 1; points labelled noise are
    dropped; if HDBSCAN finds no cluster, every update is kept). The paper's Algorithm 1 takes the cosine
    distances of the local models W_i; here they are those of the updates u_i, which is what the rule
    receives (the two differ in general: the models' directions are dominated by the global model G they
    all share, the updates' are not). (2) S = the median of the L2 norms of ALL n updates (np.median; the
    paper's e_i = ||G - W_i||), and every kept update is clipped to norm at most S. (3) The uniform mean of
    the kept clipped updates (the paper averages them uniformly; the weights are not read). (4) Gaussian
    noise N(0, sigma^2 I) with sigma = lam * S is added, lam = 0.001 by default (the paper's noise level for
    its image-classification tasks), drawn from the round's seed stream (``round``: trial seed and round),
    so a run is reproducible and resumable."""
    n = check_updates(updates, f)
    check_flame(n, f, lam=lam)
    bound = vector_median(updates.norm(dim=1))
    share = updates.new_zeros(n)
    kept = majority_cluster(updates)
    share[kept] = 1.0 / kept.numel()
    mean = (clip_factors(updates, bound) * share) @ updates
    return mean + gaussian_noise(mean, lam * float(bound), round) if lam > 0 else mean
