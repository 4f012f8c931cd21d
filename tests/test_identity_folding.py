"""Equal configs, one identity (``simulation.identity``): an explicit backend equal to ``auto``'s pick and a data
seed equal to the seed are folded; a fixed data seed still groups its cell's seeds; and battery labels keep
different settings apart (``battery.definition.Row.label``)."""

import pytest
import torch
from torch import nn

from fedarena.battery.definition import Row
from fedarena.config import ExperimentConfig
from fedarena.models.backends import auto_backend, model_layer_kinds, planned_backend
from fedarena.models.functional import FlatModel
from fedarena.models.zoo import MODELS
from fedarena.sections import KINDS
from fedarena.simulation import identity as identity_module
from fedarena.simulation.identity import trial_identity
from fedarena.suites.spec import LABEL

DIGITS = {"name": "digits", "num_clients": 10}
OTHER = {"batched": "sequential", "sequential": "batched"}


def identity(**data):
    return trial_identity(ExperimentConfig.from_dict({"dataset": DIGITS, "rounds": 4, **data}))


def hashes(ident):
    return ident.config_hash, ident.config_key, ident.cell_hash


@pytest.mark.parametrize("model, device, pick", [
    ({"name": "mlp", "hidden": [16]}, "cpu", "batched"),
    ({"name": "logreg"}, "auto", "batched"),  # no convolution, no batch norm: batched on a CPU and on CUDA
    ({"name": "cnn_fmnist"}, "cpu", "sequential"),
    ({"name": "cnn_fmnist"}, "cuda", "batched"),
    ({"name": "cnn_celeba"}, "cuda", "sequential"),  # batch norm: sequential everywhere
    ({"name": "cnn_celeba"}, "auto", "sequential"),
])
def test_auto_and_the_backend_it_picks_are_one_identity_the_other_backend_another(model, device, pick):
    # Execute
    auto = identity(model=model, device=device)
    chosen = identity(model=model, device=device, backend=pick)
    other = identity(model=model, device=device, backend=OTHER[pick])
    # Assert: auto's identity is today's (no backend among its values), the pick folds into it
    assert hashes(chosen) == hashes(auto) and "backend" not in chosen.values
    assert chosen.folded == {"backend": pick} and auto.folded == {}
    assert other.config_hash != auto.config_hash and other.config_key != auto.config_key
    assert other.values["backend"] == OTHER[pick] and other.cell_hash != auto.cell_hash


def test_a_backend_stays_where_auto_picks_by_the_machine():
    # device auto with convolutions and no batch norm: batched on CUDA, sequential on a CPU
    auto = identity(model={"name": "cnn_fmnist"}, device="auto")
    for backend in ("sequential", "batched"):
        fixed = identity(model={"name": "cnn_fmnist"}, device="auto", backend=backend)
        assert fixed.config_hash != auto.config_hash and fixed.values["backend"] == backend


@pytest.mark.parametrize("name", sorted(MODELS.built_in()))
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_identity_reads_the_pick_the_built_model_gets(name, device):
    # Prepare: each built-in model at its dataset's kind of input (without the meta device)
    section = KINDS["model"].resolve({"name": name})
    shape, classes = {"svm": ((20,), 2), "logreg": ((20,), 10), "mlp": ((20,), 10), "mean": ((1,), 1)}.get(
        name, ((1, 28, 28), 10))
    module = MODELS.get(name)(shape, classes, **{k: v for k, v in section.items() if k != "name"})
    # Execute / Assert
    assert planned_backend(section, device) == auto_backend(FlatModel(module, "classification"), torch.device(device))


def test_a_model_whose_layers_follow_its_input_is_never_folded():
    def shaped(input_shape, num_classes):  # convolutions for images, a linear layer for vectors
        if len(input_shape) == 3:
            return nn.Sequential(nn.Conv2d(input_shape[0], 2, 3), nn.Flatten(), nn.LazyLinear(num_classes))
        return nn.Linear(input_shape[0], num_classes)

    def refuses(input_shape, num_classes):
        raise ValueError("no shape fits")

    assert model_layer_kinds(shaped, '{"name": "shaped"}') is None
    assert model_layer_kinds(refuses, '{"name": "refuses"}') is None


