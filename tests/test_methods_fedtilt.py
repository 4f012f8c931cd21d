"""FedTilt: Propositions 1 and 3, the tilted aggregation, and the tilted client loss through the backends."""

import math

import pytest
import torch

from fedarena.methods import build_method
from fedarena.methods.aggregators import make_aggregator
from fedarena.methods.base import ServerInfo
from fedarena.methods.tilted_loss import tilted_loss_fn
from fedarena.models.backends import Backend
from fedarena.models.batch import Batch
from fedarena.models.functional import FlatModel
from fedarena.models.zoo import MeanEstimator
from fedarena.simulation.engine import initial_state, run_round, sample_clients, simulate
from fedarena.simulation.setup import build_trial

TINY_MLP = {"name": "mlp", "hidden": [16]}


mean_rule = make_aggregator({"name": "mean"}, f=0)
NO_LOSSES = ServerInfo(torch.ones(2), None, torch.tensor([0, 1]), 0.01)  # a round of two equal-weight clients


@pytest.mark.parametrize("backend", ["sequential", "batched"])
def test_fedtilt_with_zero_tilts_is_ditto(small_config, backend):
    """Proposition 3: q = tau = lambda = 0 with squared Euclidean dist is Ditto (lambda = mu), number for number."""
    common = dict(model=TINY_MLP, rounds=4, backend=backend)
    ditto, _ = simulate(build_trial(small_config(method={"name": "ditto", "lam": 0.3}, **common)))
    tilt, _ = simulate(build_trial(small_config(method={"name": "fedtilt", "mu": 0.3}, **common)))
    assert torch.equal(tilt.w, ditto.w)
    assert torch.equal(tilt.clients["personal"], ditto.clients["personal"])


def test_fedtilt_with_large_mu_tracks_fedavg(small_config):
    """Proposition 1: the global model is FedAvg's whatever mu, and with mu large the personal models sit
    next to the round-start global model. mu = 1 / lr is the largest stable choice: the personal step is
    then v <- w^t - lr * grad F(v), one local step away from w^t."""
    common = dict(model=TINY_MLP, rounds=6, lr=0.05, local_steps=10)
    fedavg, _ = simulate(build_trial(small_config(method={"name": "global"}, **common)))
    trial = build_trial(small_config(method={"name": "fedtilt", "mu": 20.0}, **common))
    state = initial_state(trial)
    for _ in range(5):
        state = run_round(trial, state)
    w_start = state.w.clone()
    state = run_round(trial, state)
    torch.testing.assert_close(state.w, fedavg.w, rtol=1e-5, atol=1e-6)  # FedAvg's MLP step is fused
    last = torch.as_tensor(sample_clients(trial, 5))
    gap = (state.clients["personal"][last] - w_start).norm(dim=1)
    assert gap.max() < 0.1 * (w_start - trial.w0).norm()


def test_tilted_aggregation_weights_updates_by_exp_q_dist():
    updates = torch.tensor([[3.0, 0.0], [0.0, 1.0]])  # squared distances 9 and 1
    w = torch.tensor([1.0, 1.0])
    q = math.log(2.0) / 8  # exp(9 q) / exp(q) = 2: weights 2/3, 1/3
    out = build_method({"name": "fedtilt", "q": q}).server_step(w, {}, updates, NO_LOSSES, mean_rule)[0]
    torch.testing.assert_close(out, w + torch.tensor([2.0, 1 / 3]))
    flat = build_method({"name": "fedtilt", "q": 0.0}).server_step(w, {}, updates, NO_LOSSES, mean_rule)[0]
    torch.testing.assert_close(flat, w + torch.tensor([1.5, 0.5]))
    robust = build_method({"name": "fedtilt", "q": -q, "dist": "euclidean"})
    out = robust.server_step(w, {}, updates, NO_LOSSES, mean_rule)[0]  # distances 3, 1: weights 1 : 2^(1/4)
    far = 1 / (1 + 2**0.25)
    torch.testing.assert_close(out, w + torch.tensor([3 * far, 1 - far]))


@pytest.mark.parametrize("batched", [False, True])
def test_tilted_client_loss_gradient_through_the_backends(batched):
    """One-level TERM (tau = lambda = 0.5) on the point-estimation model: at w = 0 with targets 1 and 3 the
    losses are 0.5 and 4.5, the sample weights softmax(0.5 * loss) = (1, e^2) / (1 + e^2), and the
    gradient -(1 * p_1 + 3 * p_2); a padded slot is ignored."""
    model = FlatModel(MeanEstimator(), "regression")
    backend = Backend(model, batched)
    x = torch.ones(1, 3, 1)
    batch = Batch(x, torch.tensor([[1.0, 3.0, 50.0]]), torch.tensor([[1.0, 1.0, 0.0]]), torch.ones(1),
                  torch.zeros(1, 3, dtype=torch.long))
    values, grads = backend.grad_of(tilted_loss_fn(model, 0.5, 0.5), torch.zeros(1, 1), batch)
    p2 = math.exp(2) / (1 + math.exp(2))
    assert float(grads[0, 0]) == pytest.approx(-(1 - p2) - 3 * p2, rel=1e-6)
    assert float(values[0]) == pytest.approx(2 * math.log((math.exp(0.25) + math.exp(2.25)) / 2), rel=1e-6)


def test_fedtilt_with_tilts_trains_on_the_tilted_loss_on_both_backends(small_config):
    method = {"name": "fedtilt", "q": 0.5, "tau": 2.0, "lam": -1.0, "mu": 0.1}
    seq, _ = simulate(build_trial(small_config(method=method, model=TINY_MLP, rounds=2, backend="sequential")))
    bat, _ = simulate(build_trial(small_config(method=method, model=TINY_MLP, rounds=2, backend="batched")))
    plain, _ = simulate(build_trial(small_config(method={"name": "fedtilt", "mu": 0.1}, model=TINY_MLP, rounds=2)))
    torch.testing.assert_close(bat.w, seq.w, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(bat.clients["personal"], seq.clients["personal"], rtol=1e-4, atol=1e-5)
    assert not torch.allclose(seq.w, plain.w)
