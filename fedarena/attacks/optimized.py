"""Optimisation-based model poisoning: Min-Max and Min-Sum (Shejwalkar & Houmansadr, "Manipulating the
Byzantine: Optimizing Model Poisoning Attacks and Defenses for Federated Learning", NDSS 2021, the
AGR-agnostic attacks) and Fang et al.'s attack on trimmed mean / median ("Local Model Poisoning Attacks to
Byzantine-Robust Federated Learning", USENIX Security 2020, full knowledge).

Each reads a reference set of honest updates of the round: ``knowledge="benign"`` (default, full knowledge:
the benign devices' updates, as both papers' strongest setting; in a round without any, the malicious
devices' own honest updates, as ALIE and IPM here), ``"benign_strict"`` (full knowledge only: the trial
refuses, before training, a level at which a round could hold no benign update) or ``"malicious"``
(partial knowledge: the malicious devices' own honest updates, computed on their clean-label data).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np
import torch

from fedarena.attacks.base import Effect, attack
from fedarena.attacks.checks import choice, number, positive
from fedarena.datasets.base import FederatedDataset
from fedarena.errors import ConfigError

KNOWLEDGE = ("benign", "benign_strict", "malicious")
DIRECTIONS = ("unit", "std", "sign")  # the NDSS paper's perturbations: inverse unit vector / std / sign


def knowledge_reads(*, knowledge: str = "benign", **_) -> tuple[str, ...]:
    """What an attack whose reference is ``reference_rows`` reads (``attack(device_reads=...)``): the round's honest
    updates, unless its knowledge is the malicious devices' own."""
    return () if knowledge == "malicious" else ("honest_updates",)


# an attack that searches against the server's rule evaluates it on the round's rows, the honest ones included,
# whatever its knowledge (tailored, adaptive)
RULE_SEARCH_READS = ("honest_updates",)


def reference_rows(updates: torch.Tensor, bad: torch.Tensor, knowledge: str) -> torch.Tensor:
    """The honest updates the attacker knows (see the module docstring)."""
    full = knowledge != "malicious" and bool((~bad).any())
    return updates[~bad] if full else updates[bad]


def perturbation(honest: torch.Tensor, direction: str) -> torch.Tensor:
    """The NDSS paper's grad_p: -mean/||mean|| ("unit"), -std ("std", per coordinate) or -sign(mean)."""
    mean = honest.mean(0)
    if direction == "unit":
        return -mean / mean.norm().clamp_min(1e-12)
    if direction == "std":
        return -honest.std(0, correction=1 if honest.shape[0] > 1 else 0)
    return -torch.sign(mean)


def largest_gamma(fits: Callable[[float], bool], gamma_init: float, tol: float) -> float:
    """The NDSS paper's Algorithm 1 search, as the authors' released notebooks run it (``our_attack_dist``,
    ``our_attack_score``): from gamma = gamma_init with step
    gamma_init, move gamma up or down by half the step as ``fits(gamma)`` holds or not and halve the step,
    until the last fitting gamma is within tol of gamma (it ends at 0 when nothing in (0, 2 gamma_init)
    fits)."""
    gamma, step, found = gamma_init, gamma_init, 0.0
    while abs(found - gamma) > tol:
        if fits(gamma):
            found = gamma
            gamma += step / 2
        else:
            gamma -= step / 2
        step /= 2
    return found


# fits(honest, mean, push) -> (gamma -> bool): whether the candidate m = mean + gamma push passes the attack's test;
# what depends on the honest updates and the line alone is computed once per round, so each of the search's ~20
# candidates costs O(n), not O(n d)
Fits = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], Callable[[float], bool]]


def distances_along(honest: torch.Tensor, mean: torch.Tensor, push: torch.Tensor):
    """(a [n], b [n], c): ||mean + gamma push - g_i||^2 = a_i + 2 gamma b_i + gamma^2 c for every gamma."""
    diff = mean - honest
    return (diff * diff).sum(1), diff @ push, push @ push


