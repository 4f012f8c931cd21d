"""``mode: reference`` of Ditto Table 2's baselines: what litian96/ditto computes, by hand on tiny inputs.

Most tests use the point-estimation model (f(x) = w, loss 0.5 (w - y)^2 averaged over the minibatch, so
grad = w - mean(y)) and call a method's steps directly; one checks the engine's finetuning step budget.
"""

import math

import numpy as np
import pytest
import torch
from torch import nn

from fedarena.errors import ConfigError
from fedarena.methods import build_method
from fedarena.methods.base import ServerInfo, StepContext
from fedarena.methods.paper_or_reference import reference_finetune_steps
from fedarena.models.backends import Backend
from fedarena.models.batch import Batch
from fedarena.models.functional import FlatModel
from fedarena.models.zoo import MeanEstimator
from fedarena.simulation.engine import finalize, initial_state, run_round, simulate
from fedarena.simulation.setup import build_trial

MEAN = Backend(FlatModel(MeanEstimator(), "regression"), batched=False)


def batch(*ys, x=None, index=None) -> Batch:
    """One client's minibatch with targets ``ys`` (inputs: ones unless given)."""
    y = torch.tensor([ys], dtype=torch.float32)
    x = torch.ones(1, len(ys), 1) if x is None else x
    index = torch.arange(len(ys))[None] if index is None else index
    return Batch(x, y, torch.ones(1, len(ys)), torch.ones(1), index)


def context(w_round, lr=0.5, backend=MEAN, train=None) -> StepContext:
    w = torch.tensor(w_round, dtype=torch.float32).reshape(-1)
    return StepContext(backend, lr, w, torch.tensor([0]), None, False, train=train)


@pytest.mark.parametrize("name", ["finetuning", "ewc", "skl", "per_fedavg", "mapper", "l2sgd", "apfl"])
def test_mode_is_checked_and_the_error_lists_the_modes(name):
    with pytest.raises(ConfigError, match="mode must be one of paper, reference; got 'refrence'"):
        build_method({"name": name, "mode": "refrence"})


def test_l2sgd_reference_sends_v_minus_the_mean_and_moves_it_by_n_over_k():
    # Prepare: K = 4 devices, w_bar = (1, 1); devices 0 and 2 started the round at v0 and ended at v
    v0, v = torch.tensor([[2.0, 2.0], [2.0, 0.0]]), torch.tensor([[3.0, 1.0], [1.0, 5.0]])
    w_bar, ids = torch.ones(2), torch.tensor([0, 2])
    info = ServerInfo(torch.ones(2), None, ids, 0.5)

    def mean(updates, weights, losses, client_weights=None):
        return updates.mean(0)

    results = {}
    for mode in ("paper", "reference"):
        method = build_method({"name": "l2sgd", "mode": mode})
        clients = {"personal": torch.zeros(4, 2)}
        sent, clients = method.local_result({"v": v, "v0": v0}, w_bar, clients, ids)
        results[mode] = method.server_step(w_bar, clients, sent, info, mean)[0]
        assert torch.equal(clients["personal"][ids], v)
    # Assert: reference: w_bar + (2/4) mean(v - w_bar) = (1, 1) + 0.5 (1, 2); paper: + 0.5 mean(v - v0) = 0.5 (0, 2)
    assert results["reference"].tolist() == [1.5, 2.0]
    assert results["paper"].tolist() == [1.0, 2.0]


