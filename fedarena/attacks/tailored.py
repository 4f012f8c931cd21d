"""AGR-tailored attacks (Shejwalkar & Houmansadr, "Manipulating the Byzantine", NDSS 2021, Section 4): the
malicious update m = mean + gamma p of ``optimized.py``, with gamma searched against one robust rule.

- ``tailored_krum``: the largest gamma with which Krum picks m (``target: krum``) or multi-Krum's set
  holds the malicious updates (``target: multi_krum``); by default (``target: null``) the server's own rule
  where it runs Krum or multi-Krum (the attack tailored to Krum is tailored to the Krum it meets), multi-Krum
  elsewhere;
- ``tailored_bulyan``: the largest gamma with which Bulyan's iterated-Krum selection holds them;
- ``tailored_median``: the gamma that pushes the coordinate-wise median (or trimmed mean, ``rule``) farthest
  from the honest mean.

The rule is simulated exactly as the server runs it (``attacks.base.RoundRule``): where the server's rule is
the attack's target, the attack checks the server's own rule (its f, variant, hyperparameters,
pre-aggregators and draw) on candidates in the server's dtype, with the round's real number of malicious
copies. Where the server runs another rule (a grid row the attack also meets), the attack simulates its own
target with the trial's f: ``mode: paper`` with fedarena's rules (Krum's k = n - f - 2 neighbours,
multi-Krum's n - f lowest scores, Bulyan's n - 2f picks), ``mode: reference`` as the authors' notebooks
(``our_attack_mkrum``, used against multi-Krum and Bulyan, with the notebooks' ``multi_krum``;
``our_attack_median`` / ``our_attack_trmean``). A selection holds the malicious updates when it keeps every
one of them, or, where it keeps fewer rows than there are copies, only malicious ones.

Defaults (null): the perturbation is ``unit`` in paper mode (Min-Max's and Min-Sum's default, so that rows
compare the tailoring, not the direction) and the notebooks' in reference mode: ``std`` (CIFAR-10 notebooks)
or ``sign`` (FEMNIST ones); the search starts where the notebooks start: ``our_attack_mkrum`` from 3
(CIFAR-10) or 20 (FEMNIST); ``our_attack_median`` / ``our_attack_trmean`` from 10 (CIFAR-10) or 5 (FEMNIST).
Knowledge as Min-Max.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np
import torch

from fedarena.attacks.base import Effect, RoundRule, attack, with_rows
from fedarena.attacks.checks import choice, positive
from fedarena.attacks.optimized import (
    DIRECTIONS,
    KNOWLEDGE,
    RULE_SEARCH_READS,
    knowledge_effect,
    largest_gamma,
    perturbation,
    reference_rows,
)
from fedarena.datasets.base import FederatedDataset
from fedarena.methods.aggregators.base import coordinate_median
from fedarena.methods.aggregators.krum import (
    iterated_krum,
    krum_scores,
    lowest_first,
    quantised,
    sq_distances,
)

MODES = ("paper", "reference")
TARGETS = ("krum", "multi_krum")
SPREAD_RULES = ("median", "trimmed_mean")
FEMNIST = ("femnist", "femnist_skewed")
MKRUM_GAMMA_INIT = (3.0, 20.0)  # our_attack_mkrum's start: CIFAR-10 notebooks, FEMNIST ones
SPREAD_GAMMA_INIT = (10.0, 5.0)  # our_attack_median / our_attack_trmean's start: CIFAR-10, FEMNIST
NOTEBOOK_DIRECTIONS = ("std", "sign")  # the deviation the CIFAR-10 notebooks and the FEMNIST ones use

# selection(updates [n, d]) -> bool [n]: the rows a selection rule keeps
Selection = Callable[[torch.Tensor], torch.Tensor]


def as_mask(n: int, rows: torch.Tensor) -> torch.Tensor:
    mask = torch.zeros(n, dtype=torch.bool)
    mask[rows.cpu()] = True
    return mask


def krum_chosen(updates: torch.Tensor, f: int) -> torch.Tensor:
    """Krum's pick (k = n - f - 2 neighbours, at least 1; ties of quantised scores: lowest index)."""
    scores = krum_scores(sq_distances(updates), max(updates.shape[0] - f - 2, 1))
    return as_mask(updates.shape[0], lowest_first(scores)[:1])


