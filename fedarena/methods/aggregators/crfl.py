"""CRFL (Xie, Chen, Chen and Li, ICML 2021): certifiably robust federated learning against backdoors.

Training: the server averages the updates, clips the new global model's parameters to norm ``clip`` (rho) and adds
Gaussian noise N(0, ``sigma``^2) to every parameter (from the round's seed). Testing: parameter smoothing, the
majority vote of ``samples`` copies of the model each with N(0, ``test_sigma``^2) noise; a test sample's
certified radius bounds the norm of any backdoor trigger that cannot change that vote (the paper's Theorem 2).

Variant: the authors' code (AI-secure/CRFL; ``certify_mnist.py``'s ``cal_prob_bound`` and ``certify``), with
the facts their script fixes for MNIST taken from the run: N the devices per round, R the malicious devices
per round the rule assumes (f, at least 1: a clean run is certified against one), tau the local steps, eta the
learning rate, q_B / n_B the attack's poisoned share (its ``poison_fraction``; 0.5 where it has none), gamma the
attack's boost (``boost`` of model replacement, n / R where null; 1 otherwise), the attack from round 0 (their
t_adv), a constant clipping bound rho (their schedule 0.1 t + 2 with rho = 3 at t_adv is an MNIST choice), and
p_A, p_B from the vote counts with Hoeffding's bound at ``alpha``. A run reports ``certified_radius``: the mean
over benign devices' test samples of the radius where the smoothed vote is right (0 where it is wrong).
docs/fidelity.md says each choice; ``tests/test_aggregators_crfl.py`` transcribes ``cal_prob_bound``.
"""

from __future__ import annotations

import math

import torch
from scipy.stats import norm

from fedarena.errors import ConfigError
from fedarena.methods.aggregators.base import RoundDraw, aggregator, check_common, check_updates

PROB_GUARD = 1e-8  # the authors keep p_A >= 1e-8 and p_B <= 1 - 1e-8


def check_crfl(n: int, f: int, *, clip: float = 15.0, sigma: float = 0.01, test_sigma: float | None = None,
               samples: int = 100, alpha: float = 0.001) -> None:
    check_common(n, f)
    if not clip > 0 or not sigma > 0 or (test_sigma is not None and not test_sigma > 0):
        raise ConfigError(f"crfl needs clip > 0, sigma > 0 and test_sigma > 0 (or null: sigma); got clip={clip}, "
                          f"sigma={sigma}, test_sigma={test_sigma}")
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1 or not 0 < alpha < 1:
        raise ConfigError(f"crfl votes with samples >= 1 smoothed models at confidence 1 - alpha, 0 < alpha < 1; "
                          f"got samples={samples!r}, alpha={alpha}")


def certified_bound(pa: float, pb: float, *, sigma_train: float, sigma_test: float, eta: float, rounds: int,
                    devices: int, attackers: int, share: float, gamma: float, tau: float, rho_adv: float,
                    rhos: list[float], weights: list[float] | None = None) -> float:
    """The authors' ``cal_prob_bound``: the trigger norm below which the smoothed vote cannot change, from the
    vote's bounds p_A, p_B; ``rhos`` the clipping bounds of rounds t_adv + 1 .. T - 1 and T (the last one with
    ``sigma_test``), ``weights`` the attackers' aggregation weights (1 / devices each by default)."""
    if pa == 1.0:
        return 100000.0  # the authors' value for a unanimous vote
    fraction = -math.log(1 - (math.sqrt(pa) - math.sqrt(pb)) ** 2) * sigma_train**2
    return math.sqrt(fraction / bound_denominator(sigma_train=sigma_train, sigma_test=sigma_test, eta=eta,
                                                  devices=devices, attackers=attackers, share=share, gamma=gamma,
                                                  tau=tau, rho_adv=rho_adv, rhos=rhos, weights=weights))


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


