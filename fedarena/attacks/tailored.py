"""AGR-tailored attacks (Shejwalkar & Houmansadr, "Manipulating the Byzantine", NDSS 2021, Section 4): the
malicious update m = mean + gamma p of ``optimized.py``, with gamma searched against one robust rule.

- ``tailored_krum``: the largest gamma with which Krum picks m (``target: krum``) or multi-Krum's set
  holds every malicious update (``target: multi_krum``, the default);
- ``tailored_bulyan``: the largest gamma with which Bulyan's iterated-Krum selection holds them all;
- ``tailored_median``: the gamma that pushes the coordinate-wise median (or trimmed mean, ``rule``) farthest
  from the honest mean.

``mode: paper`` reads Section 4 with fedarena's own rules (``methods.aggregators``: Krum's k = n - f - 2
neighbours, multi-Krum's m = n - f lowest scores, Bulyan's n - 2f picks); ``mode: reference`` computes
what the authors' notebooks compute (``our_attack_mkrum``, used against multi-Krum and Bulyan, with the
notebooks' ``multi_krum``; ``our_attack_median`` / ``our_attack_trmean``). The attackers assume f = the
round's malicious count, as the notebooks pass ``n_attackers``. Knowledge and directions as Min-Max.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np
import torch

from fedarena.attacks.base import ATTACKS, Effect, with_rows
from fedarena.attacks.checks import choice, positive
from fedarena.attacks.optimized import (
    DIRECTIONS,
    KNOWLEDGE,
    knowledge_effect,
    largest_gamma,
    perturbation,
    reference_rows,
)
from fedarena.datasets.base import FederatedDataset
from fedarena.methods.aggregators.base import coordinate_median, pairwise_sq_distances
from fedarena.methods.aggregators.krum import iterated_krum, krum_scores

MODES = ("paper", "reference")
TARGETS = ("krum", "multi_krum")
SPREAD_RULES = ("median", "trimmed_mean")
MKRUM_GAMMA_INIT = 3.0  # our_attack_mkrum's start (every notebook)
SPREAD_GAMMA_INIT = 10.0  # our_attack_median / our_attack_trmean's start (CIFAR-10; FEMNIST passes 5)

# chosen(updates [n, d], f) -> bool [n]: the rows a selection rule keeps
Chosen = Callable[[torch.Tensor, int], torch.Tensor]


def as_mask(n: int, rows: torch.Tensor) -> torch.Tensor:
    mask = torch.zeros(n, dtype=torch.bool)
    mask[rows.cpu()] = True
    return mask


def krum_chosen(updates: torch.Tensor, f: int) -> torch.Tensor:
    """Krum's pick (k = n - f - 2 neighbours, at least 1; ties: lowest index)."""
    scores = krum_scores(pairwise_sq_distances(updates), max(updates.shape[0] - f - 2, 1))
    return as_mask(updates.shape[0], torch.argmin(scores)[None])


def multi_krum_chosen(updates: torch.Tensor, f: int) -> torch.Tensor:
    """Multi-Krum's set: the n - f lowest Krum scores."""
    n = updates.shape[0]
    scores = krum_scores(pairwise_sq_distances(updates), max(n - f - 2, 1))
    return as_mask(n, torch.argsort(scores, stable=True)[: n - f])


def bulyan_chosen(updates: torch.Tensor, f: int) -> torch.Tensor:
    """Bulyan's selection: n - 2f updates by iterated Krum (``iterated_krum``)."""
    n = updates.shape[0]
    return as_mask(n, iterated_krum(pairwise_sq_distances(updates), f, max(n - 2 * f, 1)))


def notebook_multi_krum_chosen(updates: torch.Tensor, f: int, multi: bool = True) -> torch.Tensor:
    """The notebooks' ``multi_krum``: while more than 2f + 2 updates remain, score each remaining one by the
    sum of its r - 2 - f smallest squared distances to the remaining ones (its own 0 included), pick the
    lowest (ties: first) and remove it; ``multi`` false stops after the first pick."""
    n = updates.shape[0]
    sq = pairwise_sq_distances(updates)
    remaining, picked = list(range(n)), []
    while len(remaining) > 2 * f + 2:
        block = sq[remaining][:, remaining].sort(dim=1).values
        best = int(torch.argmin(block[:, : len(remaining) - 2 - f].sum(1)))
        picked.append(remaining.pop(best))
        if not multi:
            break
    return as_mask(n, torch.tensor(picked, dtype=torch.long))


