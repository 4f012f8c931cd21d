"""Differential privacy (``fedarena.privacy``): a run's epsilon is dp-accounting's for its mechanism, a target
epsilon is reached, clipping and noise do what they say on hand-made updates, adaptive clipping finds a known
quantile, and what DP cannot compose with is refused. The accountants against closed forms (RDP's, the exact
Gaussian's): ``test_privacy_accounting.py``."""

import math

import dp_accounting
import numpy as np
import pytest
import torch
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant

from fedarena.config import ExperimentConfig
from fedarena.errors import ConfigError
from fedarena.methods.aggregators.builder import make_aggregator
from fedarena.methods.basic import FedAvg
from fedarena.privacy import accounting
from fedarena.privacy.dp_trial import PrivacyPlan, check_privacy
from fedarena.privacy.mechanisms import central_dp, local_dp, no_privacy
from fedarena.privacy.noise import clip_rows, local_privatize, next_clip
from fedarena.simulation.data import drawn_clients
from fedarena.simulation.experiment import run_experiment
from fedarena.simulation.identity import trial_identity

REPLACE_ONE = dp_accounting.NeighboringRelation.REPLACE_ONE
TINY = {"dataset": {"name": "digits", "num_clients": 10}, "model": {"name": "mlp", "hidden": [8]}, "rounds": 4,
        "eval_every": 2, "clients_per_round": 5, "local_steps": 1, "batch_size": 16, "lr": 0.2, "sampling": "uniform"}


def dp_accountings(event, delta, pld=False):
    """The epsilon dp-accounting gives for ``event`` at ``delta`` (the reference the runs are compared with)."""
    acc = PLDAccountant(neighboring_relation=REPLACE_ONE) if pld else RdpAccountant(neighboring_relation=REPLACE_ONE)
    acc.compose(event)
    return acc.get_epsilon(delta)


def test_a_central_runs_epsilon_is_dp_accountings_for_its_mechanism():
    # Prepare: DP-FedAvg, z = 1.5: under replace-one the clipped sum moves by 2 clip, so the Gaussian's noise
    # multiplier (std / sensitivity) is z / 2; 5 of 10 devices drawn without replacement each round
    cfg = ExperimentConfig.from_dict({**TINY, "privacy": {"name": "central", "noise_multiplier": 1.5, "clip": 1.0}})
    # Execute
    result = run_experiment(cfg)
    # Assert: every evaluated round's epsilon, at the default delta 1e-5 (N^-1.1 = 0.079 is larger)
    delta = 1e-5
    for row in result["history"]:
        event = dp_accounting.SelfComposedDpEvent(
            dp_accounting.SampledWithoutReplacementDpEvent(10, 5, dp_accounting.GaussianDpEvent(0.75)), row["round"])
        assert row["epsilon"] == pytest.approx(dp_accountings(event, delta), rel=1e-9)
    assert result["final"]["delta"] == pytest.approx(delta) and result["final"]["noise_multiplier"] == 1.5
    assert 0 < result["history"][0]["epsilon"] < result["final"]["epsilon"] < math.inf


def test_a_local_runs_epsilon_is_its_most_active_devices_own_gaussian_mechanism():
    # Prepare: local DP at z = 2 with the PLD accountant (no sampling event: the server knows who it drew). Under
    # REPLACE_ONE dp-accounting's PLD puts neighbours at -1 and +1 noise multipliers apart, so the device's
    # Gaussian (Delta = 2 clip, sigma = 2 clip) is GaussianDpEvent(2) there, not GaussianDpEvent(1)
    cfg = ExperimentConfig.from_dict({**TINY, "privacy": {"name": "local", "noise_multiplier": 2.0, "clip": 1.0,
                                                          "accountant": "pld"}})
    counts = np.zeros(10, dtype=int)
    for t in range(4):
        counts[drawn_clients(0, "uniform", np.ones(10), 5, t)] += 1
    # Execute
    result = run_experiment(cfg)
    # Assert: the device drawn most often spends the most
    event = dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(2.0), int(counts.max()))
    assert result["final"]["epsilon"] == pytest.approx(dp_accountings(event, 1e-5, pld=True), rel=1e-9)