def attack_reach(trial, attackers: int) -> tuple[float, float]:
    """(q_B / n_B, gamma) of the trial's attack: its poisoned share (0.5 where it has none) and its boost (model
    replacement's, n / R where null; 1 otherwise)."""
    attack = trial.cfg.attack
    share = float(attack.get("poison_fraction") or 0.5)
    if attack["name"] != "model_replacement":
        return share, 1.0
    boost = attack.get("boost")
    return share, float(boost) if boost is not None else trial.cfg.clients_per_round / attackers


def certify_crfl(trial, w: torch.Tensor, rounds_done: int, *, clip: float, sigma: float, test_sigma: float | None,
                 samples: int, alpha: float) -> dict[str, float]:
    """``certified_radius``: the mean over benign devices' test samples of the certified radius where the vote of
    ``samples`` smoothed models is right, 0 where it is wrong (the authors' certified accuracy integrates it)."""
    test_sigma = sigma if test_sigma is None else test_sigma
    pooled = trial.test
    benign = ~torch.as_tensor(trial.threat.malicious, device=pooled.owner.device)[pooled.owner]
    x, y = pooled.x[benign], pooled.y[benign]
    if len(y) == 0 or rounds_done < 1:
        return {"certified_radius": float("nan")}
    gen = torch.Generator().manual_seed(int(trial.cfg.seed) * 1_000_003 + rounds_done)
    votes = torch.zeros(len(y), trial.dataset.num_classes, dtype=torch.long, device=x.device)
    with torch.no_grad():
        for _ in range(samples):
            noisy = w + test_sigma * torch.randn(w.shape, generator=gen, dtype=w.dtype).to(w.device)
            predicted = trial.model.forward(noisy, x).argmax(-1)
            votes[torch.arange(len(y), device=x.device), predicted] += 1
    top = votes.topk(2, dim=1).values.double().cpu() / samples
    hoeffding = math.sqrt(math.log(1 / alpha) / 2 / samples)
    pa = (top[:, 0] - hoeffding).clamp_min(PROB_GUARD)
    pb = (top[:, 1] + hoeffding).clamp_max(1 - PROB_GUARD)
    attackers = max(1, trial.aggregate.f)
    share, gamma = attack_reach(trial, attackers)
    local_steps = trial.cfg.local_steps or trial.cfg.local_epochs
    denominator = bound_denominator(sigma_train=sigma, sigma_test=test_sigma, eta=trial.cfg.lr,
                                    devices=trial.cfg.clients_per_round, attackers=attackers, share=share,
                                    gamma=gamma, tau=local_steps, rho_adv=clip, rhos=[clip] * rounds_done)
    gap = (pa.sqrt() - pb.sqrt()).clamp_min(0)  # a vote with p_A <= p_B certifies nothing
    radius = torch.sqrt(-torch.log1p(-gap**2) * sigma**2 / denominator)
    right = (votes.argmax(1).cpu() == y.cpu()) & (pa > pb)
    return {"certified_radius": float(torch.where(right, radius, torch.zeros_like(radius)).mean())}


@aggregator("crfl", check=check_crfl, needs_round=True, certify=certify_crfl, sum_only=True)
def crfl(updates: torch.Tensor, *, weights: torch.Tensor, losses: torch.Tensor | None, f: int,
         round: RoundDraw | None = None, clip: float = 15.0, sigma: float = 0.01, test_sigma: float | None = None,
         samples: int = 100, alpha: float = 0.001) -> torch.Tensor:
    """CRFL (Xie et al., ICML 2021): the mean update, then the new global model clipped to norm ``clip`` and
    noised with N(0, sigma^2) per parameter; returned as the update from the round's model (see the module)."""
    check_updates(updates, f)
    draw = round or RoundDraw.rows_in_order(updates.shape[0])
    # called directly (no round's model), the model is taken as zero: the output is then the clipped, noised mean
    model = draw.model.to(updates) if draw.model is not None else torch.zeros_like(updates[0])
    new = model + updates.mean(0)
    new = new * torch.clamp(clip / new.norm().clamp_min(1e-12), max=1.0)
    noise = torch.randn(new.shape, generator=draw.generator(), dtype=torch.float64).to(new)  # one draw in every dtype
    return new + sigma * noise - model