def test_apfl_reference_takes_the_rounds_first_gradient_at_the_stored_interpolation():
    # Prepare: alpha 0.5, lr 0.5, local model v = 2, stored interpolation 3, global model 0; two steps on y = 1
    ids, w = torch.tensor([0]), torch.zeros(1)
    out = {}
    for mode in ("paper", "reference"):
        method = build_method({"name": "apfl", "alpha": 0.5, "mode": mode})
        clients = {"local": torch.tensor([[2.0]]), "alpha": torch.tensor([0.5]), "interp": torch.tensor([[3.0]])}
        local = method.local_init(w, clients, ids)
        for _ in range(2):
            local = method.local_step(local, batch(1.0), context([0.0]))
        out[mode] = (local["v"].item(), *method.local_result(local, w, clients, ids))
    # Assert (reference): step 1: g at 3 is 2, v = 2 - 0.5 * 0.5 * 2 = 1.5, w = 0.5; step 2: interpolation
    # 0.5 * 1.5 + 0.5 * 0.5 = 1 (g 0), v = 1.5, w = 0.75; stored 0.5 * 1.5 + 0.5 * 0.75 = 1.125
    v, update, clients = out["reference"]
    assert v == 1.5 and update.tolist() == [[0.75]] and clients["interp"].tolist() == [[1.125]]
    # paper: step 1 at 0.5 * 2 + 0.5 * 0 = 1 (g 0), v = 2; step 2 at 1.25: v = 2 - 0.25 * 0.25 = 1.9375
    assert out["paper"][0] == 1.9375
    assert set(build_method({"name": "apfl", "mode": "reference"}).init_clients(torch.ones(3), np.ones(2))) == {
        "local", "alpha", "interp"}


def test_mapper_reference_trains_local_models_against_the_fixed_global_model_and_steps_it_once():
    # Prepare: u = 2, lambda_k = 0, global 0, lr 0.5; whole training set y = (2, 4); minibatches y = 4, then 2
    method = build_method({"name": "mapper", "mode": "reference"})
    train = batch(2.0, 4.0)
    clients = {"local": torch.tensor([[2.0]]), "mix": torch.zeros(1)}
    ids, w = torch.tensor([0]), torch.zeros(1)
    local = method.local_init(w, clients, ids)
    for y in (4.0, 2.0):
        local = method.local_step(local, batch(y), context([0.0], train=train))
    update, clients = method.local_result(local, w, clients, ids)
    # Assert: u after step 1 = 2 + 0.5 lam (4 - 2 lam): 2.4375 / 2.75 / 2.9375; the step-2 interpolations
    # 0.609 / 1.375 / 2.203 have training losses 0.5 ((b - 3)^2 + 1): lam = 0.75 wins; its u after step 2:
    # 2.9375 - 0.375 (2.203125 - 2) = 2.861328125; global step -0.5 * 0.25 * (0.75 * 2.861328125 - 2)
    assert clients["mix"].tolist() == [0.75] and clients["local"].tolist() == [[2.861328125]]
    assert update.tolist() == [[-0.01824951171875]]


def test_mapper_reference_finetunes_the_interpolation_before_evaluation():
    method = build_method({"name": "mapper", "mode": "reference"})
    assert build_method({"name": "mapper"}).finalize_epochs == 0 and method.finalize_epochs == 40
    assert method.finalize_steps(np.array([2, 100]), 32).tolist() == [40, 125]
    clients = {"local": torch.tensor([[4.0]]), "mix": torch.tensor([0.25])}
    local = method.finalize_init(torch.zeros(1), clients, torch.tensor([0]))  # 0.25 * 4 + 0.75 * 0 = 1
    local = method.finalize_step(local, batch(3.0), context([0.0]))  # 1 - 0.5 (1 - 3) = 2
    clients = method.finalize_result(local, torch.zeros(1), clients, torch.tensor([0]))
    assert method.eval_params(torch.zeros(1), clients).tolist() == [[2.0]]


def test_per_fedavg_reference_meta_step_takes_three_separate_minibatches():
    # Prepare: w = 0, lr 0.5, beta 0.125, delta 0.25; minibatches y = 1, 3, 5
    out = {}
    for mode, batches in (("paper", [batch(1.0)]), ("reference", [batch(1.0), batch(3.0), batch(5.0)])):
        method = build_method({"name": "per_fedavg", "beta": 0.125, "delta": 0.25, "mode": mode})
        local = method.local_init(torch.zeros(1), {}, torch.tensor([0]))
        for b in batches:
            local = method.local_step(local, b, context([0.0]))
        out[mode] = local["w"].item()
    # Assert: reference: g1 = -1 (y=1), inner 0.5; g2 = 0.5 - 3 = -2.5; H g2 = -2.5 (y=5);
    # w = 0 - 0.125 (-2.5 + 0.5 * 2.5) = 0.15625. Paper, all on y = 1: g2 = -0.5, w = 0.03125
    assert out == {"reference": 0.15625, "paper": 0.03125}