@pytest.mark.parametrize("target, make", [
    (1.0, ("central", 30, 10, 30, None)),
    (10.0, ("central", 50, 10, 30, None)),
    (3.0, ("central", 100, 100, 20, None)),  # every device in every round: no sampling
    (2.0, ("local", 12)),
])
def test_calibration_reaches_the_target_epsilon_within_one_percent(target, make):
    # Execute
    z = accounting.calibrate("rdp", target, 1e-3, make)
    # Assert: dp-accounting's epsilon at that z is the target (from below, within 1%)
    if make[0] == "central":
        event = accounting.central_event(z, *make[1:])
    else:
        event = accounting.local_event(z, make[1])
    eps = dp_accountings(event, 1e-3)
    assert eps <= target * (1 + 1e-6) and eps == pytest.approx(target, rel=0.01)


def test_adaptive_clipping_spends_the_same_budget_and_some_targets_are_out_of_reach():
    # Prepare: the clipped count (noise 1) takes part of z = 1.5's budget
    plain = accounting.epsilon("rdp", accounting.central_event(1.5, 30, 10, 20), 1e-3)
    adaptive = accounting.epsilon("rdp", accounting.central_event(1.5, 30, 10, 20, count_noise=1.0), 1e-3)
    # Assert: the same epsilon (the update's noise grows to make room for the count's)
    assert adaptive == pytest.approx(plain, rel=1e-9)
    assert accounting.update_noise(1.5, 1.0) > 1.5
    with pytest.raises(ConfigError, match="out of reach"):
        accounting.calibrate("rdp", 0.1, 1e-3, ("central", 30, 10, 20, 0.5))


def test_clipping_scales_only_the_rows_above_the_bound():
    updates = torch.tensor([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]])
    clipped = clip_rows(updates, 1.0)
    assert torch.allclose(clipped, torch.tensor([[0.6, 0.8], [0.3, 0.4], [0.0, 0.0]]))


def plan(spec, z, n=10):
    return PrivacyPlan(spec, z, 1e-3, 100, n, None, None)


@pytest.mark.parametrize("rule, std", [("mean", 2.0 * 1.0 / 10), ("median", 2.0 * 1.0), ("trimmed_mean", 2.0 / 6)])
def test_central_noise_has_z_clip_times_the_rules_sensitivity_over_two(rule, std):
    # Prepare: zero updates, so the output is the noise alone; z = 2, clip = 1, n = 10 (f = 2 for the trimmed mean:
    # sensitivity 2 / (n - 2f))
    spec = central_dp(noise_multiplier=2.0, clip=1.0)
    aggregate = make_aggregator({"name": rule}, f=2)
    draws = []
    for seed in range(20):
        noise = torch.Generator().manual_seed(seed)
        central = plan(spec, 2.0).server_rule(aggregate, {}, noise, torch.Generator())
        draws.append(central(torch.zeros(10, 5000), torch.ones(10)))
    # Assert: the measured std over 100,000 draws
    assert float(torch.cat(draws).std()) == pytest.approx(std, rel=0.02)


def test_central_dp_clips_every_update_then_runs_the_rule_with_uniform_weights():
    # Prepare: no noise; two rows above the bound, weights that a weighted mean would use
    spec = central_dp(noise_multiplier=0.0, clip=1.0)
    updates = torch.tensor([[3.0, 4.0], [0.0, 0.5], [-10.0, 0.0]])
    aggregate = make_aggregator({"name": "weighted_mean"}, f=0)
    # Execute
    out = plan(spec, 0.0, n=3).server_rule(aggregate, {}, torch.Generator(), torch.Generator())(
        updates, torch.tensor([100.0, 1.0, 1.0]))
    # Assert: the uniform mean of (0.6, 0.8), (0, 0.5), (-1, 0)
    assert torch.allclose(out, torch.tensor([-0.4 / 3, 1.3 / 3]))


def test_local_dp_noises_each_row_with_z_clip():
    gen = torch.Generator().manual_seed(0)
    sent = local_privatize(torch.zeros(4, 50_000), 0.5, 3.0, gen)
    assert [float(s) for s in sent.std(dim=1)] == pytest.approx([1.5] * 4, rel=0.02)


