"""Registries and shared tensor helpers of the server-side aggregation rules (defenses).

An aggregator is a pure function over the stacked flat client updates of one round:

    agg(updates[n, d], *, weights[n], losses[n] | None, f, **hyperparameters) -> [d]

``weights`` are the clients' sample counts, ``losses`` each client's training loss at the current global
model (only rules in ``NEEDS_LOSSES`` read them), ``f`` the number of malicious clients assumed among the n.
Each rule also has a feasibility check ``check(n, f, **hyperparameters)`` that raises ``ConfigError`` where
the rule is undefined; the rule runs it itself, and ``check_aggregator`` runs it before training.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from fedarena.params import ConfigError
from fedarena.registry import Registry

Aggregate = Callable[..., torch.Tensor]
Check = Callable[..., None]

AGGREGATORS: Registry[Aggregate] = Registry("aggregator")
PRE_AGGREGATORS: Registry[Callable[[torch.Tensor], torch.Tensor]] = Registry("pre-aggregator")
CHECKS: dict[str, Check] = {}
NEEDS_LOSSES: set[str] = set()

# Coordinate-wise rules process at most this many elements at once (bounds sort/topk memory at d ~ 1e6+).
CHUNK_ELEMENTS = 1 << 24


def no_check(n: int, f: int, **params) -> None:
    """Rules defined for every n >= 1 and f >= 0."""


def aggregator(name: str, *, check: Check = no_check, needs_losses: bool = False):
    """Register ``fn`` as aggregator ``name`` with its feasibility check."""

    def decorator(fn: Aggregate) -> Aggregate:
        AGGREGATORS.add(name, fn)
        CHECKS[name] = check
        if needs_losses:
            NEEDS_LOSSES.add(name)
        return fn

    return decorator


def check_common(n: int, f: int) -> None:
    if n < 1:
        raise ConfigError(f"an aggregator needs at least one update, got n={n}")
    if f < 0:
        raise ConfigError(f"the number of malicious clients f must be >= 0, got f={f}")


def check_updates(updates: torch.Tensor, f: int) -> int:
    """Validate the stacked updates and f; return n."""
    if updates.dim() != 2:
        raise ConfigError(f"updates must be a 2-D tensor [n, d], got shape {tuple(updates.shape)}")
    if not updates.is_floating_point():
        raise ConfigError(f"updates must be floating point, got {updates.dtype}")
    n = updates.shape[0]
    check_common(n, f)
    return n


def as_vector(values: torch.Tensor, like: torch.Tensor, what: str) -> torch.Tensor:
    """``values`` as a [n] tensor with the dtype and device of ``like``."""
    vec = torch.as_tensor(values).to(device=like.device, dtype=like.dtype).reshape(-1)
    if vec.shape[0] != like.shape[0]:
        raise ConfigError(f"{what} has {vec.shape[0]} entries for {like.shape[0]} updates")
    return vec


def require_losses(losses: torch.Tensor | None, updates: torch.Tensor, rule: str) -> torch.Tensor:
    if losses is None:
        raise ConfigError(f"aggregator {rule!r} needs each client's training loss at the global model; got none")
    return as_vector(losses, updates, "losses")


def columnwise(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """Apply a coordinate-wise reduction [n, c] -> [c] over column blocks to bound temporary memory."""
    n, d = x.shape
    if n * d <= CHUNK_ELEMENTS:
        return fn(x)
    width = max(1, CHUNK_ELEMENTS // n)
    return torch.cat([fn(x[:, start:start + width]) for start in range(0, d, width)])


def coordinate_median(x: torch.Tensor) -> torch.Tensor:
    """Coordinate-wise median of [n, d] -> [d]; for even n the mean of the two middle values (np.median)."""
    n = x.shape[0]
    lower = x.kthvalue((n + 1) // 2, dim=0).values
    if n % 2:
        return lower
    upper = x.kthvalue(n // 2 + 1, dim=0).values
    return (lower + upper) / 2


def vector_median(values: torch.Tensor) -> torch.Tensor:
    """Median of a 1-D tensor with the np.median convention (mean of the two middle values for even n)."""
    return coordinate_median(values.reshape(-1, 1))[0]


def pairwise_sq_distances(x: torch.Tensor) -> torch.Tensor:
    """[n, n] squared L2 distances via |a|^2 + |b|^2 - 2ab (after centring, to limit cancellation)."""
    centred = x - x.mean(dim=0)
    sq = (centred * centred).sum(dim=1)
    dist = (sq[:, None] + sq[None, :] - 2 * centred @ centred.T).clamp_min(0)
    dist.fill_diagonal_(0)
    return dist