def test_per_fedavg_reference_refuses_a_round_that_ends_inside_a_meta_step():
    method = build_method({"name": "per_fedavg", "mode": "reference"})
    local = method.local_init(torch.zeros(1), {}, torch.tensor([0]))
    local = method.local_step(method.local_step(local, batch(1.0), context([0.0])), batch(1.0), context([0.0]))
    with pytest.raises(ConfigError, match="local_steps to a multiple of 3"):
        method.local_result(local, torch.zeros(1), {}, torch.tensor([0]))


def test_reference_finetuning_step_counts():
    # max(int(iters * n / B), iters): n = 10, 100, 1000 with B = 32 and 40 iterations: 12 -> 40, 125, 1250
    assert reference_finetune_steps(np.array([10, 100, 1000]), 32, 40).tolist() == [40, 125, 1250]
    per_fedavg = build_method({"name": "per_fedavg", "mode": "reference"})
    assert per_fedavg.finalize_epochs == 40 and build_method({"name": "per_fedavg"}).finalize_epochs == 1
    assert per_fedavg.finalize_steps(np.array([10, 100]), 32).tolist() == [40, 125]
    assert build_method({"name": "per_fedavg"}).finalize_steps(np.array([10]), 32) is None
    ewc = build_method({"name": "ewc", "mode": "reference", "epochs": 2})
    assert ewc.finalize_steps(np.array([10, 100]), 32).tolist() == [2 + 4, 6 + 4]  # + the 4 Fisher batches


