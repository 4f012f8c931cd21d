"""CONTRIBUTING.md's three recipes, followed once each: a component defined as the recipe says is usable
everywhere (CLI, --set, errors before training) with no edit anywhere else."""

import json
import pkgutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from mlflow.tracking import MlflowClient

import fedarena.datasets
import fedarena.methods
import fedarena.methods.aggregators
from fedarena.attacks.base import ATTACKS, Effect, with_rows
from fedarena.bench.callback import identity_tags
from fedarena.cli import main
from fedarena.datasets import DATASETS
from fedarena.datasets.base import FederatedDataset, from_partition
from fedarena.datasets.catalog import register_dataset
from fedarena.errors import ConfigError
from fedarena.leaderboards.build import build_leaderboards, leaderboard_tables
from fedarena.leaderboards.figures import figure3_data
from fedarena.methods.aggregators import AGGREGATORS
from fedarena.methods.aggregators.base import aggregator, check_common, check_updates
from fedarena.methods.base import METHODS, Method, StepContext, method, sgd
from fedarena.simulation.experiment import code_version, run_experiment
from fedarena.suites import SUITES
from fedarena.suites.grid import expand
from fedarena.suites.parse import load_suite
from fedarena.tracking.reading import read_runs
from fedarena.tracking.runs import RunStore, run_params
from fedarena.tracking.store import suite_experiment


@pytest.fixture
def unregister():
    """Registers made by a test are removed afterwards, so the registries stay as the package defines them."""
    made = []
    yield lambda registry, name: made.append((registry, name))
    for registry, name in made:
        registry.remove(name)


@pytest.mark.parametrize("package", [fedarena.methods, fedarena.methods.aggregators, fedarena.datasets])
def test_every_module_of_a_component_package_is_imported_with_it(package):
    modules = {f"{package.__name__}.{m.name}" for m in pkgutil.iter_modules(package.__path__)}
    assert modules and modules <= set(sys.modules)


def run_cli(tmp_path, *argv):
    out = tmp_path / "result.json"
    code = main(["run", "--dataset", "digits", "--rounds", "2", "--clients-per-round", "3", "--no-progress",
                 "--set", "dataset.num_clients=6", "--set", "model.hidden=[8]", *argv, "--out", str(out)])
    return code, (json.loads(out.read_text()) if code == 0 else None)


def blobs_builder(rng: np.random.Generator, *, num_clients: int = 4, per_client: int = 40) -> FederatedDataset:
    """Two Gaussian blobs in 8 dimensions, dealt out evenly (an example, as in CONTRIBUTING.md)."""
    y = rng.integers(0, 2, num_clients * per_client)
    x = rng.normal(size=(len(y), 8)) + 2.0 * y[:, None]
    parts = np.array_split(rng.permutation(len(y)), num_clients)
    return from_partition("two_blobs", torch.tensor(x, dtype=torch.float32), torch.tensor(y), parts, rng,
                          num_classes=2, source=f"two_blobs|{per_client}", meta={})


class DampedFedAvg(Method):
    """FedAvg whose local steps are scaled by ``damping`` (an example, as in CONTRIBUTING.md)."""

    def __init__(self, *, damping: float = 0.5):
        if damping <= 0:
            raise ConfigError(f"damped_fedavg damping must be > 0, got {damping}")
        self.damping = damping

    def local_step(self, local, batch, ctx: StepContext):
        _, g = ctx.backend.grad(local["w"], batch)
        return {**local, "w": sgd(local["w"], self.damping * g, ctx.lr, batch.active)}


def test_aggregator_recipe(tmp_path, unregister, capsys):
    def check_shrunk_mean(n: int, f: int, *, shrink: float = 0.5) -> None:
        check_common(n, f)
        if not 0 < shrink <= 1:
            raise ConfigError(f"shrunk_mean: shrink must be in (0, 1], got {shrink}")

    @aggregator("shrunk_mean", check=check_shrunk_mean)
    def shrunk_mean(updates, *, weights, losses, f, shrink: float = 0.5):
        """The uniform mean times a factor in (0, 1] (an example, as in CONTRIBUTING.md)."""
        n = check_updates(updates, f)
        check_shrunk_mean(n, f, shrink=shrink)
        return shrink * updates.mean(0)

    unregister(AGGREGATORS, "shrunk_mean")
    code, result = run_cli(tmp_path, "--aggregator", "shrunk_mean", "--set", "shrink=0.25")
    assert code == 0 and result["config"]["aggregator"] == {"name": "shrunk_mean", "pre": [], "f": None,
                                                             "shrink": 0.25}
    assert run_cli(tmp_path, "--aggregator", "shrunk_mean", "--set", "shrink=2.0")[0] == 2
    assert "shrink must be in (0, 1]" in capsys.readouterr().err


