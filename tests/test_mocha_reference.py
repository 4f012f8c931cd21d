"""MOCHA ``mode: reference`` against the authors' MATLAB (gingsmith/fmtl, ``opt/run_mocha.m``), transcribed
below into float64 NumPy: every task's SDCA pass over floor(n_t * sdca_frac) coordinates of a given
permutation in every W step, no bias feature, the eigenvalue clip only when W^T W has a negative eigenvalue.
Both sides get the same permutations; ``mode: paper`` is checked to be the default and unchanged."""

import math

import numpy as np
import pytest
import scipy.linalg
import torch

from fedarena.config import ExperimentConfig
from fedarena.errors import ConfigError
from fedarena.methods import build_method
from fedarena.methods.base import ServerInfo, StepContext
from fedarena.methods.mocha import EIGEN_FLOOR, PAPER_LAM, REFERENCE_LAM, reference_root, relationship, safety
from fedarena.models.batch import Batch
from fedarena.simulation.data import round_plan
from fedarena.simulation.engine import initial_state, run_round, simulate
from fedarena.simulation.setup import build_trial


def run_mocha_m(xs, ys, lam, sdca_frac, perms):
    """``run_mocha.m`` with mocha_outer_iters = 1, mocha_inner_iters = len(perms), sys_het = 0: len(perms) W
    updates, then the Sigma / rho update. ``perms[hh][t]``: the W step's ``randperm(n(t))``, 0-based.
    Returns (W [d, m], Sigma [m, m], rho, alpha per task)."""
    m, d = len(xs), xs[0].shape[1]
    n = [len(y) for y in ys]
    w = np.zeros((d, m))
    alpha = [np.zeros(k) for k in n]
    sigma = np.eye(m) / m
    rho = 1.0
    for tperms in perms:
        delta_w, delta_b = np.zeros((d, m)), np.zeros((d, m))
        for t in range(m):
            tperm, alpha_t, curr_sig = tperms[t], alpha[t], sigma[t, t]
            local_iters = n[t] * sdca_frac
            for s in range(1, math.floor(local_iters) + 1):  # MATLAB's 1:local_iters
                idx = tperm[s % n[t]]  # tperm(mod(s, n(t)) + 1), 1-based there
                alpha_old, curr_y, curr_x = alpha_t[idx], ys[t][idx], xs[t][idx]
                update = curr_y * curr_x @ (w[:, t] + rho * delta_w[:, t])
                grad = lam * n[t] * (1.0 - update) / (curr_sig * rho * (curr_x @ curr_x)) + alpha_old * curr_y
                alpha_t[idx] = curr_y * max(0.0, min(1.0, grad))
                delta_w[:, t] += sigma[t, t] * (alpha_t[idx] - alpha_old) * curr_x / (lam * n[t])
                delta_b[:, t] += (alpha_t[idx] - alpha_old) * curr_x / n[t]
        for t in range(m):
            for tt in range(m):
                w[:, t] += delta_b[:, tt] * sigma[t, tt] * (1.0 / lam)
    a = w.T @ w
    if np.any(np.linalg.eigvalsh(a) < 0):
        dm, v = np.linalg.eigh(a)
        dm[dm <= 1e-7] = 1e-7
        a = v @ np.diag(dm) @ v.T
    sqm = np.real(scipy.linalg.sqrtm(a))
    sigma = sqm / np.trace(sqm)
    rho = np.max(np.abs(sigma).sum(1) / np.diag(sigma))
    return w, sigma, rho, alpha


def tiny_problem():
    """3 tasks of 5, 6 and 8 samples, 3 features, labels +-1 (a per-task direction, a few flipped), and two
    W steps' permutations."""
    gen = np.random.default_rng(7)
    sizes = (5, 6, 8)
    xs = [gen.normal(size=(k, 3)) for k in sizes]
    ys = [np.where(x @ gen.normal(size=3) > 0, 1.0, -1.0) for x in xs]
    ys[0][0], ys[2][3] = -ys[0][0], -ys[2][3]
    perms = [[gen.permutation(k) for k in sizes] for _ in range(2)]
    return xs, ys, perms


