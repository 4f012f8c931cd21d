"""The explicitly batched MLP step (models.dense) against per-client autograd, and backend: auto's choice."""

import json

import pytest
import torch
from torch import nn

from fedarena.config import ExperimentConfig
from fedarena.models.backends import Backend, auto_backend, make_backend
from fedarena.models.batch import Batch
from fedarena.models.dense import DensePlan, dense_descend_, dense_grad, dense_local_sgd, dense_plan
from fedarena.models.functional import FlatModel
from fedarena.models.zoo import MODELS
from fedarena.simulation.experiment import run_experiment


def mlp_model(dtype=torch.float32) -> FlatModel:
    torch.manual_seed(0)
    return FlatModel(MODELS.get("mlp")((8,), 4, hidden=(6, 5)).to(dtype), "classification")


def tiny_batch(dtype=torch.float32) -> Batch:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(3, 5, 8, generator=gen, dtype=dtype)
    y = torch.randint(0, 4, (3, 5), generator=gen)
    mask = torch.ones(3, 5, dtype=dtype)
    mask[1, 3:] = 0  # client 1 has two padded slots
    return Batch(x, y, mask, torch.ones(3, dtype=dtype), torch.zeros(3, 5, dtype=torch.long))


def per_client_autograd(model: FlatModel, params: torch.Tensor, batch: Batch):
    """Each client's masked mean loss and gradient with plain autograd, one client at a time."""
    values, grads = [], []
    for i in range(params.shape[0]):
        p = params[i].clone().requires_grad_(True)
        value = model.loss(p, batch.x[i], batch.y[i], batch.mask[i])
        values.append(value.detach())
        grads.append(torch.autograd.grad(value, p)[0])
    return torch.stack(values), torch.stack(grads)


def test_dense_step_is_per_client_autograd_in_float64():
    # Prepare: three clients with different parameters, one with padding
    model = mlp_model(torch.float64)
    params = model.flatten().expand(3, -1) + 0.1 * torch.randn(3, model.dim, dtype=torch.float64)
    batch = tiny_batch(torch.float64)
    # Execute
    value, grad = dense_grad(model.dense, params, batch.x, batch.y, batch.mask)
    expected_value, expected_grad = per_client_autograd(model, params, batch)
    # Assert: the same math (float64: any summation order agrees to ~1e-15)
    torch.testing.assert_close(value, expected_value, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-12, atol=1e-14)


def test_batched_backend_takes_the_dense_step_and_agrees_with_vmap_in_float32():
    model = mlp_model()
    params = model.flatten().expand(3, -1) + 0.1 * torch.randn(3, model.dim)
    batch = tiny_batch()
    value, grad = Backend(model, batched=True).grad(params, batch)
    vmap_value, vmap_grad = Backend(model, batched=True).grad_of(model.loss, params, batch)
    # different code paths, same operators: equal up to float32 rounding on any CPU
    torch.testing.assert_close(value, vmap_value, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(grad, vmap_grad, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("batched", [True, False])
def test_descend_takes_one_sgd_step_in_place_with_each_clients_step_size(batched):
    # Prepare: float64 (any summation order agrees); client 2 takes no step this time (step size 0)
    model = mlp_model(torch.float64)
    params = model.flatten().expand(3, -1) + 0.1 * torch.randn(3, model.dim, dtype=torch.float64)
    batch, scale = tiny_batch(torch.float64), torch.tensor([0.5, 0.1, 0.0], dtype=torch.float64)
    _, grad = per_client_autograd(model, params, batch)
    expected = params - scale[:, None] * grad
    stepped = params.clone()
    # Execute: the batched backend takes the dense step, layer by layer; the sequential one grad + addcmul_
    Backend(model, batched=batched).descend_(stepped, batch, scale)
    # Assert
    torch.testing.assert_close(stepped, expected, rtol=1e-12, atol=1e-14)
    assert torch.equal(stepped[2], params[2]) and not torch.equal(stepped[0], params[0])


def test_descend_in_float32_matches_grad_then_addcmul():
    model = mlp_model()
    params = model.flatten().expand(3, -1) + 0.1 * torch.randn(3, model.dim)
    batch, scale, backend = tiny_batch(), torch.tensor([0.5, 0.1, 0.0]), Backend(model, batched=True)
    _, grad = backend.grad(params, batch)
    stepped = params.clone()
    backend.descend_(stepped, batch, scale)
    # the same elementwise update on the same gradients: equal up to float32 rounding on any CPU
    torch.testing.assert_close(stepped, params.addcmul(scale[:, None], grad, value=-1.0), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("module, task, expected", [
    (nn.Sequential(nn.Flatten(), nn.Linear(4, 3)), "classification", ((3, 4),)),
    (nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2)), "classification", ((3, 4), (2, 3))),
    (nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2)), "classification", None),  # not a ReLU
    (nn.Sequential(nn.Linear(4, 3, bias=False)), "classification", None),  # no bias
    (nn.Sequential(nn.Linear(4, 3)), "regression", None),  # not cross-entropy
    (nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(8, 2)), "classification", None),
])
def test_dense_plan_accepts_only_plain_relu_mlps(module, task, expected):
    plan = dense_plan(module, task)
    assert (plan.shapes if plan else None) == expected