def min_max_fits(honest: torch.Tensor, mean: torch.Tensor, push: torch.Tensor) -> Callable[[float], bool]:
    """max_i ||m - g_i|| <= max_{i,j} ||g_i - g_j|| (squared on both sides)."""
    bound = float(torch.cdist(honest, honest).max()) ** 2
    a, b, c = (part.cpu().numpy() for part in distances_along(honest, mean, push))
    return lambda gamma: bool((a + 2 * gamma * b + gamma * gamma * c).max() <= bound)


def score_fits(honest: torch.Tensor, mean: torch.Tensor, push: torch.Tensor,
               reduce: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[float], bool]:
    """Min-Sum's test: m's score sum_i ||m - g_i||^2 is at most ``reduce`` of the honest scores
    sum_j ||g_i - g_j||^2."""
    bound = float(reduce((torch.cdist(honest, honest) ** 2).sum(1)))
    a, b, c = distances_along(honest, mean, push)
    total, slope, curve = float(a.sum()), float(b.sum()), honest.shape[0] * float(c)
    return lambda gamma: total + 2 * gamma * slope + gamma * gamma * curve <= bound


def min_sum_fits(honest: torch.Tensor, mean: torch.Tensor, push: torch.Tensor) -> Callable[[float], bool]:
    """The paper's condition (Section 4, Min-Sum): sum_i ||m - g_i||^2 <= max_i sum_j ||g_i - g_j||^2."""
    return score_fits(honest, mean, push, torch.max)


def min_sum_fits_reference(honest: torch.Tensor, mean: torch.Tensor, push: torch.Tensor) -> Callable[[float], bool]:
    """The authors' notebooks' condition (``our_attack_score``, every copy): sum_i ||m - g_i||^2 <=
    min_i sum_j ||g_i - g_j||^2, the smallest honest score: a stricter bound, so a smaller gamma."""
    return score_fits(honest, mean, push, torch.min)


# gamma_init of the authors' notebooks: 10 in the CIFAR-10 ones, 50 in the FEMNIST ones; 10 elsewhere
NOTEBOOK_GAMMA_INIT = {"femnist": 50.0, "femnist_skewed": 50.0}
DEFAULT_GAMMA_INIT = 10.0


def gamma_start(name: str, dataset: FederatedDataset, gamma_init: float | None) -> float:
    """``gamma_init`` as given, or the notebooks' start for the dataset (``NOTEBOOK_GAMMA_INIT``)."""
    if gamma_init is None:
        return NOTEBOOK_GAMMA_INIT.get(dataset.name, DEFAULT_GAMMA_INIT)
    return positive(name, "gamma_init", gamma_init)


def agr_agnostic_updates(updates: torch.Tensor, bad: torch.Tensor, gen: torch.Generator, *, fits: Fits, direction: str,
                         knowledge: str, gamma_init: float, tol: float) -> torch.Tensor:
    """Every malicious device sends m = mean + gamma grad_p with the largest gamma that ``fits``."""
    honest = reference_rows(updates, bad, knowledge).double()
    mean, push = honest.mean(0), perturbation(honest, direction)
    gamma = largest_gamma(fits(honest, mean, push), gamma_init, tol)
    out = updates.clone()
    out[bad] = (mean + gamma * push).to(updates.dtype)
    return out


def fang_updates(updates: torch.Tensor, bad: torch.Tensor, gen: torch.Generator, *, b: float,
                 knowledge: str) -> torch.Tensor:
    """Fang et al. 2020's full-knowledge attack on trimmed mean and median, per coordinate j, in the space of
    the updates: s_j = sign of the honest mean; where s_j > 0 each malicious device sends a value drawn
    uniformly from [min_j / b, min_j] (min_j > 0) or [b min_j, min_j] (min_j <= 0), below every honest
    value; where s_j <= 0, from [max_j, b max_j] (max_j > 0) or [max_j, max_j / b] (max_j <= 0)."""
    honest = reference_rows(updates, bad, knowledge)
    low, high = honest.min(0).values, honest.max(0).values
    below = torch.stack([torch.where(low > 0, low / b, b * low), low])  # [2, d]: interval ends
    above = torch.stack([high, torch.where(high > 0, b * high, high / b)])
    # a huge b overflows b x an extreme to +-inf, and -inf + u x inf is NaN: the ends saturate at half the dtype's
    # largest value, where the interval's width is still finite (a no-op for every b x extreme within it)
    half = torch.finfo(updates.dtype).max / 2
    ends = torch.where(honest.mean(0) > 0, below, above).clamp(-half, half)
    u = torch.rand((int(bad.sum()), updates.shape[1]), generator=gen, device=updates.device, dtype=updates.dtype)
    out = updates.clone()
    out[bad] = ends[0] + u * (ends[1] - ends[0])
    return out


