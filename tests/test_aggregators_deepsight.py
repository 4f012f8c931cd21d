"""DeepSight: NEUPs and threshold exceedings by hand, the division differences the server computes, a unique
answer (honest models of many labels, a cluster of single-label backdoor models), a run through the engine's probe,
and bad input in one line."""

import types

import numpy as np
import pytest
import torch

from fedarena.config import ExperimentConfig
from fedarena.errors import ConfigError
from fedarena.methods.aggregators import RoundDraw, check_aggregator
from fedarena.methods.aggregators.deepsight import deepsight, division_differences, neups_and_exceedings
from fedarena.methods.aggregators.probe import Probe
from fedarena.models.functional import FlatModel
from fedarena.simulation.experiment import run_experiment


def linear_probe(classes=4, inputs=3):
    model = FlatModel(torch.nn.Linear(inputs, classes).double(), "classification")
    return Probe(model, (inputs,), -1.0, 1.0, seed=0, device=torch.device("cpu"))


def test_neups_and_threshold_exceedings_by_hand():
    # one model: output weight rows of absolute sums 1, 0, 2 and bias 1, 0, 0: energies 2, 0, 2 -> squared 4, 0, 4
    weight = torch.tensor([[[1.0, 0.0], [0.0, 0.0], [1.0, -1.0]]])
    bias = torch.tensor([[1.0, 0.0, 0.0]])
    neups, exceedings = neups_and_exceedings(weight, bias, threshold=0.01)
    assert neups.tolist() == [[0.5, 0.0, 0.5]]
    assert exceedings.tolist() == [2]  # bound max(0.01, 1/3) x 0.5: two classes exceed it


def test_division_differences_are_the_mean_probability_ratios_on_the_probe_inputs():
    probe = linear_probe()
    w = torch.randn(probe.model.dim, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    u = 0.1 * torch.ones(1, probe.model.dim, dtype=torch.float64)
    ddif = division_differences(probe, w, u, seeds=2, samples=50)
    x = probe.inputs(1, 50)
    local, glob = probe.model.forward(w + u[0], x.double()).softmax(-1), probe.model.forward(w, x.double()).softmax(-1)
    assert ddif.shape == (2, 1, 4)
    assert np.allclose(ddif[1, 0], (local / (glob + 1e-6)).mean(0).numpy())
    assert bool((x >= -1).all() and (x <= 1).all()) and not torch.equal(probe.inputs(0, 50), x)


def test_the_single_label_cluster_is_dropped_and_the_honest_models_kept():
    # Prepare: 10 honest updates spread over every class, 5 backdoor updates pushing class 0 alone (HDBSCAN's
    # smallest cluster is 5)
    probe = linear_probe()
    gen = torch.Generator().manual_seed(0)
    honest = 0.05 * torch.randn(10, probe.model.dim, generator=gen, dtype=torch.float64) + 0.2
    bad = torch.zeros(5, probe.model.dim, dtype=torch.float64)
    bad[:, :3] = 0.5 + 0.01 * torch.randn(5, 3, generator=gen, dtype=torch.float64)  # class 0's weight row
    bad[:, 12] = 0.5  # class 0's bias
    updates = torch.cat([honest, bad])
    draw = RoundDraw(torch.arange(15), inputs={"model": torch.zeros(probe.model.dim, dtype=torch.float64), "probe": probe})
    # Execute
    out = deepsight(updates, weights=torch.ones(15), losses=None, f=0, samples=200, round=draw)
    # Assert: the mean of the honest updates, each clipped to the median norm of all fifteen
    bound = float(np.median(updates.norm(dim=1).numpy()))
    scale = (bound / honest.norm(dim=1)).clamp(max=1.0)
    assert torch.allclose(out, (honest * scale[:, None]).mean(0))


def test_a_pair_of_backdoor_models_among_ten_is_dropped():
    # a round of the quick suite's size: 8 honest models over every class, 2 attackers pushing class 0
    probe = linear_probe()
    gen = torch.Generator().manual_seed(3)
    honest = 0.05 * torch.randn(8, probe.model.dim, generator=gen, dtype=torch.float64) + 0.2
    bad = torch.zeros(2, probe.model.dim, dtype=torch.float64)
    bad[:, :3], bad[:, 12] = 0.5, 0.5  # class 0's weight row and bias
    draw = RoundDraw(torch.arange(10), inputs={"model": torch.zeros(probe.model.dim, dtype=torch.float64), "probe": probe})
    out = deepsight(torch.cat([honest, bad]), weights=torch.ones(10), losses=None, f=0, samples=200, round=draw)
    bound = float(np.median(torch.cat([honest, bad]).norm(dim=1).numpy()))
    assert torch.allclose(out, (honest * (bound / honest.norm(dim=1)).clamp(max=1.0)[:, None]).mean(0))


@pytest.mark.parametrize("module, task, message", [
    (torch.nn.Linear(3, 1), "binary_pm1", "needs a classification task of 2 or more classes"),
    (torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4, bias=False)), "classification",
     "reads the output layer's weight \\[4, inputs\\] and bias \\[4\\]"),
])
def test_a_model_without_a_class_output_layer_is_refused_before_training(module, task, message):
    dataset = types.SimpleNamespace(num_classes=4, input_shape=(3,), meta={}, clients=[])
    with pytest.raises(ConfigError, match=message):
        Probe.of(FlatModel(module, task), dataset, 0, torch.device("cpu"), "deepsight")


