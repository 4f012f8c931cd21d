"""Personalisation baselines: their reductions to FedAvg / local training, and their math by hand."""

import dataclasses
import math

import numpy as np
import pytest
import torch

from fedarena.methods import build_method
from fedarena.methods.base import StepContext
from fedarena.methods.finetune import symmetric_kl
from fedarena.models.backends import Backend
from fedarena.models.batch import Batch
from fedarena.models.functional import FlatModel
from fedarena.models.zoo import MeanEstimator
from fedarena.simulation.engine import simulate
from fedarena.simulation.setup import build_trial

TINY_MLP = {"name": "mlp", "hidden": [16]}


def run(small_config, method, **overrides):
    cfg = small_config(method=method, **{"model": TINY_MLP, "rounds": 3, **overrides})
    trial = build_trial(cfg)
    state, counts = simulate(trial)
    return trial, state, counts


def mean_model_context(lr=0.1, w_round=0.0):
    """The point-estimation model (f(x) = w, loss 0.5 (w - y)^2) with a one-client minibatch y = (1, 3)."""
    backend = Backend(FlatModel(MeanEstimator(), "regression"), batched=False)
    batch = Batch(torch.ones(1, 2, 1), torch.tensor([[1.0, 3.0]]), torch.ones(1, 2), torch.ones(1),
                  torch.zeros(1, 2, dtype=torch.long))
    ctx = StepContext(backend, lr, torch.tensor([w_round]), torch.tensor([0]), None, False)
    return ctx, batch


def test_finetuning_with_zero_epochs_is_fedavg(small_config):
    _, fedavg, fedavg_counts = run(small_config, {"name": "global"})
    _, fine, fine_counts = run(small_config, {"name": "finetuning", "epochs": 0})
    assert torch.equal(fine.w, fedavg.w)
    assert (fine_counts.correct == fedavg_counts.correct).all()


def test_finetuning_personalises_every_device_after_the_last_round(small_config):
    _, fedavg, _ = run(small_config, {"name": "global"})
    _, state, _ = run(small_config, {"name": "finetuning", "epochs": 1})
    assert torch.equal(state.w, fedavg.w) and bool((state.clients["finetuned"] == 1).all())
    assert bool((state.clients["personal"] != state.w).any(1).all())  # every device moved away from w*
    final = state.history[-1]
    assert final["round"] == 3 and final["acc_pooled"] > fedavg.history[-1]["acc_pooled"] + 0.05


@pytest.mark.parametrize("name", ["ditto_finetune", "ewc", "skl"])
def test_regularised_finetuning_with_lam_zero_is_plain_finetuning(small_config, name):
    _, plain, _ = run(small_config, {"name": "finetuning", "epochs": 1})
    _, other, _ = run(small_config, {"name": name, "lam": 0.0, "epochs": 1})
    torch.testing.assert_close(other.clients["personal"], plain.clients["personal"], rtol=0, atol=1e-6)


def test_ditto_finetune_with_large_lam_stays_near_the_global_model(small_config):
    _, plain, _ = run(small_config, {"name": "finetuning", "epochs": 1})
    _, held, _ = run(small_config, {"name": "ditto_finetune", "lam": 19.0, "epochs": 1})
    assert (held.clients["personal"] - held.w).norm() < 0.5 * (plain.clients["personal"] - plain.w).norm()


def test_ewc_fisher_is_the_mean_squared_per_sample_gradient_at_w_star():
    # per-sample gradients of 0.5 (w - y)^2 at w* = 0: -1 and -3 -> Fisher (1 + 9) / 2 = 5
    ctx, batch = mean_model_context(lr=0.1, w_round=0.0)
    method = build_method({"name": "ewc", "lam": 2.0})
    local = method.finalize_init(ctx.w_round, {}, ctx.ids)
    local = method.finalize_step(local, batch, ctx)
    assert float(local["fisher"][0, 0]) == pytest.approx(5.0)
    # first step from w* = 0: gradient -2 (penalty 0) -> v = 0.2; second: -1.8 + 2 * 5 * 0.2 = 0.2 -> 0.18
    assert float(local["v"][0, 0]) == pytest.approx(0.2)
    assert float(method.finalize_step(local, batch, ctx)["v"][0, 0]) == pytest.approx(0.18)


def test_symmetric_kl_by_hand():
    p_logits, q_logits = torch.tensor([[0.0, 0.0]]), torch.tensor([[math.log(3.0), 0.0]])
    expected = (0.5 - 0.75) * math.log(0.5 / 0.75) + (0.5 - 0.25) * math.log(0.5 / 0.25)
    assert float(symmetric_kl(p_logits, q_logits)[0]) == pytest.approx(expected)
    assert float(symmetric_kl(q_logits, q_logits)[0]) == pytest.approx(0.0)


def test_skl_refuses_non_classification_models():
    from fedarena.errors import ConfigError

    ctx, batch = mean_model_context()
    method = build_method({"name": "skl"})
    with pytest.raises(ConfigError, match="classification"):
        method.finalize_step(method.finalize_init(ctx.w_round, {}, ctx.ids), batch, ctx)