def multi_krum_chosen(updates: torch.Tensor, f: int) -> torch.Tensor:
    """Multi-Krum's set: the n - f lowest Krum scores."""
    n = updates.shape[0]
    scores = krum_scores(sq_distances(updates), max(n - f - 2, 1))
    return as_mask(n, lowest_first(scores)[: max(n - f, 1)])


def bulyan_chosen(updates: torch.Tensor, f: int) -> torch.Tensor:
    """Bulyan's selection: n - 2f updates by iterated Krum (``iterated_krum``)."""
    n = updates.shape[0]
    return as_mask(n, iterated_krum(sq_distances(updates), f, max(n - 2 * f, 1)))


def notebook_multi_krum_chosen(updates: torch.Tensor, f: int, multi: bool = True) -> torch.Tensor:
    """The notebooks' ``multi_krum``: while more than 2f + 2 updates remain, score each remaining one by the
    sum of its r - 2 - f smallest squared distances to the remaining ones (its own 0 included), pick the
    lowest (ties of ``quantised`` scores, as Krum's: first) and remove it; ``multi`` false stops after the first
    pick. Where n <= 2f + 2 it picks nothing."""
    n = updates.shape[0]
    sq = sq_distances(updates)
    remaining, picked = list(range(n)), []
    while len(remaining) > 2 * f + 2:
        block = sq[remaining][:, remaining].sort(dim=1).values
        best = int(lowest_first(quantised(block[:, : len(remaining) - 2 - f].sum(1)))[0])
        picked.append(remaining.pop(best))
        if not multi:
            break
    return as_mask(n, torch.tensor(picked, dtype=torch.long))


def holds_malicious(kept: torch.Tensor, bad: torch.Tensor) -> bool:
    """Whether a selection holds the malicious rows: the one row a single pick keeps is malicious; a larger
    selection keeps every malicious row, or (fewer places than copies) only malicious ones."""
    kept, bad = kept.cpu(), bad.cpu()
    count = int(kept.sum())
    if count == 0:
        return False
    if count == 1:
        return bool((kept & bad).any())
    return bool(kept[bad].all()) or not bool((kept & ~bad).any())


def selection_updates(updates: torch.Tensor, bad: torch.Tensor, gen: torch.Generator, *, rule: RoundRule,
                      targets: tuple[str, ...], simulate: Callable[[torch.Tensor, int], torch.Tensor], direction: str,
                      knowledge: str, gamma_init: float, tol: float) -> torch.Tensor:
    """Every malicious device sends m = mean + gamma p with the largest gamma the selection keeps (Algorithm
    1's halving search, ``largest_gamma``): the server's own selection where its rule is one of ``targets``,
    else ``simulate`` with the trial's f; candidates in the server's dtype."""
    honest = reference_rows(updates, bad, knowledge).double()
    mean, push = honest.mean(0), perturbation(honest, direction)
    if rule.name in targets and rule.aggregator is not None and rule.aggregator.selects:
        selection: Selection = rule.kept
    else:
        selection = partial(simulate, f=rule.f(int(bad.sum())))
    gamma = largest_gamma(lambda g: holds_malicious(selection(with_rows(updates, bad, mean + g * push)), bad),
                          gamma_init, tol)
    return with_rows(updates, bad, mean + gamma * push)


def spread(rule: str, updates: torch.Tensor, t: int) -> torch.Tensor:
    """The rule's output: coordinate-wise median, or the mean of the values left after trimming t from each
    end (the median where 2t >= n leaves nothing to average). The mean reads the kept values alone, so
    values past the trimmed ends change no bit of it (the notebooks' search compares outputs exactly)."""
    n = updates.shape[0]
    if rule == "median" or 2 * t >= n:
        return coordinate_median(updates)
    return updates.sort(dim=0).values[t : n - t].mean(0)


