"""Non-finite updates under differential privacy: zeroed before clipping (TFF's zeroing), so a device whose data
make its update NaN neither drops a round nor stops the run, under central and local DP, and a device's own table
(Ditto's personal model, which never leaves it) does not decide either; without DP the round is dropped as before."""

import math

import pytest
import torch

from fedarena.config import ExperimentConfig
from fedarena.privacy.noise import clip_rows, local_privatize, unclipped_count, zero_non_finite
from fedarena.simulation.engine import simulate
from fedarena.simulation.setup import build_trial

BASE = {"dataset": {"name": "digits", "num_clients": 10}, "model": {"name": "mlp", "hidden": [8]}, "rounds": 4,
        "eval_every": 2, "clients_per_round": 10, "local_steps": 1, "batch_size": 16, "lr": 0.2,
        "sampling": "uniform", "on_divergence": "continue"}
PRIVACY = {"none": {"name": "none"}, "central": {"name": "central", "noise_multiplier": 1.0, "clip": 1.0},
           "local": {"name": "local", "noise_multiplier": 1.0, "clip": 1.0}}


def test_a_non_finite_row_is_zeroed_and_the_finite_rows_are_untouched():
    updates = torch.tensor([[3.0, 4.0], [float("nan"), 1.0], [1.0, float("inf")], [0.3, 0.4]])
    clipped = clip_rows(updates, 1.0)
    assert clipped[1].tolist() == [0.0, 0.0] and clipped[2].tolist() == [0.0, 0.0]
    assert torch.allclose(clipped[0], torch.tensor([0.6, 0.8])) and torch.equal(clipped[3], updates[3])
    assert unclipped_count(updates, 1.0) == 3  # the zeroed rows lie inside the bound
    finite = torch.randn(5, 7)
    assert zero_non_finite(finite) is finite  # nothing copied in the usual case
    noisy = local_privatize(updates, 1.0, 1.0, torch.Generator().manual_seed(0))
    assert bool(torch.isfinite(noisy).all())


def run_with_a_nan_device(privacy: str, method: str = "global") -> tuple:
    trial = build_trial(ExperimentConfig.from_dict({**BASE, "method": {"name": method}, "privacy": PRIVACY[privacy]}))
    rows = trial.train.rows([3])  # device 3's training data holds a NaN: its update is NaN every round
    trial.train.x[rows[0]] = float("nan")
    state, _ = simulate(trial)
    return state, trial


@pytest.mark.parametrize("privacy", ["central", "local"])
def test_under_dp_a_nan_device_neither_drops_a_round_nor_diverges_the_run(privacy):
    state, _ = run_with_a_nan_device(privacy)
    assert not state.diverged and math.isfinite(float(state.w.sum()))


def test_without_dp_the_same_device_drops_the_round():
    state, _ = run_with_a_nan_device("none")
    assert state.diverged


def test_under_dp_a_devices_own_table_does_not_drop_the_round():
    # Ditto's personal model of device 3 goes NaN and stays on the device; the released global model decides
    state, trial = run_with_a_nan_device("central", "ditto")
    assert not state.diverged and math.isfinite(float(state.w.sum()))