@pytest.mark.parametrize("quantile", [0.5, 0.8])
def test_adaptive_clipping_settles_at_the_target_quantile_of_the_norms(quantile):
    # Prepare: every round 100 updates with norms spread evenly over (0, 10): the q-quantile is 10 q
    norms = torch.linspace(0.05, 9.95, 100)
    gen = torch.Generator().manual_seed(0)
    bound = 0.1
    # Execute: Andrew et al.'s geometric update with the count's noise at n / 20
    history = []
    for _ in range(400):
        unclipped = int((norms <= bound).sum())
        bound = next_clip(bound, unclipped, 100, quantile, 0.2, 5.0, gen)
        history.append(bound)
    # Assert: after the climb, the bound stays near the quantile
    assert np.mean(history[200:]) == pytest.approx(10 * quantile, rel=0.1)


def test_secure_aggregation_refuses_a_rule_that_needs_each_update():
    secure = no_privacy(secure_aggregation=True)
    with pytest.raises(ConfigError, match="aggregator 'krum' needs each device's update"):
        check_privacy(secure, "proportional", FedAvg(), make_aggregator({"name": "krum"}, f=1))
    with pytest.raises(ConfigError, match="aggregator 'norm_bound' needs each"):  # the round's median norm
        check_privacy(secure, "proportional", FedAvg(), make_aggregator({"name": "norm_bound"}, f=1))
    for section in ({"name": "mean"}, {"name": "weighted_mean"}, {"name": "norm_bound", "max_norm": 1.0}):
        check_privacy(secure, "proportional", FedAvg(), make_aggregator(section, f=1))


def test_dp_refuses_what_it_does_not_cover():
    with pytest.raises(ConfigError, match="needs sampling: uniform"):
        check_privacy(local_dp(noise_multiplier=1.0), "proportional", FedAvg(), make_aggregator({"name": "mean"}, f=0))
    with pytest.raises(ConfigError, match="has no known sensitivity"):
        check_privacy(central_dp(noise_multiplier=1.0), "uniform", FedAvg(), make_aggregator({"name": "flame"}, f=0))
    with pytest.raises(ConfigError, match="pre-aggregator 'clip' couples the updates"):
        check_privacy(central_dp(noise_multiplier=1.0), "uniform", FedAvg(),
                      make_aggregator({"name": "mean", "pre": ["clip"]}, f=0))
    for bad, message in ({"noise_multiplier": -1.0}, "noise_multiplier must be"), ({"clip": 0.0}, "clip"), \
                        ({"delta": 1.0}, "delta must be in"), ({"target_epsilon": 0.0}, "target_epsilon must be"):
        with pytest.raises(ConfigError, match=message):
            central_dp(**{"noise_multiplier": 1.0, **bad} if "target_epsilon" not in bad else bad)


def test_privacy_none_leaves_every_identity_as_it_was():
    base = {**TINY, "sampling": "proportional"}
    without = trial_identity(ExperimentConfig.from_dict(base))
    explicit = trial_identity(ExperimentConfig.from_dict({**base, "privacy": {"name": "none"}}))
    secure = trial_identity(ExperimentConfig.from_dict({**base, "privacy": {"name": "none", "secure_aggregation": True}}))
    assert explicit.config_hash == without.config_hash and not any("privacy" in k for k in without.versions)
    assert ExperimentConfig.from_dict(base).legacy_hash() == ExperimentConfig.from_dict(
        {**base, "privacy": {"name": "none"}}).legacy_hash()
    assert secure.config_hash != without.config_hash  # a real setting: part of the identity


def test_no_noise_and_a_bound_above_every_norm_is_training_without_dp():
    # Prepare: the same trial without DP and with central DP that neither clips nor adds noise
    plain = run_experiment(ExperimentConfig.from_dict(TINY))
    idle = run_experiment(ExperimentConfig.from_dict({**TINY, "privacy": {"name": "central", "noise_multiplier": 0.0,
                                                                          "clip": 1e9}}))
    # Assert: the same numbers; no guarantee (epsilon infinite, kept as infinity)
    assert idle["final"]["acc_pooled"] == pytest.approx(plain["final"]["acc_pooled"], abs=1e-6)
    assert idle["final"]["epsilon"] == math.inf and "epsilon" not in plain["final"]