def test_l2sgd_keeps_the_mean_of_personal_models_and_is_local_training_at_lam_zero(small_config):
    _, state, _ = run(small_config, {"name": "l2sgd", "lam": 0.5})
    torch.testing.assert_close(state.w, state.clients["personal"].mean(0), rtol=0, atol=1e-6)
    _, free, _ = run(small_config, {"name": "l2sgd", "lam": 0.0})
    _, local, _ = run(small_config, {"name": "local"})
    assert torch.equal(free.clients["personal"], local.clients["personal"])


def test_apfl_alpha_one_is_local_training_and_alpha_zero_is_fedavg(small_config):
    trial, one, _ = run(small_config, {"name": "apfl", "alpha": 1.0})
    _, local, _ = run(small_config, {"name": "local"})
    assert torch.equal(trial.method.eval_params(one.w, one.clients), local.clients["personal"])
    trial, zero, _ = run(small_config, {"name": "apfl", "alpha": 0.0})
    _, fedavg, _ = run(small_config, {"name": "global"})
    torch.testing.assert_close(zero.w, fedavg.w, rtol=1e-5, atol=1e-6)  # FedAvg's MLP step is fused: float32 tolerance
    assert torch.equal(trial.method.eval_params(zero.w, zero.clients), zero.w.expand(20, -1))


def test_apfl_adaptive_alpha_moves_and_stays_in_the_unit_interval(small_config):
    _, state, _ = run(small_config, {"name": "apfl", "alpha": 0.5, "adaptive": True, "alpha_lr": 0.5})
    alpha = state.clients["alpha"]
    assert bool((alpha != 0.5).any()) and bool(((alpha >= 0) & (alpha <= 1)).all())


def test_mapper_with_candidate_zero_is_fedavg_and_picks_the_lowest_loss_candidate(small_config):
    trial, state, _ = run(small_config, {"name": "mapper", "candidates": [0.0]})
    _, fedavg, _ = run(small_config, {"name": "global"})
    torch.testing.assert_close(state.w, fedavg.w, rtol=1e-5, atol=1e-6)  # FedAvg's step is fused
    method = build_method({"name": "mapper", "candidates": [0.25, 0.75]})
    w = torch.zeros(2)
    clients = method.init_clients(w, np.array([4, 4, 4]))
    local = method.local_init(w, clients, torch.tensor([0, 2]))  # rows: (c0, k0), (c0, k2), (c1, k0), (c1, k2)
    local = {**local, "u": torch.arange(8.0).view(4, 2), "w": -torch.arange(8.0).view(4, 2),
             "loss": torch.tensor([1.0, 5.0, 2.0, 4.0])}
    updates, clients = method.local_result(local, w, clients, torch.tensor([0, 2]))
    torch.testing.assert_close(clients["mix"], torch.tensor([0.25, 0.0, 0.75]))
    torch.testing.assert_close(updates, torch.tensor([[0.0, -1.0], [-6.0, -7.0]]))
    torch.testing.assert_close(clients["local"][2], torch.tensor([6.0, 7.0]))


def test_per_fedavg_hessian_free_step_by_hand():
    # F = mean 0.5 (w - y)^2, y = (1, 3), w = 0, alpha = lr = 0.1: g1 = -2, g2 = F'(0.2) = -1.8, Hessian 1,
    # w <- w - beta (g2 - alpha * g2) = 0.01 * 0.9 * 1.8
    ctx, batch = mean_model_context(lr=0.1)
    method = build_method({"name": "per_fedavg", "beta": 0.01, "delta": 0.001})
    local = method.local_step({"w": torch.zeros(1, 1)}, batch, ctx)
    assert float(local["w"][0, 0]) == pytest.approx(0.01 * 0.9 * 1.8, rel=1e-4)


@pytest.mark.parametrize("select, expected", [(True, 1.5), (False, 1.875)])
def test_ditto_finetune_picks_each_devices_epochs_on_its_validation_data(select, expected):
    # Prepare: one epoch = one step toward the train mean 2 (lr 0.5, lam 0): v = 1, 1.5, 1.75, 1.875 after
    # epochs 1-4; the validation data (1.4, 1.6) have their lowest loss at v = 1.5, i.e. after 2 epochs
    ctx, batch = mean_model_context(lr=0.5, w_round=0.0)
    val = Batch(torch.ones(1, 2, 1), torch.tensor([[1.4, 1.6]]), torch.ones(1, 2), torch.ones(1),
                torch.zeros(1, 2, dtype=torch.long))
    ctx = dataclasses.replace(ctx, val=val, epoch_steps=torch.tensor([1]))
    method = build_method({"name": "ditto_finetune", "lam": 0.0, "epochs": 4, "select_epochs": select})
    clients = {"personal": torch.zeros(1, 1), "finetuned": torch.zeros(1)}
    # Execute
    local = method.finalize_init(ctx.w_round, clients, ctx.ids)
    for _ in range(4):
        local = method.finalize_step(local, batch, ctx)
    out = method.finalize_result(local, ctx.w_round, clients, ctx.ids)
    # Assert
    assert out["personal"].item() == pytest.approx(expected)