def _knowledge(attack: str, knowledge: str) -> str:
    return choice(attack, "knowledge", knowledge, KNOWLEDGE)


def knowledge_effect(dataset: FederatedDataset, tamper, knowledge: str, **more) -> Effect:
    """A model attack's effect; ``knowledge="benign_strict"`` makes the trial refuse levels at which a round
    could hold no benign update."""
    return Effect(dataset, tamper=tamper, needs_benign=knowledge == "benign_strict", **more)


def _agr_agnostic(name: str, fits: Fits, dataset: FederatedDataset, direction: str, knowledge: str,
                  gamma_init: float | None, tol: float) -> Effect:
    tamper = partial(agr_agnostic_updates, fits=fits, direction=choice(name, "direction", direction, DIRECTIONS),
                     knowledge=_knowledge(name, knowledge), gamma_init=gamma_start(name, dataset, gamma_init),
                     tol=positive(name, "tol", tol))
    return knowledge_effect(dataset, tamper, knowledge)


@attack("min_max", device_reads=knowledge_reads)
def min_max(dataset: FederatedDataset, malicious: np.ndarray, rng: np.random.Generator, *, direction: str = "unit",
            knowledge: str = "benign", gamma_init: float | None = None, tol: float = 1e-5) -> Effect:
    """Min-Max (NDSS 2021): the malicious update is no farther from any honest update than the two farthest
    honest updates are from each other (the paper and the authors' notebooks agree). ``direction``: unit
    (default), std or sign; ``gamma_init``, ``tol``: the gamma search of Algorithm 1, ``gamma_init`` null =
    the notebooks' start for the dataset (50 on FEMNIST, 10 otherwise, as on CIFAR-10)."""
    return _agr_agnostic("min_max", min_max_fits, dataset, direction, knowledge, gamma_init, tol)


@attack("min_sum", device_reads=knowledge_reads)
def min_sum(dataset: FederatedDataset, malicious: np.ndarray, rng: np.random.Generator, *, direction: str = "unit",
            knowledge: str = "benign", gamma_init: float | None = None, tol: float = 1e-5,
            mode: str = "paper") -> Effect:
    """Min-Sum (NDSS 2021): the malicious update's sum of squared distances to the honest updates (its score)
    is at most the largest honest update's score (``mode: paper``, the paper's equation) or the smallest
    (``mode: reference``, the authors' notebooks; a smaller gamma). Other options as ``min_max``."""
    fits = {"paper": min_sum_fits, "reference": min_sum_fits_reference}
    return _agr_agnostic("min_sum", fits[choice("min_sum", "mode", mode, tuple(fits))], dataset, direction, knowledge,
                         gamma_init, tol)


@attack("fang", device_reads=knowledge_reads)
def fang(dataset: FederatedDataset, malicious: np.ndarray, rng: np.random.Generator, *, b: float = 2.0,
         knowledge: str = "benign") -> Effect:
    """Fang et al. (USENIX Security 2020) on trimmed mean / median (see ``fang_updates``); ``b`` > 1 (the
    paper's 2) bounds how far past the honest extremes the malicious values go."""
    if number("fang", "b", b) <= 1:  # a NaN, an infinity or a string is refused first, as every other setting's
        raise ConfigError(f"attack 'fang': b must be > 1, got {b!r}")
    tamper = partial(fang_updates, b=float(b), knowledge=_knowledge("fang", knowledge))
    return knowledge_effect(dataset, tamper, knowledge)