def test_without_flatten_the_plan_fits_only_feature_vectors():
    plan = dense_plan(nn.Sequential(nn.Linear(4, 3)), "classification")
    flat = dense_plan(nn.Sequential(nn.Flatten(), nn.Linear(4, 3)), "classification")
    assert plan.fits(torch.zeros(2, 5, 4)) and not plan.fits(torch.zeros(2, 5, 1, 4))
    assert flat.fits(torch.zeros(2, 5, 1, 2, 2))


@pytest.mark.parametrize("model, device, expected", [
    ("mlp", "cpu", "batched"),
    ("logreg", "cpu", "batched"),
    ("cnn_fmnist", "cpu", "sequential"),  # vmap's grouped convolution is slower than a loop on a CPU
    ("cnn_fmnist", "cuda", "batched"),
])
def test_auto_backend_by_model_and_device(model, device, expected):
    flat = FlatModel(MODELS.get(model)((1, 28, 28), 10), "classification")
    assert auto_backend(flat, torch.device(device)) == expected
    assert make_backend("auto", flat, torch.device(device)).name == expected
    assert make_backend("sequential", flat, torch.device(device)).name == "sequential"  # a fixed one stays


def test_auto_backend_keeps_batch_norm_models_sequential():
    flat = FlatModel(nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.Linear(3, 2)), "classification")
    assert auto_backend(flat, torch.device("cuda")) == "sequential"


def test_a_run_records_the_backend_auto_chose_and_matches_a_run_fixed_to_it():
    common = {"dataset": {"name": "synthetic", "num_clients": 6, "max_samples": 40, "dim": 10},
              "model": {"name": "mlp", "hidden": [8]}, "rounds": 3, "clients_per_round": 3, "eval_every": 3}
    auto = run_experiment(ExperimentConfig.from_dict(common))
    fixed = run_experiment(ExperimentConfig.from_dict({**common, "backend": "batched"}))
    assert auto["config"]["backend"] == "auto" and auto["backend"] == "batched"
    assert auto["history"] and json.dumps(auto["history"]) == json.dumps(fixed["history"])  # same numbers (NaN too)


@pytest.mark.parametrize("widths, steps, clients", [((64, 200, 200, 10), 2, 10), ((8, 4), 5, 3), ((30, 7, 5), 1, 1)])
def test_fused_local_sgd_is_the_stepped_loop_bit_for_bit(widths, steps, clients):
    # Prepare: random layers, minibatches with padding, steps where some clients are inactive
    gen = torch.Generator().manual_seed(sum(widths) + steps)
    plan = DensePlan(tuple(zip(widths[1:], widths[:-1], strict=True)), True)
    w = 0.1 * torch.randn(sum(o * i + o for o, i in plan.shapes), generator=gen)
    x = torch.randn(steps, clients, 9, widths[0], generator=gen)
    y = torch.randint(0, widths[-1], (steps, clients, 9), generator=gen)
    mask = (torch.rand(steps, clients, 9, generator=gen) > 0.2).float()
    scale = torch.rand(steps, clients, generator=gen) * (torch.rand(steps, clients, generator=gen) > 0.3)
    # Execute: a copy of w per client, stepped in place, minus w; and the fused path
    local = w.expand(clients, -1).clone()
    for s in range(steps):
        dense_descend_(plan, local, x[s], y[s], mask[s], scale[s])
    fused = dense_local_sgd(plan, w, x, y, mask, scale)
    # Assert: the same numbers, not merely close ones (no version bump: tests/identity_sweep.py agrees)
    assert torch.equal(fused, local - w)


def test_the_engine_fuses_plain_sgd_on_a_cpu_to_the_stepped_numbers(monkeypatch):
    import fedarena.simulation.engine as engine
    from fedarena.simulation.setup import build_trial

    cfg = ExperimentConfig.from_dict({"dataset": {"name": "digits", "num_clients": 10}, "model": {"name": "mlp",
                                      "hidden": [16]}, "rounds": 3, "clients_per_round": 5, "local_steps": 3,
                                      "batch_size": 8, "lr": 0.1, "backend": "batched"})
    fused = build_trial(cfg)
    assert fused.method.trains_plain_sgd and fused.backend.fuses_local_sgd((64,), torch.device("cpu"))
    fused_state, _ = engine.simulate(fused)
    monkeypatch.setattr(Backend, "fuses_local_sgd", lambda self, shape, device: False)
    stepped_state, _ = engine.simulate(build_trial(cfg))
    assert torch.equal(fused_state.w, stepped_state.w)
