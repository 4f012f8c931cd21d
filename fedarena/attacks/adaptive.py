"""A generic adaptive attack for any registered server rule: the attackers keep a direction and search the
magnitude that moves the rule's output farthest from the honest mean, calling the round's rule itself (the
idea of ByzFL's "optimal" attacks and of NDSS 2021's AGR-tailored objective, for a rule the attacker only
queries). It works unchanged for a rule a user registers (CONTRIBUTING's recipe).

Cost, per round: exactly ``calls`` evaluations of the rule (default 32): a geometric scan of 13 magnitudes
gamma_init x 2^-6 .. 2^6, then golden-section refinement between the scan's neighbours of its best one.
The rule sees the round's updates, weights and losses (with the pre-aggregators and f of the trial); a
method's own client weighting (TERM, q-FFL, AFL, FedTilt) is not simulated. Methods without a server rule
(local, MOCHA) are attacked through the plain mean.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import numpy as np
import torch

from fedarena.attacks.base import Effect, attack, with_rows
from fedarena.attacks.checks import choice, positive
from fedarena.attacks.optimized import (
    KNOWLEDGE,
    RULE_SEARCH_READS,
    knowledge_effect,
    perturbation,
    reference_rows,
)
from fedarena.datasets.base import FederatedDataset
from fedarena.errors import ConfigError

# m(gamma): unit, std, sign: mean + gamma p (NDSS 2021's perturbations; std is ALIE's direction);
# ipm: -gamma mean (Xie et al. 2020); sign_flip: -gamma times each malicious device's own honest update
DIRECTIONS = ("unit", "std", "sign", "ipm", "sign_flip")
SCAN_HALF_WIDTH = 6  # the scan's magnitudes: gamma_init x 2^-6 .. 2^6
SCAN_CALLS = 2 * SCAN_HALF_WIDTH + 1
INV_PHI = (math.sqrt(5) - 1) / 2


def malicious_rows(updates: torch.Tensor, bad: torch.Tensor, honest: torch.Tensor,
                   direction: str) -> Callable[[float], torch.Tensor]:
    """gamma -> the [number of bad, d] rows the attackers send at magnitude gamma."""
    count, mean = int(bad.sum()), honest.mean(0)
    if direction == "sign_flip":
        own = updates[bad].double()
        return lambda gamma: -gamma * own
    push = -mean if direction == "ipm" else perturbation(honest, direction)
    start = torch.zeros_like(mean) if direction == "ipm" else mean
    return lambda gamma: (start + gamma * push).expand(count, -1)


def golden_max(objective: Callable[[float], float], low: float, high: float, calls: int) -> tuple[float, float]:
    """(argmax, max) of ``objective`` on [low, high] by golden-section search with ``calls`` evaluations
    (>= 2): the bracket shrinks by 0.618 per evaluation after the first two."""
    c, d = high - INV_PHI * (high - low), low + INV_PHI * (high - low)
    fc, fd = objective(c), objective(d)
    for _ in range(calls - 2):
        if fc < fd:
            low, c, fc = c, d, fd
            d = low + INV_PHI * (high - low)
            fd = objective(d)
        else:
            high, d, fd = d, c, fc
            c = high - INV_PHI * (high - low)
            fc = objective(c)
    return (c, fc) if fc >= fd else (d, fd)


def strongest_gamma(objective: Callable[[float], float], gamma_init: float, calls: int) -> float:
    """The magnitude with the largest objective found with exactly ``calls`` evaluations: the geometric
    scan, then golden-section search between the scan's neighbours of its best magnitude."""
    grid = [gamma_init * 2.0**k for k in range(-SCAN_HALF_WIDTH, SCAN_HALF_WIDTH + 1)]
    values = [objective(g) for g in grid]
    best = int(np.argmax(values))
    low, high = grid[max(best - 1, 0)], grid[min(best + 1, len(grid) - 1)]
    gamma, value = golden_max(objective, low, high, calls - SCAN_CALLS)
    return gamma if value > values[best] else grid[best]


def adaptive_updates(updates: torch.Tensor, bad: torch.Tensor, gen: torch.Generator, *, rule, direction: str,
                     knowledge: str, gamma_init: float, calls: int) -> torch.Tensor:
    """The malicious rows at the magnitude that maximises ||rule(updates) - honest mean||."""
    honest = reference_rows(updates, bad, knowledge).double()
    rows, mean = malicious_rows(updates, bad, honest, direction), honest.mean(0)

    def with_gamma(gamma: float) -> torch.Tensor:
        return with_rows(updates, bad, rows(gamma))

    def objective(gamma: float) -> float:
        return float((rule(with_gamma(gamma)).double() - mean).norm())

    return with_gamma(strongest_gamma(objective, gamma_init, calls))


@attack("adaptive", device_reads=RULE_SEARCH_READS)
def adaptive(dataset: FederatedDataset, malicious: np.ndarray, rng: np.random.Generator, *, direction: str = "std",
             knowledge: str = "benign", gamma_init: float = 1.0, calls: int = 32) -> Effect:
    """Adaptive attack on the trial's own server rule (see the module): ``direction`` one of unit, std (ALIE's,
    the default), sign, ipm, sign_flip; ``gamma_init``: the centre of the magnitude scan (x 2^-6 .. 2^6);
    ``calls``: rule evaluations per round (>= 15). Knowledge as Min-Max."""
    if isinstance(calls, bool) or not isinstance(calls, int) or calls < SCAN_CALLS + 2:
        raise ConfigError(f"attack 'adaptive': calls must be a whole number >= {SCAN_CALLS + 2} (a scan of "
                          f"{SCAN_CALLS} magnitudes, then at least 2 refining ones), got {calls!r}")
    tamper = partial(adaptive_updates, direction=choice("adaptive", "direction", direction, DIRECTIONS),
                     knowledge=choice("adaptive", "knowledge", knowledge, KNOWLEDGE),
                     gamma_init=positive("adaptive", "gamma_init", gamma_init), calls=calls)
    return knowledge_effect(dataset, tamper, knowledge, needs_rule=True)
