"""CRFL (Xie, Chen, Chen and Li, ICML 2021): certifiably robust federated learning against backdoors.

Training: the server averages the updates, clips the new global model's parameters to norm ``clip`` (rho) and adds
Gaussian noise N(0, ``sigma``^2) to every parameter (from the round's seed); the next round trains from the noised
model. Testing: parameter smoothing, the majority vote of ``samples`` copies of the model each with
N(0, ``test_sigma``^2) noise; a test sample's certified radius bounds the norm of any backdoor trigger that cannot
change that vote (the paper's Theorem 2).

Variant: the authors' code (AI-secure/CRFL; ``main.py``'s round, ``certify_mnist.py``'s ``cal_prob_bound`` and
``certify``), with the facts their script fixes for MNIST taken from the run: N the devices per round, R the
malicious devices per round the rule assumes (f, at least 1: a clean run is certified against one), tau the local
SGD steps a device runs in a round (``local_steps_per_round``: the mean over the devices of the engine's steps,
their 60000 / N / n_B), eta the learning rate, q_B / n_B the attack's poisoned share (its ``poison_fraction``; 0.5
where it has none), gamma the attack's boost (``boost`` of model replacement, n / R where null; 1 otherwise), the
attack in the first round (their t_adv; their rounds count from 1), a constant clipping bound rho (their schedule
0.1 t + 2 with rho = 3 at t_adv is an MNIST choice), and p_A, p_B from the vote counts with Hoeffding's bound at
``alpha``. Two of these are our readings. The theorem's tau is the attackers' local steps, which the authors' equal
devices make every device's; ours is the mean device's (an attacker with more data than that runs more steps in
epoch mode; in step mode, every suite's, each device runs ``local_steps`` and the two agree). The theorem covers
one attack round, t_adv, and fedarena's attacks run in every round: t_adv = 1 is the most favourable reading, the
one that leaves the most later rounds to contract the attack (at the defaults, clip 15 and sigma 0.01, each round's
factor 2 Phi(rho / sigma) - 1 is exactly 1 in float64, so no reading of t_adv changes the radius there). The
certified model is the last round's clipped model before its noise (``certified_model``: the authors clip, test and
save, then noise), which the federation holds only where the method's server step is w + the rule's output
(``Method.adds_aggregate``; ``check_crfl_method`` refuses the others: L2SGD's w + (n/K) times it). A run reports
``certified_radius``: the mean over benign devices' test samples of the radius where the smoothed vote is right (0
where it is wrong). docs/fidelity.md says each choice; ``tests/test_aggregators_crfl.py`` transcribes
``cal_prob_bound``.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch
from scipy.stats import norm

from fedarena.errors import ConfigError
from fedarena.methods.aggregators.base import RoundDraw, aggregator, check_common, check_updates
from fedarena.methods.base import METHODS

PROB_GUARD = 1e-8  # the authors keep p_A >= 1e-8 and p_B <= 1 - 1e-8
UNANIMOUS = 100000.0  # the authors' radius for a unanimous vote (p_A = 1)
CLEAN_MODEL = "crfl_model"  # the server state's entry: the last kept round's clipped model before its noise


def check_crfl(n: int, f: int, *, clip: float = 15.0, sigma: float = 0.01, test_sigma: float | None = None,
               samples: int = 100, alpha: float = 0.001) -> None:
    check_common(n, f)
    if not clip > 0 or not sigma > 0 or (test_sigma is not None and not test_sigma > 0):
        raise ConfigError(f"crfl needs clip > 0, sigma > 0 and test_sigma > 0 (or null: sigma); got clip={clip}, "
                          f"sigma={sigma}, test_sigma={test_sigma}")
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1 or not 0 < alpha < 1:
        raise ConfigError(f"crfl votes with samples >= 1 smoothed models at confidence 1 - alpha, 0 < alpha < 1; "
                          f"got samples={samples!r}, alpha={alpha}")
    if not hoeffding_margin(samples, alpha) < 0.5:  # then p_A <= 1 - h <= h <= p_B: no vote certifies anything
        least = next(n for n in itertools.count(samples + 1) if hoeffding_margin(n, alpha) < 0.5)
        raise ConfigError(f"crfl's Hoeffding margin sqrt(ln(1 / alpha) / (2 samples)) must be below 0.5 (samples > "
                          f"2 ln(1 / alpha)), or p_A <= p_B in every vote and every radius is 0: at alpha={alpha} "
                          f"samples must be >= {least}; got samples={samples}")


def hoeffding_margin(samples: int, alpha: float) -> float:
    """h: the vote shares' Hoeffding bound at confidence 1 - alpha (certify_mnist.py:169-171): p_A = top share - h,
    p_B = second share + h."""
    return math.sqrt(math.log(1 / alpha) / 2 / samples)


def check_crfl_method(method) -> None:
    """CRFL certifies the model its rule makes, w + its output (before the noise): the federation's model only where
    the method's server step is w + the rule's output (``Method.adds_aggregate``); refuse the others before the run
    (L2SGD: w + (n/K) times it)."""
    if method.adds_aggregate:
        return
    allowed = [name for name, cls in ((n, METHODS.get(n)) for n in METHODS.names())
               if cls.uses_aggregator and cls.adds_aggregate]
    raise ConfigError(f"crfl certifies w + its output as the global model, but the server step of method "
                      f"{method.name!r} is not w + the rule's output; use crfl with {', '.join(allowed)}")


def certified_bound(pa, pb, *, sigma_train: float, sigma_test: float, eta: float, devices: int, attackers: int,
                    share: float, gamma: float, tau: float, rho_adv: float, rhos: list[float],
                    weights: list[float] | None = None) -> torch.Tensor:
    """The authors' ``cal_prob_bound`` (certify_mnist.py:104-140): the trigger norm below which the smoothed vote
    cannot change, from the vote's bounds ``pa``, ``pb`` (numbers, or float64 tensors: one radius each); ``rhos``
    the clipping bounds of rounds t_adv + 1 .. T - 1 and T (the last one with ``sigma_test``), ``weights`` the
    attackers' aggregation weights (1 / devices each by default). 100000 where p_A = 1 (theirs); 0 where
    p_A <= p_B (ours: such a vote certifies nothing; theirs takes the gap's square and leaves it to ``is_acc``)."""
    pa = torch.as_tensor(pa, dtype=torch.float64)
    pb = torch.as_tensor(pb, dtype=torch.float64)
    gap = (pa.sqrt() - pb.sqrt()).clamp_min(0)
    fraction = -torch.log1p(-gap**2) * sigma_train**2
    denominator = bound_denominator(sigma_train=sigma_train, sigma_test=sigma_test, eta=eta, devices=devices,
                                    attackers=attackers, share=share, gamma=gamma, tau=tau, rho_adv=rho_adv,
                                    rhos=rhos, weights=weights)
    radius = torch.sqrt(fraction / denominator)
    return torch.where(pa == 1.0, torch.full_like(radius, UNANIMOUS), radius)


def bound_denominator(*, sigma_train: float, sigma_test: float, eta: float, devices: int, attackers: int,
                      share: float, gamma: float, tau: float, rho_adv: float, rhos: list[float],
                      weights: list[float] | None = None) -> float:
    """What the bound divides by: the attack's reach (attackers, their weights, local steps, Lipschitz constant
    of the clipped step, boost, learning rate, poisoned share) times the contraction of the later rounds' clip
    and noise."""
    lipschitz = math.sqrt(2 + 2 * rho_adv + rho_adv**2)
    weights = weights if weights is not None else [1 / devices] * attackers
    denominator = 2 * attackers * tau**2 * lipschitz**2 * sum(w**2 for w in weights) * gamma**2 * eta**2 * share**2
    contract = 1.0
    for rho in rhos[:-1]:
        contract *= 2 * norm.cdf(rho / sigma_train) - 1
    contract *= 2 * norm.cdf(rhos[-1] / sigma_test) - 1
    return denominator * contract


def contraction_rhos(clip: float, rounds_done: int) -> list[float]:
    """``certified_bound``'s ``rhos`` for a run certified after ``rounds_done`` rounds: the authors' rounds t_adv + 1
    .. T - 1, then T (certify_mnist.py:132-136), with their rounds counted from 1 (utils/image_helper.py:49), the
    attack in the first (t_adv = 1) and T = rounds_done; every bound ``clip``."""
    return [clip] * max(rounds_done - 2, 0) + [clip]  # T <= 2: their loop is empty, round T's factor remains


def local_steps_per_round(trial) -> float:
    """tau: the local SGD steps of a device in a round, as the engine plans and runs them (``Trial.local_steps``:
    ``local_steps`` in step mode; ``local_epochs`` x ceil(size / min(B, size)) in epoch mode), the mean over the
    federation's devices with training data. The authors' 60000 / N / n_B (certify_mnist.py:114) is that count for
    their N equal devices of one local epoch (configs/mnist_params.yaml:6); unequal devices take the mean device's."""
    return float(np.mean(trial.local_steps()))


def attack_reach(trial, attackers: int) -> tuple[float, float]:
    """(q_B / n_B, gamma) of the trial's attack: its poisoned share (0.5 where it has none) and its boost (model
    replacement's, n / R where null; 1 otherwise)."""
    attack = trial.cfg.attack
    share = float(attack.get("poison_fraction") or 0.5)
    if attack["name"] != "model_replacement":
        return share, 1.0
    boost = attack.get("boost")
    return share, float(boost) if boost is not None else trial.cfg.clients_per_round / attackers


def certified_model(state) -> torch.Tensor:
    """The model CRFL certifies: the last kept round's clipped global model before its noise, as the authors clip,
    test and save it before they noise it (main.py:111-140); the global model itself where the rule never ran."""
    return state.server.get(CLEAN_MODEL, state.w).to(state.w)


def vote_bounds(trial, w: torch.Tensor, rounds_done: int, *, test_sigma: float, samples: int,
                alpha: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """(p_A, p_B, right) [m] of the benign devices' m test samples: the Hoeffding bounds at ``alpha`` of the top two
    vote shares of ``samples`` copies of ``w`` with N(0, test_sigma^2) noise (certify_mnist.py:169-171), and
    whether the vote is right and p_A > p_B; None where no benign device has test samples."""
    pooled = trial.test
    benign = ~torch.as_tensor(trial.threat.malicious, device=pooled.owner.device)[pooled.owner]
    x, y = pooled.x[benign], pooled.y[benign]
    if len(y) == 0:
        return None
    gen = torch.Generator().manual_seed(int(trial.cfg.seed) * 1_000_003 + rounds_done)
    votes = torch.zeros(len(y), trial.dataset.num_classes, dtype=torch.long, device=x.device)
    with torch.no_grad():
        for _ in range(samples):
            noisy = w + test_sigma * torch.randn(w.shape, generator=gen, dtype=w.dtype).to(w.device)
            predicted = trial.model.forward(noisy, x).argmax(-1)
            votes[torch.arange(len(y), device=x.device), predicted] += 1
    top = votes.topk(2, dim=1).values.double().cpu() / samples
    hoeffding = hoeffding_margin(samples, alpha)
    pa = (top[:, 0] - hoeffding).clamp_min(PROB_GUARD)
    pb = (top[:, 1] + hoeffding).clamp_max(1 - PROB_GUARD)
    return pa, pb, (votes.argmax(1).cpu() == y.cpu()) & (pa > pb)


def certified_radius(trial, w: torch.Tensor, rounds_done: int, *, clip: float, sigma: float, test_sigma: float,
                     samples: int, alpha: float) -> float:
    """The mean over benign devices' test samples of ``certified_bound`` for the smoothed vote of ``w`` where the
    vote is right, 0 where it is wrong (the authors' certified accuracy integrates it); NaN without such samples."""
    bounds = vote_bounds(trial, w, rounds_done, test_sigma=test_sigma, samples=samples, alpha=alpha)
    if bounds is None:
        return float("nan")
    pa, pb, right = bounds
    attackers = max(1, trial.aggregate.f)
    share, gamma = attack_reach(trial, attackers)
    radius = certified_bound(pa, pb, sigma_train=sigma, sigma_test=test_sigma, eta=trial.cfg.lr,
                             devices=trial.cfg.clients_per_round, attackers=attackers, share=share, gamma=gamma,
                             tau=local_steps_per_round(trial), rho_adv=clip, rhos=contraction_rhos(clip, rounds_done))
    return float(torch.where(right, radius, torch.zeros_like(radius)).mean())


def certify_crfl(trial, state, *, clip: float, sigma: float, test_sigma: float | None, samples: int,
                 alpha: float) -> dict[str, float]:
    """The engine's hook (``AggregatorEntry.certify``): ``certified_radius`` of the run's ``certified_model`` after
    ``state.round`` rounds; NaN before the first round."""
    if state.round < 1:
        return {"certified_radius": float("nan")}
    test_sigma = sigma if test_sigma is None else test_sigma
    return {"certified_radius": certified_radius(trial, certified_model(state), state.round, clip=clip, sigma=sigma,
                                                 test_sigma=test_sigma, samples=samples, alpha=alpha)}


@aggregator("crfl", check=check_crfl, reads=("round", "model"), certify=certify_crfl,
            reports={"certified_radius": True}, tasks=("classification",), sum_only=True, version=2)
def crfl(updates: torch.Tensor, *, weights: torch.Tensor, losses: torch.Tensor | None, f: int,
         round: RoundDraw | None = None, clip: float = 15.0, sigma: float = 0.01, test_sigma: float | None = None,
         samples: int = 100, alpha: float = 0.001) -> torch.Tensor:
    """CRFL (Xie et al., ICML 2021; main.py:94-140): the mean update, then the new global model clipped to norm
    ``clip`` and noised with N(0, sigma^2) per parameter; returned as the update from the round's model. The clipped
    model before the noise goes to the server's state (``CLEAN_MODEL``): the model the run certifies."""
    check_updates(updates, f)
    draw = round or RoundDraw.rows_in_order(updates.shape[0])
    # called directly (no round's model), the model is taken as zero: the output is then the clipped, noised mean
    model = draw.input("model")
    model = model.to(updates) if model is not None else torch.zeros_like(updates[0])
    new = model + updates.mean(0)
    new = new * torch.clamp(clip / new.norm().clamp_min(1e-12), max=1.0)
    if draw.server is not None:  # replaced, never modified in place; kept only if the engine keeps the round
        draw.server[CLEAN_MODEL] = new
    noise = torch.randn(new.shape, generator=draw.generator(), dtype=torch.float64).to(new)  # one draw in every dtype
    return new + sigma * noise - model
