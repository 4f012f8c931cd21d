"""Pre-aggregators for heterogeneous devices: nearest-neighbour mixing, bucketing, adaptive robust clipping.

Classic robust rules take an honest device whose data differ from the others' for an attacker. These three run
before any rule (``aggregator: {name: krum, pre: [nnm]}``) and make it work under heterogeneity; their contract
(``base.PreAggregatorEntry``): ``fn(updates [n, d], *, f, round, **options) -> [m, d]``, the trial's f and the
round's draw passed where the function declares them.

Variants: as ByzFL (LPD-EPFL/byzfl, ``byzfl/aggregators/preaggregators.py``, the authors' library for NNM and
ARC); docs/fidelity.md says each choice.
"""

from __future__ import annotations

import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators.base import RoundDraw, pairwise_sq_distances, pre_aggregator


def check_nnm(n: int, f: int) -> None:
    if not 0 <= f < n:
        raise ConfigError(f"pre-aggregator 'nnm' mixes each update with its n - f nearest neighbours and needs "
                          f"0 <= f < n; got n={n}, f={f}")


@pre_aggregator("nnm", check=check_nnm)
def nearest_neighbour_mixing(updates: torch.Tensor, *, f: int) -> torch.Tensor:
    """NNM (Allouah et al., AISTATS 2023, "Fixing by Mixing", Algorithm 1): every update replaced by the mean of
    its n - f nearest neighbours in L2 distance, itself included (distance 0). Ties in distance go to the
    lower row (a stable sort; ByzFL's argpartition leaves them unspecified)."""
    n = updates.shape[0]
    check_nnm(n, f)
    nearest = torch.argsort(pairwise_sq_distances(updates), dim=1, stable=True)[:, : n - f]
    mixing = updates.new_zeros(n, n).scatter_(1, nearest, 1.0 / (n - f))
    return mixing @ updates


def check_bucketing(n: int, f: int, *, s: int = 2) -> None:
    if isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= n:
        raise ConfigError(f"pre-aggregator 'bucketing' needs a bucket size s with 1 <= s <= n (the round's {n} "
                          f"updates); got s={s!r}")


def bucket_count(n: int, *, s: int = 2) -> int:
    """ceil(n / s): the rule after bucketing sees this many rows (its feasibility is checked on it)."""
    return -(-n // s)


def bucket_members(n: int, round: RoundDraw | None, *, s: int = 2) -> list[torch.Tensor]:
    """The rows of each bucket: a permutation of the n rows drawn from the round's seed stream (the same after a
    resume and on every device), cut into consecutive buckets of s, the last one holding what remains."""
    check_bucketing(n, 0, s=s)
    gen = (round or RoundDraw.rows_in_order(n)).generator()
    order = torch.randperm(n, generator=gen)
    return list(order.split(s))


@pre_aggregator("bucketing", check=check_bucketing, members=bucket_members, rows=bucket_count)
def bucketing(updates: torch.Tensor, *, round: RoundDraw | None = None, s: int = 2) -> torch.Tensor:
    """Bucketing (Karimireddy, He and Jaggi, ICLR 2022, Algorithm 1): the updates shuffled at random and
    averaged in buckets of s (the last bucket, when s does not divide n, averages the rest, as ByzFL); the rule
    then runs over the ceil(n / s) bucket means with the trial's f (one attacker spoils at most one bucket)."""
    members = bucket_members(updates.shape[0], round, s=s)
    return torch.stack([updates[rows].mean(dim=0) for rows in members])


def check_arc(n: int, f: int) -> None:
    if not 0 <= f < n:  # k <= n / 2 < n for every such f; the paper's guarantee assumes 2f < n
        raise ConfigError(f"pre-aggregator 'arc' clips floor(2 f (n - f) / n) of the n updates and needs "
                          f"0 <= f < n; got n={n}, f={f}")


def arc_clipped_count(n: int, f: int) -> int:
    """k = floor(2 (f / n) (n - f)): how many of the largest updates ARC clips."""
    return (2 * f * (n - f)) // n


@pre_aggregator("arc", check=check_arc)
def adaptive_robust_clipping(updates: torch.Tensor, *, f: int) -> torch.Tensor:
    """ARC (Allouah, Guerraoui, Gupta, Jellouli, Rizk and Stephan, NeurIPS 2024, Algorithm 1): the k =
    floor(2 (f / n) (n - f)) updates of largest L2 norm are scaled down to the norm of the (k + 1)-th largest;
    the others pass as they are. Equal norms: the later row counts as larger (ByzFL's stable ascending sort).
    f = 0 leaves the updates unchanged."""
    n = updates.shape[0]
    check_arc(n, f)
    k = arc_clipped_count(n, f)
    if k == 0:
        return updates.clone()
    norms = updates.norm(dim=1)
    ascending = torch.argsort(norms, stable=True)
    threshold = norms[ascending[n - k - 1]]
    factors = torch.ones_like(norms)
    clipped = ascending[n - k:]
    factors[clipped] = torch.where(norms[clipped] > threshold, threshold / norms[clipped], 1.0)
    return updates * factors[:, None]