def selection_fits(chosen: Chosen, updates: torch.Tensor, bad: torch.Tensor, m: torch.Tensor) -> bool:
    """Every malicious row of ``updates`` with m in their place is among the rows ``chosen`` keeps (f = the
    number of malicious rows); for Krum, whose choice is one row, that one is malicious."""
    f = int(bad.sum())
    kept = chosen(with_rows(updates, bad, m), f).to(bad.device)
    return bool(kept[bad].all()) if int(kept.sum()) > 1 else bool((kept & bad).any())


def selection_updates(updates: torch.Tensor, bad: torch.Tensor, gen: torch.Generator, *, chosen: Chosen,
                      direction: str, knowledge: str, gamma_init: float, tol: float) -> torch.Tensor:
    """Every malicious device sends m = mean + gamma p with the largest gamma the selection keeps
    (Algorithm 1's halving search, ``largest_gamma``)."""
    honest = reference_rows(updates, bad, knowledge).double()
    mean, push = honest.mean(0), perturbation(honest, direction)
    work = updates.double()
    gamma = largest_gamma(lambda g: selection_fits(chosen, work, bad, mean + g * push), gamma_init, tol)
    return with_rows(updates, bad, mean + gamma * push)


def spread(rule: str, updates: torch.Tensor, f: int) -> torch.Tensor:
    """The rule's output: coordinate-wise median, or the mean of the values left after trimming f from each
    end (the median where 2f >= n leaves nothing to average). The mean reads the kept values alone, so
    values past the trimmed ends change no bit of it (the notebooks' search compares outputs exactly)."""
    n = updates.shape[0]
    if rule == "median" or 2 * f >= n:
        return coordinate_median(updates)
    return updates.sort(dim=0).values[f : n - f].mean(0)


def merged_rows(ordered: torch.Tensor, m: torch.Tensor, copies: int, positions: range) -> torch.Tensor:
    """Rows ``positions`` of the column-wise sort of the honest rows (``ordered``: already sorted, [k, d]) together
    with ``copies`` rows equal to m [d]: the values a sort of all of them puts there (tied values are equal, so
    their order changes no value), found by counting, per column, the honest values below m. No NaN allowed."""
    k = ordered.shape[0]
    below = (ordered < m).sum(0)
    rows = [torch.where(p < below, ordered[min(p, k - 1)],
                        torch.where(p < below + copies, m, ordered[max(p - copies, 0)])) for p in positions]
    return torch.stack(rows)


