"""MOCHA: the SDCA coordinate step by hand, the relationship matrix, a run on Vehicle-format data, and the
errors for the models and tasks it is not defined for."""

import math

import numpy as np
import pytest
import torch

from fedarena.config import ExperimentConfig
from fedarena.errors import ConfigError
from fedarena.methods import build_method
from fedarena.methods.base import ServerInfo, StepContext
from fedarena.methods.mocha import relationship
from fedarena.models.batch import Batch
from fedarena.simulation.experiment import run_experiment
from fedarena.simulation.setup import build_trial


def test_two_sdca_steps_by_hand():
    # Prepare: one device (Sigma = [[1]], rho = 1), lam 0.5, two samples x = 1 (y = +1) and x = -1 (y = -1);
    # with the bias feature x~ = (1, 1) and (-1, 1), |x~|^2 = 2, n = 2
    mocha = build_method({"name": "mocha", "lam": 0.5})
    clients = mocha.init_clients(torch.zeros(2), np.array([2]))
    ctx = StepContext(None, 0.1, torch.zeros(2), torch.tensor([0]), None, False, torch.tensor([2]))
    batch = Batch(torch.tensor([[[1.0], [-1.0]]]), torch.tensor([[1.0, -1.0]]), torch.ones(1, 2), torch.ones(1),
                  torch.tensor([[0, 1]]))
    # Execute
    local = mocha.local_step(mocha.local_init(torch.zeros(2), clients, ctx.ids), batch, ctx)
    updates, clients = mocha.local_result(local, torch.zeros(2), clients, ctx.ids)
    _, clients = mocha.server_step(torch.zeros(2), clients, updates, ServerInfo(torch.ones(1), None, ctx.ids, 0.1),
                                   None)
    # Assert: sample 1: margin 0, step 0.5 * 2 * 1 / 2 = 0.5 -> alpha 0.5, dB (0.25, 0.25);
    # sample 2: margin -(-0.5 + 0.5) = 0 -> alpha -0.5, dB += (0.25, -0.25); w = dB / lam = (1, 0)
    assert clients["alpha"].tolist() == [0.5, -0.5]
    assert updates.tolist() == [[0.5, 0.0]]
    assert clients["personal"].tolist() == [[1.0, 0.0]]


def test_relationship_of_two_equal_tasks_and_an_orthogonal_one():
    # W^T W = [[1, 1, 0], [1, 1, 0], [0, 0, 1]]: eigenvalues 2, 1 and 0 (floored at 1e-7, as the authors do),
    # so the square root is [[s + e, s - e, 0], [s - e, s + e, 0], [0, 0, 1]], s = 1/sqrt(2), e = sqrt(1e-7)/2
    personal = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    s, e = 1 / math.sqrt(2), math.sqrt(1e-7) / 2
    root = torch.tensor([[s + e, s - e, 0], [s - e, s + e, 0], [0, 0, 1]], dtype=torch.float64)
    torch.testing.assert_close(relationship(personal), root / (2 * s + 2 * e + 1), atol=1e-12, rtol=0)


def vehicle_config(tmp_path, **overrides):
    data = {"dataset": {"name": "vehicle", "data_dir": str(tmp_path), "num_clients": 4, "train_sizes": "full"},
            "method": {"name": "mocha", "lam": 0.01, "omega_every": 5}, "rounds": 20, "clients_per_round": 2,
            "local_epochs": 1, "batch_size": 8, "eval_every": 10, "seed": 0}
    return ExperimentConfig.from_dict({**data, **overrides})


def test_mocha_learns_each_devices_linear_rule(linear_vehicle):
    result = run_experiment(vehicle_config(linear_vehicle))
    assert result["config"]["model"]["name"] == "svm"
    assert result["final"]["acc_pooled"] > 0.85 and result["final"]["acc_worst10"] > 0.7


def test_mocha_refuses_a_non_convex_model_and_other_tasks(linear_vehicle):
    with pytest.raises(ConfigError, match="defined for model 'svm'.*not 'mlp'; set model.name=svm"):
        build_trial(vehicle_config(linear_vehicle, model={"name": "mlp"}))
    with pytest.raises(ConfigError, match="mocha.*binary_pm1"):
        build_trial(ExperimentConfig.from_dict({"dataset": {"name": "digits"}, "model": {"name": "svm"},
                                                "method": {"name": "mocha"}}))
    with pytest.raises(ConfigError, match="lam > 0"):
        build_method({"name": "mocha", "lam": 0.0})
