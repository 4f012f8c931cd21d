"""TERM, q-FFL, AFL and FedProx: server rules on hand-made updates, and the special cases of the papers."""

import math

import numpy as np
import pytest
import torch

from fedarena.errors import ConfigError
from fedarena.methods import build_method
from fedarena.methods.aggregators import make_aggregator
from fedarena.methods.base import ServerInfo
from fedarena.methods.fair import project_simplex, qffl_weights
from fedarena.simulation.engine import simulate
from fedarena.simulation.setup import build_trial

UPDATES = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
W = torch.tensor([10.0, 20.0])


mean_rule = make_aggregator({"name": "mean"}, f=0)


def info(losses, ids=(0, 1), lr=0.1):
    return ServerInfo(torch.ones(len(losses)), torch.as_tensor(losses), torch.tensor(ids), lr)


def final_state(small_config, method, **overrides):
    cfg = small_config(method=method, model={"name": "mlp", "hidden": [16]}, rounds=4, **overrides)
    state, _ = simulate(build_trial(cfg))
    return state


def test_term_with_t_zero_is_the_mean_and_tilts_towards_high_loss():
    losses = torch.tensor([0.0, math.log(3.0)])
    flat = build_method({"name": "term", "t": 0.0}).server_step(W, {}, UPDATES, info(losses), mean_rule)[0]
    torch.testing.assert_close(flat, W + torch.tensor([0.5, 0.5]))
    tilted = build_method({"name": "term", "t": 1.0}).server_step(W, {}, UPDATES, info(losses), mean_rule)[0]
    torch.testing.assert_close(tilted, W + torch.tensor([0.25, 0.75]))  # weights e^0 : e^(ln 3)


def test_qffl_weights_follow_q_fedavg():
    # lr = 0.1 (L = 10), F = (1, 3), ||u|| = (0.1, 0.2): h = q F^(q-1) L^2 ||u||^2 + L F^q = (11, 34) at q = 1,
    # weights L F^q / sum h = (10, 30) / 45
    updates = torch.tensor([[0.1, 0.0], [0.0, 0.2]], dtype=torch.float64)
    p = qffl_weights(torch.tensor([1.0, 3.0], dtype=torch.float64), updates, q=1.0, lr=0.1)
    torch.testing.assert_close(p, torch.tensor([10 / 45, 30 / 45], dtype=torch.float64))
    uniform = qffl_weights(torch.tensor([1.0, 3.0]), updates, q=0.0, lr=0.1)
    assert torch.equal(uniform, torch.full((2,), 0.5, dtype=torch.float64))
    method = build_method({"name": "qffl", "q": 1.0})
    w_new, _ = method.server_step(W, {}, updates.float(), info([1.0, 3.0]), mean_rule)
    torch.testing.assert_close(w_new, W + torch.tensor([0.1 * 10 / 45, 0.2 * 30 / 45]))


def test_qffl_with_q_zero_equals_fedavg(small_config):
    fedavg = final_state(small_config, {"name": "global"})
    qffl = final_state(small_config, {"name": "qffl", "q": 0.0})
    torch.testing.assert_close(qffl.w, fedavg.w, rtol=0, atol=1e-7)


def test_fedprox_with_mu_zero_equals_fedavg_and_mu_pulls_towards_the_global_model(small_config):
    fedavg = final_state(small_config, {"name": "global"})
    prox0 = final_state(small_config, {"name": "fedprox", "mu": 0.0})
    torch.testing.assert_close(prox0.w, fedavg.w, rtol=1e-5, atol=1e-6)  # FedAvg's MLP step is fused: float32 tolerance
    w0 = build_trial(small_config(model={"name": "mlp", "hidden": [16]})).w0
    strong = final_state(small_config, {"name": "fedprox", "mu": 10.0})
    assert 0 < (strong.w - w0).norm() < (fedavg.w - w0).norm()


def test_project_simplex_by_hand():
    # sorted (0.8, 0.5, -0.1): the support is the first two, theta = (0.8 + 0.5 - 1) / 2 = 0.15
    out = project_simplex(torch.tensor([0.5, 0.8, -0.1], dtype=torch.float64))
    torch.testing.assert_close(out, torch.tensor([0.35, 0.65, 0.0], dtype=torch.float64))


def test_afl_moves_by_dual_weights_then_ascends_on_the_losses():
    method = build_method({"name": "afl", "lr_lambda": 0.1})
    clients = method.init_clients(W, np.array([4, 4, 4]))
    w_new, clients = method.server_step(W, clients, UPDATES, info([1.0, 3.0], ids=(0, 2)), mean_rule)
    torch.testing.assert_close(w_new, W + torch.tensor([0.5, 0.5]))  # lambda (1/3, 1/3) renormalised
    # (1/3 + 0.1, 1/3, 1/3 + 0.3) projected: theta = (1.4 - 1) / 3 -> (0.3, 0.2, 0.5)
    torch.testing.assert_close(clients["afl_lambda"], torch.tensor([0.3, 0.2, 0.5]))
    w_next, _ = method.server_step(W, clients, UPDATES, info([1.0, 3.0], ids=(0, 2)), mean_rule)
    torch.testing.assert_close(w_next, W + torch.tensor([0.375, 0.625]))  # (0.3, 0.5) renormalised


def test_fair_methods_run_with_a_robust_aggregator(small_config):
    state = final_state(small_config, {"name": "term", "t": 2.0}, aggregator={"name": "median"})
    assert torch.isfinite(state.w).all()


@pytest.mark.parametrize("section", [{"name": "qffl", "q": -1.0}, {"name": "afl", "lr_lambda": 0.0},
                                     {"name": "fedprox", "mu": -0.1}, {"name": "fedtilt", "dist": "cosine"}])
def test_invalid_hyperparameters_are_config_errors(section):
    with pytest.raises(ConfigError):
        build_method(section)