def test_the_engine_finetunes_each_device_for_its_reference_step_count_on_full_minibatches(small_config):
    # Prepare: a trained per_fedavg (reference) run on 8 digits devices; count the finetuning steps per device
    cfg = small_config(dataset={"name": "digits", "num_clients": 8}, model={"name": "mlp", "hidden": [8]},
                       method={"name": "per_fedavg", "mode": "reference", "epochs": 3}, rounds=1,
                       clients_per_round=3, local_steps=3, batch_size=16)
    trial = build_trial(cfg)
    state = run_round(trial, initial_state(trial))
    seen = np.zeros(8, dtype=np.int64)
    real_step = trial.method.finalize_step

    def counting_step(local, b, ctx):
        active = b.active.bool()
        seen[ctx.ids[active].numpy()] += 1
        sizes = ctx.train_sizes[active].clamp(max=16).to(b.mask.dtype)
        assert torch.equal(b.mask[active].sum(1), sizes)  # full minibatches of min(B, n)
        return real_step(local, b, ctx)

    trial.method.finalize_step = counting_step
    finalize(trial, state)
    # Assert: max(int(3 n / 16), 3) steps for each device
    assert seen.tolist() == np.maximum(3 * trial.train.sizes // 16, 3).tolist()


def test_ewc_reference_fisher_averages_squared_minibatch_gradients_of_four_batches():
    # Prepare: w* = 0, lr 0.5, lam 1; Fisher batches y = (0, 2), (2, 4), (4, 4), (0, 0); then y = (2, 2) twice
    method = build_method({"name": "ewc", "mode": "reference", "lam": 1.0})
    ctx = context([0.0])
    local = method.finalize_init(torch.zeros(1), {}, torch.tensor([0]))
    for ys in ((0.0, 2.0), (2.0, 4.0), (4.0, 4.0), (0.0, 0.0)):
        local = method.finalize_step(local, batch(*ys), ctx)
    # Assert: minibatch gradients -1, -3, -4, 0: Fisher (1 + 9 + 16 + 0) / 4 = 6.5, v still w*. (Paper: the
    # first batch's per-sample gradients 0 and -2: Fisher (0 + 4) / 2 = 2.)
    assert local["fisher"].tolist() == [[6.5]] and local["v"].tolist() == [[0.0]]
    local = method.finalize_step(local, batch(2.0, 2.0), ctx)  # v = 0 - 0.5 (0 - 2) = 1
    local = method.finalize_step(local, batch(2.0, 2.0), ctx)  # g = -1 + 6.5 (1 - 0): v = 1 - 0.5 * 5.5
    assert local["v"].tolist() == [[-1.75]]
    paper = build_method({"name": "ewc", "lam": 1.0})
    first = paper.finalize_step(paper.finalize_init(torch.zeros(1), {}, torch.tensor([0])), batch(0.0, 2.0), ctx)
    assert first["fisher"].tolist() == [[2.0]]


def test_skl_reference_adds_lam_times_the_kl_gradient_summed_over_the_whole_training_set():
    # Prepare: logistic regression on one feature, 2 classes: logits (a x, 0) with a = ln 3; w* = 0 (p* =
    # (1/2, 1/2)). Training set x = (0, 1), both label 0; the minibatch is the x = 0 sample alone.
    model = FlatModel(nn.Sequential(nn.Flatten(), nn.Linear(1, 2)), "classification")  # (W00, W10, b0, b1)
    backend = Backend(model, batched=False)
    train = Batch(torch.tensor([[[0.0], [1.0]]]), torch.tensor([[0, 0]]), torch.ones(1, 2), torch.ones(1),
                  torch.tensor([[0, 1]]))
    minibatch = Batch(train.x[:, :1], train.y[:, :1], torch.ones(1, 1), torch.ones(1), train.index[:, :1])
    v = torch.tensor([[math.log(3.0), 0.0, 0.0, 0.0]])
    ctx = context([0.0] * 4, backend=backend, train=train)
    grads = {}
    for mode in ("paper", "reference"):
        method = build_method({"name": "skl", "mode": mode, "lam": 2.0})
        local = method.prepare({"v": v}, minibatch, ctx)
        grads[mode] = method.personal_grad(local, minibatch, ctx)[0]
    # Assert: cross-entropy at x = 0: p = (1/2, 1/2), gradient (0, 0, -1/2, 1/2). SKL at x = 1 is
    # (sigmoid(z) - 1/2) z with z = a, derivative D = sigmoid'(z) z + sigmoid(z) - 1/2 = 0.1875 ln 3 + 0.25,
    # and dz/d(W00, W10, b0, b1) = (1, -1, 1, -1); at x = 0 it is 0. Reference: + lam D (1, -1, 1, -1).
    d = 0.1875 * math.log(3.0) + 0.25
    expected = torch.tensor([2 * d, -2 * d, -0.5 + 2 * d, 0.5 - 2 * d])
    torch.testing.assert_close(grads["reference"], expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grads["paper"], torch.tensor([0.0, 0.0, -0.5, 0.5]), rtol=1e-5, atol=1e-6)
    assert build_method({"name": "skl", "mode": "reference"}).needs_train and not build_method({"name": "skl"}).needs_train


# skl at lam 0.1: at lam 1 the reference's KL gradient, summed over a large device's whole training set, makes its
# finetuning unstable (a chaotic trajectory that two summation orders do not follow alike)
REFERENCE_RUNS = {
    "finetuning": {"epochs": 1}, "ewc": {"epochs": 1}, "skl": {"epochs": 1, "lam": 0.1}, "per_fedavg": {"epochs": 1},
    "mapper": {"epochs": 1}, "l2sgd": {}, "apfl": {},
}


@pytest.mark.parametrize("name", sorted(REFERENCE_RUNS))
def test_reference_modes_run_and_backends_agree(small_config, name):
    method = {"name": name, "mode": "reference", **REFERENCE_RUNS[name]}
    settings = {"dataset": {"name": "digits", "num_clients": 8}, "model": {"name": "mlp", "hidden": [8]},
                "rounds": 2, "clients_per_round": 3, "local_steps": 3, "batch_size": 8, "eval_every": 2}
    seq, _ = simulate(build_trial(small_config(method=method, backend="sequential", **settings)))
    bat, _ = simulate(build_trial(small_config(method=method, backend="batched", **settings)))
    assert not seq.diverged and seq.history[-1]["round"] == 2
    torch.testing.assert_close(bat.w, seq.w, rtol=1e-4, atol=1e-5)
    for key in seq.clients:
        torch.testing.assert_close(bat.clients[key], seq.clients[key], rtol=1e-4, atol=1e-5)