def spread_of(rule: str, work: torch.Tensor, bad: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """m -> ``spread(rule, work with its bad rows replaced by m, f)``, the same values: the honest rows are sorted
    once per round and each m merged into them (``merged_rows``), instead of sorting every candidate round.
    Where a NaN is among the values, the sort of the whole."""
    n, f = work.shape[0], int(bad.sum())
    honest = work[~bad]

    def whole(m: torch.Tensor) -> torch.Tensor:
        return spread(rule, with_rows(work, bad, m), f)

    if honest.shape[0] == 0 or bool(honest.isnan().any()):
        return whole
    ordered = honest.sort(dim=0).values
    median = rule == "median" or 2 * f >= n
    positions = range((n - 1) // 2, n // 2 + 1) if median else range(f, n - f)

    def merged(m: torch.Tensor) -> torch.Tensor:
        if bool(m.isnan().any()):
            return whole(m)
        rows = merged_rows(ordered, m, f, positions)
        if not median:
            return rows.mean(0)
        return rows[0] if n % 2 else (rows[0] + rows[1]) / 2

    return merged


def notebook_deviation_gamma(deviation: Callable[[float], float], gamma_init: float, tol: float) -> float:
    """``our_attack_median`` / ``our_attack_trmean``'s search: the halving search in which gamma counts as a
    success when the deviation it gives exceeds that of the previous step (-1 before the first)."""
    gamma, step, found, previous = gamma_init, gamma_init, 0.0, -1.0
    while abs(found - gamma) > tol:
        loss = deviation(gamma)
        if previous < loss:
            found, gamma = gamma, gamma + step / 2
        else:
            gamma = gamma - step / 2
        step, previous = step / 2, loss
    return found


def best_deviation_gamma(deviation: Callable[[float], float], gamma_init: float, tol: float) -> float:
    """Section 4's objective, our reading: the halving search in which gamma counts as a success when its
    deviation is at least the best found so far (so the result is the best gamma the search visited)."""
    best = {"gamma": 0.0, "value": deviation(0.0)}

    def better(gamma: float) -> bool:
        value = deviation(gamma)
        if value >= best["value"]:
            best.update(gamma=gamma, value=value)
            return True
        return False

    largest_gamma(better, gamma_init, tol)
    return best["gamma"]


def spread_updates(updates: torch.Tensor, bad: torch.Tensor, gen: torch.Generator, *, rule: str, mode: str,
                   direction: str, knowledge: str, gamma_init: float, tol: float) -> torch.Tensor:
    """m = mean + gamma p with the gamma that moves the rule's output farthest from the honest mean."""
    honest = reference_rows(updates, bad, knowledge).double()
    mean, push = honest.mean(0), perturbation(honest, direction)
    rule_output = spread_of(rule, updates.double(), bad)

    def deviation(gamma: float) -> float:
        return float((rule_output(mean + gamma * push) - mean).norm())

    search = notebook_deviation_gamma if mode == "reference" else best_deviation_gamma
    return with_rows(updates, bad, mean + search(deviation, gamma_init, tol) * push)


def common(attack: str, direction: str, knowledge: str, mode: str, tol: float) -> dict:
    return {"direction": choice(attack, "direction", direction, DIRECTIONS),
            "knowledge": choice(attack, "knowledge", knowledge, KNOWLEDGE),
            "tol": positive(attack, "tol", tol), "mode": choice(attack, "mode", mode, MODES)}


def selection_effect(attack: str, dataset: FederatedDataset, chosen: Chosen, gamma_init: float, opts: dict) -> Effect:
    """The effect of an attack that searches the largest gamma a selection (``chosen``) keeps."""
    tamper = partial(selection_updates, chosen=chosen, gamma_init=positive(attack, "gamma_init", gamma_init), **opts)
    return knowledge_effect(dataset, tamper, opts["knowledge"])


@ATTACKS.register("tailored_krum")
def tailored_krum(dataset: FederatedDataset, malicious: np.ndarray, rng: np.random.Generator, *,
                  target: str = "multi_krum", mode: str = "paper", direction: str = "unit",
                  knowledge: str = "benign", gamma_init: float = MKRUM_GAMMA_INIT, tol: float = 1e-5) -> Effect:
    """NDSS 2021's attack on Krum / multi-Krum: the largest gamma (halving search from ``gamma_init``, the
    notebooks' 3) with which Krum picks m (``target: krum``) or multi-Krum keeps every malicious update
    (``multi_krum``); ``mode: reference`` selects as the notebooks' ``multi_krum`` (see the module)."""
    opts = common("tailored_krum", direction, knowledge, mode, tol)
    multi = choice("tailored_krum", "target", target, TARGETS) == "multi_krum"
    if opts.pop("mode") == "reference":
        chosen = partial(notebook_multi_krum_chosen, multi=multi)
    else:
        chosen = multi_krum_chosen if multi else krum_chosen
    return selection_effect("tailored_krum", dataset, chosen, gamma_init, opts)


@ATTACKS.register("tailored_bulyan")
def tailored_bulyan(dataset: FederatedDataset, malicious: np.ndarray, rng: np.random.Generator, *,
                    mode: str = "paper", direction: str = "unit", knowledge: str = "benign",
                    gamma_init: float = MKRUM_GAMMA_INIT, tol: float = 1e-5) -> Effect:
    """NDSS 2021's attack on Bulyan: the largest gamma with which Bulyan's iterated-Krum selection of
    n - 2f updates keeps every malicious one; ``mode: reference``: the notebooks' Bulyan experiments run
    ``our_attack_mkrum``, i.e. ``tailored_krum`` in reference mode."""
    opts = common("tailored_bulyan", direction, knowledge, mode, tol)
    chosen = notebook_multi_krum_chosen if opts.pop("mode") == "reference" else bulyan_chosen
    return selection_effect("tailored_bulyan", dataset, chosen, gamma_init, opts)


@ATTACKS.register("tailored_median")
def tailored_median(dataset: FederatedDataset, malicious: np.ndarray, rng: np.random.Generator, *,
                    rule: str = "median", mode: str = "paper", direction: str = "unit",
                    knowledge: str = "benign", gamma_init: float = SPREAD_GAMMA_INIT, tol: float = 1e-5) -> Effect:
    """NDSS 2021's attack on the coordinate-wise median and trimmed mean (``rule``, trimming f from each end):
    the gamma whose m moves the rule's output farthest from the honest mean; ``mode: paper`` keeps the best
    gamma the halving search visits, ``reference`` the notebooks' search (a step succeeds when the
    deviation grew since the previous step)."""
    opts = common("tailored_median", direction, knowledge, mode, tol)
    tamper = partial(spread_updates, rule=choice("tailored_median", "rule", rule, SPREAD_RULES),
                     gamma_init=positive("tailored_median", "gamma_init", gamma_init), **opts)
    return knowledge_effect(dataset, tamper, knowledge)
