"""Every method of this package runs on digits, on both backends, with the same numbers, and via the CLI."""

import json

import pytest
import torch

from fedarena.cli import main
from fedarena.simulation.engine import simulate
from fedarena.simulation.setup import build_trial

METHODS = [
    {"name": "term", "t": 1.0}, {"name": "qffl", "q": 1.0}, {"name": "afl"}, {"name": "fedprox", "mu": 0.1},
    {"name": "fedtilt", "q": 0.2, "tau": 1.0, "lam": -1.0}, {"name": "finetuning", "epochs": 1},
    {"name": "ditto_finetune", "epochs": 1}, {"name": "ewc", "epochs": 1}, {"name": "skl", "epochs": 1},
    {"name": "l2sgd"}, {"name": "apfl", "adaptive": True}, {"name": "mapper"}, {"name": "per_fedavg", "epochs": 1},
]


def tiny(small_config, method, backend):
    return small_config(method=method, backend=backend, dataset={"name": "digits", "num_clients": 8},
                        model={"name": "mlp", "hidden": [8]}, rounds=2, clients_per_round=3, local_steps=2,
                        batch_size=8, eval_every=2)


@pytest.mark.parametrize("method", METHODS, ids=[m["name"] for m in METHODS])
def test_method_runs_on_digits_and_backends_agree(small_config, method):
    seq, seq_counts = simulate(build_trial(tiny(small_config, method, "sequential")))
    bat, bat_counts = simulate(build_trial(tiny(small_config, method, "batched")))
    assert not seq.diverged and seq.history[-1]["round"] == 2
    assert 0.0 <= seq.history[-1]["acc_pooled"] <= 1.0
    torch.testing.assert_close(bat.w, seq.w, rtol=1e-4, atol=1e-5)
    for key in seq.clients:
        torch.testing.assert_close(bat.clients[key], seq.clients[key], rtol=1e-4, atol=1e-5)


def test_methods_are_reachable_from_the_cli_with_their_hyperparameters(tmp_path):
    out = tmp_path / "fedtilt.json"
    main(["run", "--dataset", "digits", "--method", "fedtilt", "--rounds", "1", "--clients-per-round", "2",
          "--set", "dataset.num_clients=6", "--set", "model.hidden=[8]", "--set", "tau=2.0", "--set", "q=0.5",
          "--out", str(out), "--no-progress"])
    result = json.loads(out.read_text())
    assert result["config"]["method"] == {"name": "fedtilt", "q": 0.5, "tau": 2.0, "lam": 0.0, "mu": 0.01,
                                          "dist": "sq_euclidean"}