def test_a_run_probes_the_models_on_the_server():
    result = run_experiment(ExperimentConfig.from_dict({
        "dataset": {"name": "digits", "num_clients": 10}, "model": {"name": "mlp", "hidden": [16]}, "rounds": 2,
        "eval_every": 2, "clients_per_round": 8, "local_steps": 2, "batch_size": 16, "lr": 0.2,
        "attack": {"name": "badnets", "level": 0.2}, "aggregator": {"name": "deepsight", "samples": 100}}))
    assert 0 < result["final"]["acc_pooled"] <= 1


def test_a_direct_call_without_the_probe_is_one_clear_error():
    with pytest.raises(ConfigError, match="needs the round's global model and its probe"):
        deepsight(torch.ones(3, 4), weights=torch.ones(3), losses=None, f=0)


@pytest.mark.parametrize("params, message", [({"seeds": 0}, "seeds must be a whole number >= 1"),
                                             ({"samples": 0}, "samples must be a whole number >= 1"),
                                             ({"seeds": 9}, "seeds must be a whole number >= 1 and <= 8"),
                                             ({"tau": 0.0}, "0 < tau <= 1"), ({"threshold": 2.0}, "0 <= threshold <= 1")])
def test_bad_deepsight_settings_fail_before_training(params, message):
    with pytest.raises(ConfigError, match=message):
        check_aggregator({"name": "deepsight", **params}, n=10, f=2)


def digits_with_varying_pixels(normalize: str):
    """digits standardised as ``normalize`` says; per pixel, its never-lit pixels given std 1 (so every pixel's box
    is finite and each pixel's differs)."""
    import dataclasses

    from fedarena.datasets.catalog import build_dataset
    from fedarena.datasets.pixels import PIXELS

    data = build_dataset("digits", {"num_clients": 10, "normalize": normalize}, np.random.default_rng(0))
    scale = data.meta[PIXELS]
    std = np.where(scale.std <= 1e-6, np.float32(1.0), scale.std)
    return dataclasses.replace(data, meta={**data.meta, PIXELS: dataclasses.replace(scale, std=std)})


@pytest.mark.parametrize("normalize", ["pixel", "channel"])
def test_the_probes_noise_fills_each_pixels_own_valid_box(normalize):
    from fedarena.datasets.pixels import valid_box

    data = digits_with_varying_pixels(normalize)
    model = FlatModel(torch.nn.Linear(64, 10), "classification")
    probe = Probe.of(model, data, seed=0, device=torch.device("cpu"), rule="deepsight")
    low, high = (b.reshape(-1) for b in valid_box(data))
    # Execute
    x = probe.inputs(0, 4000)
    # Assert: every input lies in its pixel's box, and the noise spreads over nearly all of it
    assert bool((x >= low).all()) and bool((x <= high).all())
    spread = (x.max(0).values - x.min(0).values) / (high - low)
    assert float(spread.min()) > 0.99


def test_the_probe_refuses_pixels_that_never_vary_under_per_pixel_standardisation():
    from fedarena.datasets.catalog import build_dataset

    data = build_dataset("digits", {"num_clients": 10, "normalize": "pixel"}, np.random.default_rng(0))
    model = FlatModel(torch.nn.Linear(64, 10), "classification")
    with pytest.raises(ConfigError, match="3 of the values it touches never vary in dataset 'digits'.*normalize: channel"):
        Probe.of(model, data, seed=0, device=torch.device("cpu"), rule="deepsight")


class Counting:
    """A model whose forward passes are counted (the probe's only use of it here)."""

    def __init__(self, model):
        self.model, self.passes = model, 0

    def forward(self, params, x):
        self.passes += 1
        return self.model.forward(params, x)


def test_a_search_round_probes_the_global_model_and_each_distinct_row_once():
    # Prepare: a probe counting its forward passes, a round's four rows, and an attack's candidate changing one
    model = FlatModel(torch.nn.Linear(3, 4).double(), "classification")
    counting = Counting(model)
    probe = Probe(counting, (3,), -1.0, 1.0, seed=0, device=torch.device("cpu"))
    gen = torch.Generator().manual_seed(2)
    w = torch.randn(model.dim, generator=gen, dtype=torch.float64)
    rows = 0.1 * torch.randn(4, model.dim, generator=gen, dtype=torch.float64)
    candidate = rows.clone()
    candidate[3] += 1.0

    def fresh(global_model, updates):  # a probe that has kept nothing
        return division_differences(Probe(model, (3,), -1.0, 1.0, seed=0, device=torch.device("cpu")),
                                    global_model, updates, seeds=2, samples=30)

    # Execute and assert: the global model and four rows on each of two noise sets; then the changed row alone;
    # then, the global model moved (a new round), everything again; each time a fresh probe's numbers
    np.testing.assert_array_equal(division_differences(probe, w, rows, seeds=2, samples=30), fresh(w, rows))
    assert counting.passes == 2 * (1 + 4)
    np.testing.assert_array_equal(division_differences(probe, w, candidate, seeds=2, samples=30), fresh(w, candidate))
    assert counting.passes == 10 + 2
    np.testing.assert_array_equal(division_differences(probe, w + 0.5, candidate, seeds=2, samples=30),
                                  fresh(w + 0.5, candidate))
    assert counting.passes == 12 + 10