def merged_rows(ordered: torch.Tensor, m: torch.Tensor, copies: int, positions: range) -> torch.Tensor:
    """Rows ``positions`` of the column-wise sort of the honest rows (``ordered``: already sorted, [k, d]) together
    with ``copies`` rows equal to m [d]: the values a sort of all of them puts there (tied values are equal, so
    their order changes no value), found by counting, per column, the honest values below m. No NaN allowed."""
    k = ordered.shape[0]
    below = (ordered < m).sum(0)
    rows = [torch.where(p < below, ordered[min(p, k - 1)],
                        torch.where(p < below + copies, m, ordered[max(p - copies, 0)])) for p in positions]
    return torch.stack(rows)


def spread_of(rule: str, work: torch.Tensor, bad: torch.Tensor, t: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """m -> ``spread(rule, work with its bad rows replaced by m, t)`` (m cast to the rows' dtype), the same
    values: the honest rows are sorted once per round and each m merged into them (``merged_rows``), instead
    of sorting every candidate round. Where a NaN is among the values, the sort of the whole."""
    n, copies = work.shape[0], int(bad.sum())
    honest = work[~bad]

    def whole(m: torch.Tensor) -> torch.Tensor:
        return spread(rule, with_rows(work, bad, m), t)

    if honest.shape[0] == 0 or bool(honest.isnan().any()):
        return whole
    ordered = honest.sort(dim=0).values
    median = rule == "median" or 2 * t >= n
    positions = range((n - 1) // 2, n // 2 + 1) if median else range(t, n - t)

    def merged(m: torch.Tensor) -> torch.Tensor:
        m = m.to(work.dtype)
        if bool(m.isnan().any()):
            return whole(m)
        rows = merged_rows(ordered, m, copies, positions)
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


def spread_updates(updates: torch.Tensor, bad: torch.Tensor, gen: torch.Generator, *, rule: RoundRule, which: str,
                   mode: str, direction: str, knowledge: str, gamma_init: float, tol: float) -> torch.Tensor:
    """m = mean + gamma p with the gamma that moves the rule's output farthest from the honest mean: the
    server's own rule where it is ``which``, else ``which`` simulated with the trial's f."""
    honest = reference_rows(updates, bad, knowledge).double()
    mean, push = honest.mean(0), perturbation(honest, direction)
    if rule.name == which:
        def output(m: torch.Tensor) -> torch.Tensor:
            return rule(with_rows(updates, bad, m))
    else:
        output = spread_of(which, updates, bad, rule.f(int(bad.sum())))

    def deviation(gamma: float) -> float:
        return float((output(mean + gamma * push).double() - mean).norm())

    search = notebook_deviation_gamma if mode == "reference" else best_deviation_gamma
    return with_rows(updates, bad, mean + search(deviation, gamma_init, tol) * push)


def notebook_setting(dataset: FederatedDataset, attack: str, mode: str, direction: str | None,
                     gamma_init: float | None, starts: tuple[float, float]) -> tuple[str, float]:
    """(direction, gamma_init) as given, or where null: ``unit`` (paper mode) or the notebooks' direction for
    the dataset (reference mode), and the notebooks' start for the dataset (see the module)."""
    femnist = dataset.name in FEMNIST
    if direction is None:
        direction = NOTEBOOK_DIRECTIONS[femnist] if mode == "reference" else "unit"
    start = starts[femnist] if gamma_init is None else gamma_init
    return choice(attack, "direction", direction, DIRECTIONS), positive(attack, "gamma_init", start)


def common(attack: str, dataset: FederatedDataset, direction: str | None, knowledge: str, mode: str,
           gamma_init: float | None, tol: float, starts: tuple[float, float]) -> dict:
    mode = choice(attack, "mode", mode, MODES)
    direction, start = notebook_setting(dataset, attack, mode, direction, gamma_init, starts)
    return {"direction": direction, "gamma_init": start, "knowledge": choice(attack, "knowledge", knowledge, KNOWLEDGE),
            "tol": positive(attack, "tol", tol), "mode": mode}


def selection_effect(dataset: FederatedDataset, targets: tuple[str, ...], simulate, opts: dict) -> Effect:
    """The effect of an attack that searches the largest gamma a selection keeps."""
    tamper = partial(selection_updates, targets=targets, simulate=simulate, **opts)
    return knowledge_effect(dataset, tamper, opts["knowledge"], needs_rule=True)


@attack("tailored_krum", version=4, device_reads=RULE_SEARCH_READS)
def tailored_krum(dataset: FederatedDataset, malicious: np.ndarray, rng: np.random.Generator, *,
                  target: str | None = None, mode: str = "paper", direction: str | None = None,
                  knowledge: str = "benign", gamma_init: float | None = None, tol: float = 1e-5) -> Effect:
    """NDSS 2021's attack on Krum / multi-Krum: the largest gamma (halving search from ``gamma_init``) with
    which Krum picks m (``target: krum``) or multi-Krum's set holds the malicious updates (``multi_krum``);
    against the server's own rule where it is the target, else simulated (``mode``; see the module). Null
    targets whichever of the two the server runs, and simulates multi-Krum against any other rule."""
    opts = common("tailored_krum", dataset, direction, knowledge, mode, gamma_init, tol, MKRUM_GAMMA_INIT)
    targets = TARGETS if target is None else (choice("tailored_krum", "target", target, TARGETS),)
    multi = targets != ("krum",)
    if opts.pop("mode") == "reference":
        simulate = partial(notebook_multi_krum_chosen, multi=multi)
    else:
        simulate = multi_krum_chosen if multi else krum_chosen
    return selection_effect(dataset, targets, simulate, opts)


@attack("tailored_bulyan", version=3, device_reads=RULE_SEARCH_READS)
def tailored_bulyan(dataset: FederatedDataset, malicious: np.ndarray, rng: np.random.Generator, *,
                    mode: str = "paper", direction: str | None = None, knowledge: str = "benign",
                    gamma_init: float | None = None, tol: float = 1e-5) -> Effect:
    """NDSS 2021's attack on Bulyan: the largest gamma with which Bulyan's iterated-Krum selection of
    n - 2f updates holds the malicious ones; against the server's own Bulyan where it runs one, else
    simulated: ``mode: reference`` as the notebooks' Bulyan experiments, which run ``our_attack_mkrum``."""
    opts = common("tailored_bulyan", dataset, direction, knowledge, mode, gamma_init, tol, MKRUM_GAMMA_INIT)
    simulate = notebook_multi_krum_chosen if opts.pop("mode") == "reference" else bulyan_chosen
    return selection_effect(dataset, ("bulyan",), simulate, opts)


@attack("tailored_median", version=2, device_reads=RULE_SEARCH_READS)
def tailored_median(dataset: FederatedDataset, malicious: np.ndarray, rng: np.random.Generator, *,
                    rule: str = "median", mode: str = "paper", direction: str | None = None,
                    knowledge: str = "benign", gamma_init: float | None = None, tol: float = 1e-5) -> Effect:
    """NDSS 2021's attack on the coordinate-wise median and trimmed mean (``rule``, trimming f from each end):
    the gamma whose m moves the rule's output farthest from the honest mean, against the server's own rule
    where it is ``rule``; ``mode: paper`` keeps the best gamma the halving search visits, ``reference`` the
    notebooks' search (a step succeeds when the deviation grew since the previous step)."""
    opts = common("tailored_median", dataset, direction, knowledge, mode, gamma_init, tol, SPREAD_GAMMA_INIT)
    tamper = partial(spread_updates, which=choice("tailored_median", "rule", rule, SPREAD_RULES), **opts)
    return knowledge_effect(dataset, tamper, knowledge, needs_rule=True)