def test_building_the_pick_touches_no_global_random_state():
    model_layer_kinds.cache_clear()
    state = torch.random.get_rng_state()
    planned_backend({"name": "cnn_cifar"}, "cpu")
    assert torch.equal(torch.random.get_rng_state(), state)


def test_a_data_seed_equal_to_the_seed_is_the_null_data_seed():
    for seed in (0, 3):
        unset = identity(seed=seed)
        same = identity(seed=seed, data_seed=seed)
        assert (same.config_hash, same.config_key) == (unset.config_hash, unset.config_key)
        assert "data_seed" not in same.values and same.folded == {"data_seed": seed}
    assert identity(seed=3, data_seed=0).config_hash != identity(seed=3).config_hash


def test_a_fixed_data_seed_keeps_one_cell_over_its_seeds_and_the_null_one_its_own():
    # Execute: data_seed 0 over seeds 0, 1, 2 (seed 0's config_hash folds data_seed), and the null data seed
    fixed = [identity(seed=s, data_seed=0) for s in (0, 1, 2)]
    unset = [identity(seed=s) for s in (0, 1, 2)]
    # Assert: one cell each, two cells in all; three trials each
    assert len({i.cell_hash for i in fixed}) == 1 and len({i.cell_hash for i in unset}) == 1
    assert fixed[0].cell_hash != unset[0].cell_hash
    assert len({i.config_hash for i in fixed}) == 3 and fixed[0].config_hash == unset[0].config_hash


def test_unfolded_is_the_identity_without_folding_so_nothing_unfolded_moves(monkeypatch):
    # Prepare: configs that fold (and one that does not), their identities computed with folding switched off
    configs = [{"backend": "batched", "model": {"name": "mlp", "hidden": [16]}}, {"seed": 2, "data_seed": 2},
               {"seed": 0, "data_seed": 0, "backend": "batched"}, {"seed": 1, "data_seed": 0}, {"backend": "sequential"}]
    folded = [identity(**c) for c in configs]
    monkeypatch.setattr(identity_module, "_folds", lambda cfg, key: False)
    unfolded = [identity(**c) for c in configs]
    # Assert: the values as written give back the identity a store recorded before the folding; a folded data
    # seed keeps the cell it had (only a folded backend moves the cell, with the config_hash)
    assert [hashes(i.unfolded) for i in folded] == [hashes(i) for i in unfolded]
    assert [folded[i].cell_hash for i in (1, 3, 4)] == [unfolded[i].cell_hash for i in (1, 3, 4)]
    assert folded[4].folded == {} and hashes(folded[4]) == hashes(unfolded[4])  # auto picks batched for the mlp


def test_different_settings_never_share_a_label():
    def label(value):
        return Row("aggregator", "trimmed_mean", (("x", value),)).label

    assert label([1, 23]) != label([12, 3])
    assert label([1, 23]) == "aggregator.trimmed_mean+x_1_23_" and label([12, 3]) == "aggregator.trimmed_mean+x_12_3_"
    values = [0.1, 1, "1", [1], [], -3, 1e-5, 1e20, True, "true", None, "null", "a b", "ab", "trimmed_mean", ["a_b"],
              ["a", "b"], [[1, 2], [3]], [[1], [2, 3]], [{"name": "bucketing", "s": 2}], {"a": 1}, [-1, 0.5]]
    labels = [label(v) for v in values]
    assert len(set(labels)) == len(values) and all(LABEL.match(text) for text in labels)


def test_labels_of_scalar_settings_stay_as_they_were():
    row = Row("aggregator", "trimmed_mean", (("beta", 0.1), ("mode", "reference"), ("strict", True)))
    assert row.label == "aggregator.trimmed_mean+beta0.1+modereference+stricttrue"
    assert Row("method", "ditto", (("lam", 1e-05),)).label == "method.ditto+lam1.0e-05"
