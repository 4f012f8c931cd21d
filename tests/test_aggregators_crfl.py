"""CRFL: the clipped, noised global model (a hand-checked round), the authors' certified bound transcribed in
float64, the certified radius a run reports, and bad input in one line."""

import math

import pytest
import torch
from scipy.stats import norm

from fedarena.config import ExperimentConfig
from fedarena.errors import ConfigError
from fedarena.methods.aggregators import check_aggregator, make_aggregator
from fedarena.methods.aggregators.base import RoundDraw
from fedarena.methods.aggregators.crfl import certified_bound
from fedarena.simulation.experiment import run_experiment


def authors_cal_prob_bound(pa, pb, sigma_test, epoch, params, agg_weight=None):
    """AI-secure/CRFL certify_mnist.py, cal_prob_bound, with its MNIST constants (tau = 60000 / N / n_B, rho_tadv =
    3, rho_t = 0.1 t + 2)."""
    sigma_train, eta, T = params["sigma_param"], params["lr"], epoch
    N, R = params["num_models"], len(params["adversary_list"])
    q_B, n_B, gamma = params["poisoning_per_batch"], params["batch_size"], params["scale_factor"]
    tau = 60000 / N / n_B
    rho_tadv = 3
    L_z = math.sqrt(2 + 2 * rho_tadv + rho_tadv**2)
    agg_weight = agg_weight or [1 / N] * R
    weighted_avg = sum(w**2 for w in agg_weight[:R])
    t_adv = params["poison_epochs"][0]
    if pa == 1.0:
        return 100000
    fraction = -math.log(1 - (math.sqrt(pa) - math.sqrt(pb)) ** 2) * sigma_train**2
    denominator = 2 * R * tau**2 * L_z**2 * weighted_avg * gamma**2 * eta**2 * float(q_B**2 / n_B**2)
    contract = 1
    for _epoch in range(t_adv + 1, T):
        contract *= 2 * norm.cdf((_epoch * 0.1 + 2) / sigma_train) - 1
    contract *= 2 * norm.cdf((T * 0.1 + 2) / sigma_test) - 1
    return math.sqrt(fraction / (denominator * contract))


MNIST = {"sigma_param": 0.01, "lr": 0.001, "num_models": 20, "adversary_list": [1, 2], "poisoning_per_batch": 5,
         "batch_size": 100, "scale_factor": 100, "poison_epochs": [70]}


@pytest.mark.parametrize("pa, pb, sigma_test, epoch", [(0.9, 0.05, 0.01, 100), (0.6, 0.3, 0.02, 80),
                                                       (0.99, 0.001, 0.01, 75), (1.0, 0.0, 0.01, 100)])
def test_the_certified_bound_is_the_authors_cal_prob_bound(pa, pb, sigma_test, epoch):
    ours = certified_bound(pa, pb, sigma_train=0.01, sigma_test=sigma_test, eta=0.001, rounds=epoch, devices=20,
                           attackers=2, share=5 / 100, gamma=100, tau=60000 / 20 / 100, rho_adv=3,
                           rhos=[t * 0.1 + 2 for t in range(71, epoch + 1)])
    assert ours == pytest.approx(authors_cal_prob_bound(pa, pb, sigma_test, epoch, MNIST), rel=1e-12)


def test_a_round_clips_the_new_model_to_rho_and_adds_the_rounds_noise():
    model = torch.tensor([3.0, 4.0, 0.0], dtype=torch.float64)  # norm 5
    updates = torch.tensor([[3.0, 4.0, 0.0], [3.0, 4.0, 0.0]], dtype=torch.float64)  # new model (6, 8, 0): norm 10
    draw = RoundDraw(torch.arange(2), seed=11, model=model)
    out = make_aggregator({"name": "crfl", "clip": 5.0, "sigma": 0.1}, f=0).for_round(draw)(
        updates, torch.ones(2, dtype=torch.float64))
    noise = torch.randn(3, generator=torch.Generator().manual_seed(11), dtype=torch.float64)  # drawn in float64
    assert torch.allclose(out, torch.tensor([3.0, 4.0, 0.0], dtype=torch.float64) + 0.1 * noise - model)


def test_a_run_reports_its_certified_radius_and_a_plain_run_none():
    base = {"dataset": {"name": "digits", "num_clients": 10}, "model": {"name": "mlp", "hidden": [16]}, "rounds": 4,
            "eval_every": 2, "clients_per_round": 5, "local_steps": 2, "batch_size": 16, "lr": 0.2,
            "attack": {"name": "badnets", "level": 0.2}}
    certified = run_experiment(ExperimentConfig.from_dict({**base, "aggregator": {"name": "crfl", "samples": 20}}))
    plain = run_experiment(ExperimentConfig.from_dict(base))
    assert certified["final"]["certified_radius"] > 0 and "certified_radius" not in plain["final"]
    # more training noise, a larger radius: the bound grows with the noise the attacker's change must beat
    louder = run_experiment(ExperimentConfig.from_dict(
        {**base, "aggregator": {"name": "crfl", "samples": 20, "sigma": 0.02, "test_sigma": 0.01}}))
    assert louder["final"]["certified_radius"] > certified["final"]["certified_radius"]


@pytest.mark.parametrize("params, message", [
    ({"clip": 0.0}, "crfl needs clip > 0"), ({"sigma": -1.0}, "sigma > 0"), ({"test_sigma": 0.0}, "test_sigma > 0"),
    ({"samples": 0}, "samples >= 1"), ({"alpha": 1.5}, "0 < alpha < 1"),
])
def test_bad_crfl_settings_fail_before_training(params, message):
    with pytest.raises(ConfigError, match=message):
        check_aggregator({"name": "crfl", **params}, n=10, f=2)