def test_method_recipe(tmp_path, unregister, capsys):
    method("damped_fedavg")(DampedFedAvg)
    unregister(METHODS, "damped_fedavg")
    code, result = run_cli(tmp_path, "--method", "damped_fedavg", "--set", "damping=0.1")
    assert code == 0 and result["config"]["method"] == {"name": "damped_fedavg", "damping": 0.1}
    assert run_cli(tmp_path, "--method", "damped_fedavg", "--set", "dampin=0.1")[0] == 2
    assert "method.damping" in capsys.readouterr().err  # the error lists the settable keys


def test_dataset_recipe(tmp_path, unregister):
    register_dataset("two_blobs", model="mlp")(blobs_builder)
    unregister(DATASETS, "two_blobs")
    out = tmp_path / "blobs.json"
    code = main(["run", "--dataset", "two_blobs", "--rounds", "3", "--clients-per-round", "2", "--no-progress",
                 "--set", "per_client=30", "--out", str(out)])
    result = json.loads(out.read_text())
    assert code == 0 and result["config"]["dataset"] == {"name": "two_blobs", "num_clients": 4, "per_client": 30}
    assert result["config"]["model"]["name"] == "mlp" and result["final"]["acc_pooled"] > 0.5


def noisy_updates(dataset, malicious, rng, *, std: float = 1.0) -> Effect:
    """Malicious devices add Gaussian noise of ``std`` to their updates (the attack recipe's example)."""
    def tamper(updates, bad, gen):
        noise = torch.randn(updates[bad].shape, generator=gen, device=updates.device) * std
        return with_rows(updates, bad, updates[bad] + noise)

    return Effect(dataset, tamper=tamper)


RECIPE_SUITE = {
    "name": "recipes", "reference": "none (the recipes' components)",
    "methods": [{"label": "damped_fedavg", "method": {"name": "damped_fedavg", "damping": 0.5}},
                {"label": "global", "method": {"name": "global"}}],
    "attacks": [{"label": "clean", "attack": {"name": "none"}, "levels": [0.0]},
                {"label": "noisy_updates", "attack": {"name": "noisy_updates", "std": 0.5}, "levels": [0.25]}],
    "scales": {"smoke": {"fixed": {"rounds": 2, "eval_every": 1, "clients_per_round": 4, "local_steps": 2},
                         "seeds": [0], "datasets": [{"label": "two_blobs", "dataset": {"name": "two_blobs"}}]}},
}


def store_suite_runs(folder, suite_path) -> str:
    """Every smoke trial of the suite run for real and recorded as the benchmark records it; the store's URI."""
    uri = f"sqlite:///{folder}/mlflow.db"
    client = MlflowClient(tracking_uri=uri)
    store = RunStore(client, suite_experiment(client, uri, "recipes"))
    for spec in expand(load_suite(suite_path), "smoke"):
        result = run_experiment(spec.config)
        tags = {**identity_tags(spec, code_version()), "dataset_fingerprint": result["dataset_fingerprint"]}
        run_id = store.open(spec.name, run_params(spec.config.flat()), tags, spec.config.to_dict())
        rounds = {row["round"]: {k: v for k, v in row.items() if k != "round"} for row in result["history"]}
        store.finish(run_id, "FINISHED", [], {"diverged": False}, rounds)
    return uri


@pytest.mark.slow  # real trials and a real MLflow store
def test_components_of_the_recipes_reach_the_tables_the_figures_and_bench_list(tmp_path, unregister, capsys):
    # Prepare: a dataset, a method and an attack, each registered as its recipe says, and a suite using them
    register_dataset("two_blobs", model="mlp")(blobs_builder)
    method("damped_fedavg")(DampedFedAvg)
    ATTACKS.register("noisy_updates")(noisy_updates)
    suite_path = tmp_path / "recipes.yaml"
    suite_path.write_text(yaml.safe_dump(RECIPE_SUITE))
    SUITES.add("recipes", suite_path)
    for registry, name in ((DATASETS, "two_blobs"), (METHODS, "damped_fedavg"), (ATTACKS, "noisy_updates"),
                           (SUITES, "recipes")):
        unregister(registry, name)
    uri = store_suite_runs(tmp_path, suite_path)
    # Execute
    paths = build_leaderboards("recipes", uri, str(tmp_path / "boards"), "markdown")
    tables, cells, _ = leaderboard_tables(read_runs(uri, "recipes"))
    assert main(["bench", "list", "--no-check"]) == 0
    listing = capsys.readouterr().out
    # Assert: a row, a column and a block of the full table; bars of Figure 3; the suite in bench list
    full = next(t for t in tables if t.name == "full")
    assert [b.title for b in full.blocks] == ["two_blobs"]
    assert [row[0].text for row in full.blocks[0].rows] == ["damped_fedavg", "global"]  # the suite's order
    assert [group for group, _ in full.blocks[0].groups] == ["clean", "noisy_updates"]
    assert set(figure3_data(cells, "two_blobs")["method_label"]) == {"global", "damped_fedavg"}
    assert any(p.name == "figure3_two_blobs.png" for p in map(Path, paths))
    assert any(line.split()[:4] == ["recipes", "4", "-", "-"] for line in listing.splitlines()), listing
