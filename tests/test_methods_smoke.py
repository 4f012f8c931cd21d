"""Every registered method and aggregator runs on digits (methods on both backends, with the same numbers),
and methods are reachable via the CLI. The lists come from the registries: a new component is covered the
moment it is registered."""

import json

import pytest
import torch

from fedarena.cli import main
from fedarena.methods import METHODS
from fedarena.methods.aggregators import AGGREGATORS
from fedarena.simulation.engine import simulate
from fedarena.simulation.setup import build_trial

# Settings that exercise more of a method than its defaults, or keep its finetuning phase short.
SETTINGS = {
    "term": {"t": 1.0}, "qffl": {"q": 1.0}, "fedprox": {"mu": 0.1}, "ditto": {"dynamic_lam": True},
    "fedtilt": {"q": 0.2, "tau": 1.0, "lam": -1.0}, "finetuning": {"epochs": 1},
    "ditto_finetune": {"epochs": 2}, "ewc": {"epochs": 1}, "skl": {"epochs": 1},
    "apfl": {"adaptive": True}, "per_fedavg": {"epochs": 1},
}


def tiny(small_config, method, backend, **more):
    settings = {"dataset": {"name": "digits", "num_clients": 8}, "model": {"name": "mlp", "hidden": [8]},
                "rounds": 2, "clients_per_round": 3, "local_steps": 2, "batch_size": 8, "eval_every": 2, **more}
    return small_config(method=method, backend=backend, **settings)


def tiny_for(small_config, method, backend, data_dir):
    """digits with an MLP, or, for a method defined only for a linear SVM on -1/+1 labels (MOCHA), a tiny
    Vehicle-format dataset."""
    cls = METHODS.get(method["name"])
    if "classification" in cls.tasks and cls.models is None:
        return tiny(small_config, method, backend)
    return tiny(small_config, method, backend, model={"name": cls.models[0] if cls.models else "svm"},
                dataset={"name": "vehicle", "data_dir": str(data_dir), "num_clients": 4, "train_sizes": "full"})


@pytest.mark.parametrize("name", METHODS.names())
def test_method_runs_on_digits_and_backends_agree(small_config, linear_vehicle, name):
    method = {"name": name, **SETTINGS.get(name, {})}
    seq, seq_counts = simulate(build_trial(tiny_for(small_config, method, "sequential", linear_vehicle)))
    bat, bat_counts = simulate(build_trial(tiny_for(small_config, method, "batched", linear_vehicle)))
    assert not seq.diverged and seq.history[-1]["round"] == 2
    assert 0.0 <= seq.history[-1]["acc_pooled"] <= 1.0
    torch.testing.assert_close(bat.w, seq.w, rtol=1e-4, atol=1e-5)
    for key in seq.clients:
        torch.testing.assert_close(bat.clients[key], seq.clients[key], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", AGGREGATORS.names())
def test_aggregator_runs_on_digits(small_config, name):
    state, _ = simulate(build_trial(tiny(small_config, {"name": "global"}, "sequential", aggregator={"name": name})))
    assert not state.diverged and 0.0 <= state.history[-1]["acc_pooled"] <= 1.0


def test_methods_are_reachable_from_the_cli_with_their_hyperparameters(tmp_path):
    out = tmp_path / "fedtilt.json"
    main(["run", "--dataset", "digits", "--method", "fedtilt", "--rounds", "1", "--clients-per-round", "2",
          "--set", "dataset.num_clients=6", "--set", "model.hidden=[8]", "--set", "tau=2.0", "--set", "q=0.5",
          "--out", str(out), "--no-progress"])
    result = json.loads(out.read_text())
    assert result["config"]["method"] == {"name": "fedtilt", "q": 0.5, "tau": 2.0, "lam": 0.0, "mu": 0.01,
                                          "dist": "sq_euclidean"}
