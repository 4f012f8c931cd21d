"""A researcher's own components from outside the source tree: a plugin package (an aggregator, an untargeted
attack, a method with per-client state and a small dataset) written into a temporary folder, run through
``fedarena run --include``, the Python API, ``fedarena bench run`` on real Ray workers (a suite file with
``include:``) and an installed distribution's entry point; its runs carry the plugin's identity and reach
``fedarena.runs``, the leaderboards and the worst-case column beside the built-in rows."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
import yaml

import fedarena
from fedarena import api, cli, plugins
from fedarena.bench import runner as bench_runner
from fedarena.bench.runner import BenchSummary
from fedarena.leaderboards import build as leaderboards_build
from fedarena.registry import Registry
from fedarena.simulation.engine import ENGINE_VERSION
from fedarena.tracking import reading

PACKAGE = {
    "__init__.py": "from . import data, personal, rules, scores, threats  # noqa: F401\n",
    "scores.py": '''
        from fedarena import metric


        @metric("weakest_device", higher_is_better=True)
        def weakest_device(e):
            """The lowest benign device accuracy (a test metric)."""
            return float(e.counts.client_accuracy()[e.benign].min())
    ''',
    "rules.py": '''
        import torch
        from fedarena import aggregator, check_updates


        @aggregator("smallest_norms")
        def smallest_norms(updates, *, weights, losses, f, keep: float = 0.7):
            """The mean of the ceil(keep n) updates of smallest norm (a test rule)."""
            n = check_updates(updates, f)
            count = max(1, int(keep * n + 0.999))
            rows = torch.argsort(updates.norm(dim=1), stable=True)[:count]
            return updates[rows].mean(0)
    ''',
    "threats.py": '''
        import torch
        from fedarena import Effect, attack, with_rows


        @attack("flip_and_boost")
        def flip_and_boost(dataset, malicious, rng, *, scale: float = 5.0):
            """Malicious devices send -scale times the benign mean (a test attack)."""
            def tamper(updates, bad, gen):
                return with_rows(updates, bad, -scale * updates[~bad].mean(0))
            return Effect(dataset, tamper=tamper)
    ''',
    "personal.py": '''
        from fedarena import Method, method, scatter_rows


        @method("last_local")
        class LastLocal(Method):
            """FedAvg's global model; each device is evaluated with the model it trained last (per-client state)."""

            evaluates = "personal"

            def init_clients(self, w, sizes):
                return {"personal": w.expand(len(sizes), -1).clone()}

            def local_result(self, local, w, clients, ids):
                personal = scatter_rows(clients["personal"], ids, local["w"])
                return local["w"] - w, {**clients, "personal": personal}
    ''',
    "data.py": '''
        import numpy as np
        import torch
        from fedarena import dataset, from_partition


        @dataset("blobs", model="mlp")
        def blobs(rng, *, num_clients: int = 12, per_client: int = 40):
            """Four Gaussian blobs in 6 dimensions, each device holding two of them (a test dataset)."""
            centres = rng.normal(0, 3, (4, 6))
            labels = np.repeat(np.arange(4), num_clients * per_client // 4)
            x = centres[labels] + rng.normal(0, 1, (len(labels), 6))
            order = np.argsort(labels, kind="stable")
            parts = [np.sort(np.concatenate([chunk for chunk in np.array_split(order, 2 * num_clients)[k::num_clients]]))
                     for k in range(num_clients)]
            return from_partition("blobs", torch.tensor(x, dtype=torch.float32), torch.tensor(labels), parts, rng,
                                  num_classes=4, source=f"blobs|{num_clients}|{per_client}")
    ''',
}
CONFIG = {"dataset": {"name": "blobs"}, "method": {"name": "last_local"},
          "aggregator": {"name": "smallest_norms"}, "attack": {"name": "flip_and_boost", "level": 0.25},
          "rounds": 6, "eval_every": 3, "clients_per_round": 6, "lr": 0.1}


def write_package(root: Path, name: str = "myfl", files: dict[str, str] = PACKAGE) -> Path:
    """A plugin package ``name`` of ``files`` (file name -> indented source) in ``root``."""
    folder = root / name
    folder.mkdir(parents=True)
    for file, text in files.items():
        (folder / file).write_text(textwrap.dedent(text).lstrip())
    return folder


@pytest.fixture
def package(tmp_path):
    """The plugin package, outside the repository; unloaded again after the test."""
    folder = write_package(tmp_path / "plugins")
    yield folder
    for source in list(plugins.loaded()):
        plugins.unload(source)


def fedarena_cli(*argv: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fedarena.cli", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env={**os.environ, **(env or {})})


def test_the_plugin_runs_through_the_cli_and_the_python_api_with_identical_results(package, tmp_path):
    # Execute: the CLI (in process) and the Python API on the same config
    out = tmp_path / "result.json"
    argv = ["run", "--include", str(package), "--dataset", "blobs", "--method", "last_local", "--aggregator",
            "smallest_norms", "--attack", "flip_and_boost", "--level", "0.25", "--rounds", "6", "--set", "eval_every=3",
            "--clients-per-round", "6", "--lr", "0.1", "--no-progress", "--out", str(out)]
    assert cli.main(argv) == 0
    from_cli = json.loads(out.read_text())
    from_api = fedarena.run(CONFIG, include=[package])
    # Assert: the same numbers and identity; the plugin's components carry its source identity
    assert from_api.config_hash == from_cli["config_hash"]
    assert from_api.final["acc_pooled"] == from_cli["final"]["acc_pooled"]
    assert from_api.history["round"].tolist() == [3, 6] and len(from_api.clients) == 12
    versions = from_api.versions
    # this package's source (another test in this process may have left its own plugin loaded before it)
    digest = next(s for s in plugins.loaded() if s.label == str(package.resolve())).digest[:12]
    assert versions["aggregator/smallest_norms"] == versions["method/last_local"] == f"1+src:{digest}"
    assert versions["dataset/blobs"] == versions["attack/flip_and_boost"] == f"1+src:{digest}"
    assert versions["engine"] == ENGINE_VERSION  # built-in components keep their plain versions


def test_an_edited_plugin_has_another_identity(package):
    first = fedarena.run(CONFIG, include=[package]).config_hash
    for source in list(plugins.loaded()):
        plugins.unload(source)
    (package / "rules.py").write_text((package / "rules.py").read_text().replace("0.999", "0.9999"))
    assert fedarena.run(CONFIG, include=[package]).config_hash != first


def test_a_tracked_run_is_in_the_store_and_in_fedarena_runs(package, tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    result = fedarena.run(CONFIG, include=[package], track=True, tracking_uri=uri)
    frame = fedarena.runs("adhoc", tracking_uri=uri)
    (row,) = frame.to_dict("records")
    assert row["run_id"] == result.run_id and row["status"] == "FINISHED" and row["current"]
    assert row["config"]["aggregator"]["name"] == "smallest_norms" and row["config"]["rounds"] == 6
    assert row["versions"]["method/last_local"].startswith("1+src:")
    assert row["acc_pooled"] == pytest.approx(result.final["acc_pooled"])


def test_the_cli_commands_call_the_api_functions(monkeypatch, tmp_path):
    # Prepare: the API's functions are the ones the commands call (the same objects); record their calls
    assert api.benchmark is bench_runner.benchmark and api.leaderboard is leaderboards_build.leaderboard
    assert api.runs is reading.runs and fedarena.run is api.run
    calls = []
    monkeypatch.setattr(api, "run", lambda *a, **k: calls.append(("run", a, k)) or api.RunResult(
        {"final": {"round": 1, "acc_pooled": 0.5, "acc_std": 0.1, "diverged": False}}))
    monkeypatch.setattr(leaderboards_build, "leaderboard", lambda *a, **k: calls.append(("leaderboard", a, k)) or [])
    monkeypatch.setattr(bench_runner, "benchmark", lambda *a, **k: calls.append(("benchmark", a, k)) or
                        BenchSummary(0, 0, 0))
    uri = f"sqlite:///{tmp_path}/m.db"
    # Execute / Assert: each command hands its options to its API function
    assert cli.main(["run", "--dataset", "digits", "--rounds", "1", "--track", "--no-progress",
                     "--tracking-uri", uri]) == 0
    name, args, kwargs = calls[-1]
    assert name == "run" and kwargs["track"] and kwargs["experiment"] == "adhoc" and args[0].rounds == 1
    cli.main(["leaderboard", "robustness", "--tracking-uri", uri, "--format", "csv", "--out", str(tmp_path / "t")])
    name, args, kwargs = calls[-1]
    assert (name, args, kwargs["tracking_uri"]) == ("leaderboard", ("robustness", "csv", str(tmp_path / "t")), uri)
    assert cli.main(["bench", "run", "smoke", "--scale", "smoke", "--tracking-uri", uri, "--seeds", "3"]) == 0
    name, args, kwargs = calls[-1]
    assert (name, args, kwargs["seeds"], kwargs["tracking_uri"]) == ("benchmark", ("smoke", "smoke"), (3,), uri)


def test_a_failed_plugin_leaves_nothing_registered(tmp_path):
    broken = tmp_path / "half.py"
    broken.write_text("from fedarena import aggregator\n\n@aggregator('half_rule')\ndef half(updates, *, weights, "
                      "losses, f):\n    return updates.mean(0)\n\nraise RuntimeError('late failure')\n")
    with pytest.raises(plugins.PluginError, match="import failed at half.py:7 .*RuntimeError: late failure"):
        plugins.load_path(broken)
    assert not any("half_rule" in registry for registry in Registry.instances)


SUITE = {
    "name": "pluginsuite",
    "include": ["plugins/myfl"],
    "methods": [{"label": "global", "method": {"name": "global"}},
                {"label": "median", "aggregator": {"name": "median"}},
                {"label": "smallest_norms", "aggregator": {"name": "smallest_norms"}},
                {"label": "last_local", "method": {"name": "last_local"}}],
    "attacks": [{"label": "clean", "attack": {"name": "none"}, "levels": [0.0]},
                {"label": "a1", "attack": {"name": "a1"}, "levels": [0.25]},
                {"label": "flip_and_boost", "attack": {"name": "flip_and_boost"}, "levels": [0.25]}],
    "scales": {"smoke": {"fixed": {"rounds": 6, "eval_every": 3, "clients_per_round": 6, "lr": 0.1},
                         "datasets": [{"label": "blobs", "dataset": {"name": "blobs"}}], "seeds": [0, 1]}},
}


def bench_suite_file(tmp_path: Path, suite: dict) -> tuple[subprocess.CompletedProcess, str, Path]:
    """``fedarena bench run`` of ``suite`` (written beside the plugins in ``tmp_path``) at the smoke scale, as a process
    started in a folder of its own (workers see no path to the plugins), into a new store: (the run, its URI, the
    folder it ran in)."""
    path = tmp_path / f"{suite['name']}.yaml"
    path.write_text(yaml.safe_dump(suite))
    uri = f"sqlite:///{tmp_path}/store/mlflow.db"
    (tmp_path / "store").mkdir()
    run_dir = tmp_path / "elsewhere"
    run_dir.mkdir()
    done = fedarena_cli("bench", "run", str(path), "--scale", "smoke", "--tracking-uri", uri, "--storage",
                        str(tmp_path / "ray"), "--num-cpus", "2", cwd=run_dir)
    return done, uri, run_dir


@pytest.mark.integration  # `fedarena bench run` as a process: real Ray workers import the shipped plugin
def test_bench_run_on_ray_workers_tracks_the_plugins_rows_into_the_tables(tmp_path):
    # Prepare: the plugin beside a suite file that includes it; workers see no path to it (a fresh cwd)
    write_package(tmp_path / "plugins")
    # Execute
    done, uri, run_dir = bench_suite_file(tmp_path, SUITE)
    # Assert: every trial finished on the workers, each run carries the plugin's identity
    assert done.returncode == 0, done.stdout + done.stderr
    assert "done: 24 finished, 0 failed" in done.stdout, done.stdout
    frame = fedarena.runs("pluginsuite", tracking_uri=uri)
    assert len(frame) == 24 and set(frame["status"]) == {"FINISHED"} and frame["current"].all()
    plugin_rows = frame[frame["method_label"].isin(["smallest_norms", "last_local"])]
    assert all(any(str(v).startswith("1+src:") for v in versions.values()) for versions in plugin_rows["versions"])
    # the tables, in a process that never imports the plugin: its rows beside the built-in ones, worst case too
    tables = fedarena_cli("leaderboard", "pluginsuite", "--tracking-uri", uri, "--format", "csv", "--out",
                          str(tmp_path / "tables"), "--no-figures", cwd=run_dir)
    assert tables.returncode == 0, tables.stderr
    worst = pd.read_csv(tmp_path / "tables" / "worst_case.csv")
    assert set(worst["method_label"]) == {"global", "median", "smallest_norms", "last_local"}
    assert set(worst["attack_label"]) == {"worst case"} and set(worst["level"]) == {0.25}
    full = pd.read_csv(tmp_path / "tables" / "full.csv")  # the plugin's metric, averaged over seeds
    assert full["weakest_device"].between(0, 1).all() and (full["weakest_device"] <= full["acc_pooled"]).all()
    assert worst["worst_attack"].isin(["a1", "flip_and_boost"]).all()


@pytest.mark.integration  # `fedarena run` as a process, with a distribution's metadata on its path
def test_an_installed_distributions_entry_point_is_loaded_automatically(tmp_path):
    # Prepare: site/ holds the package and its .dist-info (what pip would install), on PYTHONPATH only
    site = tmp_path / "site"
    write_package(site, "myfl_ep")
    info = site / "myfl_ep-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: myfl-ep\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[fedarena.plugins]\nmyfl = myfl_ep\n")
    env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    # Execute: no --include
    done = fedarena_cli("run", "--dataset", "blobs", "--aggregator", "smallest_norms", "--rounds", "2",
                        "--no-progress", "--out", str(tmp_path / "r.json"), cwd=tmp_path, env=env)
    # Assert
    assert done.returncode == 0, done.stderr
    record = json.loads((tmp_path / "r.json").read_text())
    assert record["component_versions"]["aggregator/smallest_norms"].startswith("1+src:")