def epoch_batches(x, y, offsets, orders, batch_size):
    """The engine's epoch plan for these per-device sample orders: each order cut into minibatches of
    min(B, n_t), short devices padded (mask 0) and inactive once their epoch is done."""
    sizes = [len(o) for o in orders]
    widths = [min(batch_size, k) for k in sizes]
    steps = max(-(-k // b) for k, b in zip(sizes, widths, strict=True))
    width = min(batch_size, max(sizes))
    index = np.repeat(np.asarray(offsets)[None, :, None], steps, 0).repeat(width, 2)
    mask = np.zeros(index.shape)
    for t, (order, b) in enumerate(zip(orders, widths, strict=True)):
        for s, start in enumerate(range(0, len(order), b)):
            part = order[start : start + b]
            index[s, t, : len(part)] += part
            mask[s, t, : len(part)] = 1.0
    index, mask = torch.as_tensor(index), torch.as_tensor(mask, dtype=x.dtype)
    active = (mask.sum(-1) > 0).to(x.dtype)
    return [Batch(x[index[s]], y[index[s]], mask[s], active[s], index[s]) for s in range(steps)]


def mocha_reference_rounds(xs, ys, perms, lam, sdca_frac, batch_size):
    """fedarena's mocha (reference mode) through its hooks: one round per W step, all devices in one group,
    each device's minibatches in the order run_mocha.m visits its permutation; Sigma after the last."""
    mocha = build_method({"name": "mocha", "mode": "reference", "lam": lam, "omega_every": len(perms),
                          "sdca_frac": sdca_frac})
    sizes = np.array([len(y) for y in ys])
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    x, y = torch.as_tensor(np.concatenate(xs)), torch.as_tensor(np.concatenate(ys))
    ids, w0 = torch.arange(len(xs)), torch.zeros(xs[0].shape[1] + 1, dtype=torch.float64)
    epoch_steps = torch.as_tensor(-(-sizes // np.minimum(batch_size, sizes)))
    ctx = StepContext(None, 0.1, w0, ids, None, False, torch.as_tensor(sizes), epoch_steps)
    clients = mocha.init_clients(w0, sizes)
    for r, tperms in enumerate(perms):
        orders = [np.roll(p, -1) for p in tperms]  # tperm(2), tperm(3), ..., tperm(n), tperm(1)
        local = mocha.local_init(w0, clients, ids)
        for batch in epoch_batches(x, y, offsets, orders, batch_size):
            local = mocha.local_step(local, batch, ctx)
        updates, clients = mocha.local_result(local, w0, clients, ids)
        _, clients = mocha.server_step(w0, clients, updates, ServerInfo(torch.ones(len(xs)), None, ids, 0.1, r),
                                       None)
    return clients


@pytest.mark.parametrize("sdca_frac,batch_size", [(0.5, 3), (1.0, 3), (0.5, 8), (0.7, 2)])
def test_two_w_steps_and_a_sigma_step_match_run_mocha_m(sdca_frac, batch_size):
    # Prepare
    xs, ys, perms = tiny_problem()
    # Execute
    w, sigma, rho, alpha = run_mocha_m(xs, ys, 0.1, sdca_frac, perms)
    clients = mocha_reference_rounds(xs, ys, perms, 0.1, sdca_frac, batch_size)
    # Assert: the same models (no bias: the last parameter stays 0), relationship, safety factor and duals
    close = dict(atol=1e-6, rtol=0)
    torch.testing.assert_close(clients["personal"][:, :-1], torch.as_tensor(w.T), **close)
    assert clients["personal"][:, -1].abs().max() == 0
    torch.testing.assert_close(clients["sigma"], torch.as_tensor(sigma), **close)
    torch.testing.assert_close(safety(clients["sigma"]), torch.tensor(rho, dtype=torch.float64), **close)
    torch.testing.assert_close(clients["alpha"], torch.as_tensor(np.concatenate(alpha)), **close)
    assert 0 < np.abs(np.concatenate(alpha)).max() <= 1 and np.abs(w).max() > 0  # the steps did something


def rotated(eigenvalues):
    q, _ = np.linalg.qr(np.random.default_rng(3).normal(size=(3, 3)))
    return q, torch.as_tensor(q @ np.diag(eigenvalues) @ q.T)


def test_the_eigenvalue_clip_applies_only_when_an_eigenvalue_is_negative():
    # Prepare: W^T W with small positive eigenvalues, and one with a (rounding-sized) negative one
    q, positive = rotated([4.0, 1e-9, 1e-10])
    _, negative = rotated([4.0, 1e-9, -1e-12])
    # Execute
    kept, clipped = reference_root(positive), reference_root(negative)
    # Assert: kept as they are (the paper mode floors them at 1e-7), or every eigenvalue <= 1e-7 raised to 1e-7
    exact = torch.as_tensor(q @ np.diag(np.sqrt([4.0, 1e-9, 1e-10])) @ q.T)
    floored = torch.as_tensor(q @ np.diag(np.sqrt([4.0, EIGEN_FLOOR, EIGEN_FLOOR])) @ q.T)
    torch.testing.assert_close(kept, exact, atol=1e-9, rtol=0)
    torch.testing.assert_close(clipped, floored, atol=1e-9, rtol=0)
    assert (kept - floored).abs().max() > 1e-5


def vehicle(root, **overrides):
    data = {"dataset": {"name": "vehicle", "data_dir": str(root), "num_clients": 4, "train_sizes": "full"},
            "method": {"name": "mocha", "mode": "reference", "lam": 0.1, "omega_every": 2}, "rounds": 2,
            "clients_per_round": 4, "local_epochs": 1, "batch_size": 8, "eval_every": 2, "seed": 0}
    return ExperimentConfig.from_dict({**data, **overrides})


@pytest.mark.parametrize("backend", ["batched", "sequential"])
def test_engine_rounds_are_run_mocha_m_on_the_rounds_epoch_permutations(linear_vehicle, backend):
    # Prepare: the permutations are each device's epoch plan of the round (keyed by seed, round, device)
    trial = build_trial(vehicle(linear_vehicle, backend=backend))
    pool, everyone = trial.train, np.arange(4)
    xs = [pool.x[o : o + k].double().numpy() for o, k in zip(pool.offsets, pool.sizes, strict=True)]
    ys = [pool.y[o : o + k].double().numpy() for o, k in zip(pool.offsets, pool.sizes, strict=True)]
    perms = []
    for r in range(2):
        index, mask, _ = round_plan(pool, everyone, 0, 1, 8, 0, r)
        orders = [index[:, t][mask[:, t] > 0].numpy() - pool.offsets[t] for t in everyone]
        perms.append([np.roll(order, 1) for order in orders])  # run_mocha.m starts at tperm(2)
    # Execute
    state = run_round(trial, run_round(trial, initial_state(trial)))
    w, sigma, rho, _ = run_mocha_m(xs, ys, 0.1, 0.5, perms)
    # Assert (the engine computes in float32)
    close = dict(atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(state.clients["personal"][:, :-1].double(), torch.as_tensor(w.T), **close)
    torch.testing.assert_close(state.clients["sigma"].double(), torch.as_tensor(sigma), **close)
    torch.testing.assert_close(safety(state.clients["sigma"]).double(), torch.tensor(rho, dtype=torch.float64),
                               **close)


def test_reference_mode_needs_every_device_every_round_and_epoch_plans_before_training(linear_vehicle):
    # build_trial runs the checks `fedarena bench run` runs for every trial before any starts
    with pytest.raises(ConfigError, match="clients_per_round to the number of devices"):
        build_trial(vehicle(linear_vehicle, clients_per_round=2))
    with pytest.raises(ConfigError, match="local_epochs >= 1"):
        build_trial(vehicle(linear_vehicle, local_epochs=0, local_steps=2))


def test_mode_defaults_and_checks():
    assert build_method({"name": "mocha"}).lam == PAPER_LAM == 0.001
    assert build_method({"name": "mocha", "mode": "reference"}).lam == REFERENCE_LAM
    assert build_method({"name": "mocha", "mode": "reference"}).sdca_frac == 0.5
    with pytest.raises(ConfigError, match="sdca_frac applies to mode=reference"):
        build_method({"name": "mocha", "sdca_frac": 0.5})
    with pytest.raises(ConfigError, match=r"sdca_frac must be in \(0, 1\]"):
        build_method({"name": "mocha", "mode": "reference", "sdca_frac": 1.5})
    with pytest.raises(ConfigError, match="mode must be one of paper, reference"):
        build_method({"name": "mocha", "mode": "authors"})


def test_paper_mode_is_the_default_and_keeps_the_bias_and_the_clip(linear_vehicle):
    # Prepare
    paper = {"name": "mocha", "lam": 0.01, "omega_every": 3}
    runs = {}
    # Execute
    for label, section in {"default": paper, "paper": {**paper, "mode": "paper"}}.items():
        cfg = vehicle(linear_vehicle, method=section, rounds=6, clients_per_round=2)
        runs[label] = simulate(build_trial(cfg))[0].clients
    # Assert: the same numbers; the bias parameter is trained; Sigma is the always-clipped root
    for key in ("personal", "sigma", "alpha"):
        assert torch.equal(runs["default"][key], runs["paper"][key])
    assert runs["paper"]["personal"][:, -1].abs().max() > 0
    sigma = relationship(runs["paper"]["personal"])
    assert torch.equal(runs["paper"]["sigma"], sigma)  # the 6th round ends with a Sigma step
