"""fedarena tune: search spaces, the same budget for every row, a known optimum found, the frozen choice used by
bench run, the store and resume; bad input in one line before Ray; validation never overlaps test data."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

import fedarena
from fedarena.cli import main
from fedarena.datasets import base as dataset_base
from fedarena.datasets.catalog import build_dataset
from fedarena.errors import ConfigError
from fedarena.methods.aggregators import AGGREGATORS
from fedarena.methods.base import METHODS
from fedarena.search_space import choice, log_uniform, parse_domain
from fedarena.suites.parse import load_suite
from fedarena.tuning.targets import targets_of

# A rule with a known optimum: the mean plus Gaussian noise of std |ln(c / 0.3)| per coordinate, from the round's
# seed; c = 0.3 is the plain mean, one grid step away (x3) the model drowns in noise
PLUGIN = '''
import math
import torch
from fedarena import aggregator, check_updates, choice


@aggregator("detuned_mean", needs_round=True, search={"c": choice(0.03, 0.1, 0.3, 1.0, 3.0)})
def detuned_mean(updates, *, weights, losses, f, round=None, c: float = 1.0):
    """The mean plus noise of std |ln(c / 0.3)| (a test rule of 2026 with a known optimum)."""
    check_updates(updates, f)
    seed = 0 if round is None else round.seed
    noise = torch.randn(updates.shape[1], generator=torch.Generator().manual_seed(seed), dtype=updates.dtype)
    return updates.mean(0) + abs(math.log(c / 0.3)) * noise.to(updates.device)
'''

SUITE = {
    "name": "tunable",
    "description": "two rows for fedarena tune's tests",
    "include": ["detuned.py"],
    "methods": [{"label": "fedavg", "method": {"name": "global"}},
                {"label": "detuned", "method": {"name": "global"}, "aggregator": {"name": "detuned_mean"}}],
    "attacks": [{"label": "clean", "attack": {"name": "none"}, "levels": [0.0]}],
    "scales": {"smoke": {"fixed": {"rounds": 4, "eval_every": 4, "clients_per_round": 5, "local_steps": 2,
                                   "batch_size": 16, "lr": 0.2},
                         "datasets": [{"label": "digits", "dataset": {"name": "digits", "num_clients": 10},
                                       "model": {"name": "mlp", "hidden": [16]}}],
                         "seeds": [0, 1]}},
}


@pytest.fixture()
def tunable(tmp_path):
    (tmp_path / "detuned.py").write_text(PLUGIN)
    path = tmp_path / "tunable.yaml"
    path.write_text(yaml.safe_dump(SUITE, sort_keys=False))
    return path


# --- spaces (no Ray) ---

def test_shipped_components_declare_spaces_over_their_own_hyperparameters():
    assert METHODS.search("ditto")["lam"] == log_uniform(0.01, 2.0)
    assert AGGREGATORS.search("flame")["lam"].kind == "loguniform"
    assert AGGREGATORS.search("rlr")["theta"] == choice(2, 3, 4, 5, 6)
    assert AGGREGATORS.search("median") == {}


def test_rows_get_their_components_space_less_what_the_row_fixes_plus_the_learning_rate():
    suite = load_suite("robustness")
    targets, _ = targets_of(suite, "quick", rows=("ditto", "fair_term_t1", "fedmgda_plus", "median"))
    spaces = {t.row: set(t.space) for t in targets}
    assert spaces == {"ditto": {"method.lam", "lr"}, "fair_term_t1": {"lr"},  # the row sets t = 1
                      "fedmgda_plus": {"aggregator.eps", "lr"}, "median": {"lr"}}  # select dropped: eps searched
    # every row runs the same tuning battery on the same data and seed
    runs = {t.row: t.runs for t in targets}
    assert {tuple(a for a, _ in r) for r in runs.values()} == {("a1", "a2", "alie", "min_max")}
    first = {row: (r[0][1]["dataset"], r[0][1]["seed"], r[0][1]["attack"]["level"]) for row, r in runs.items()}
    assert len({json.dumps(v, sort_keys=True) for v in first.values()}) == 1


def test_a_suite_with_a_privacy_axis_is_tuned_without_differential_privacy():
    targets, _ = targets_of(load_suite("privacy"), "quick", rows=("global",))
    for target in targets:  # one run per tuning attack, none of them private
        assert [a for a, _ in target.runs] == ["a1", "a2", "alie", "min_max"]
        assert {run["privacy"]["name"] for _, run in target.runs} == {"none"}


@pytest.mark.parametrize("text, message", [
    ("choice()", "choice\\(\\) is empty"),
    ("uniform(1, 0.5)", "empty or inverted"),
    ("loguniform(0.1, 0.1)", "empty or inverted"),
    ("loguniform(0, 1)", "0 < low < high"),
    ("normal(0, 1)", "is not a domain"),
    ("uniform(1)", "takes two numbers"),
])
def test_bad_domains_are_one_line_each(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_domain(text, "aggregator.lam")


@pytest.mark.parametrize("argv, message", [
    (["--budget", "0"], "whole number >= 1"),
    (["--budget", "2", "--space", "aggregator.nope=uniform(0, 1)"], "has no hyperparameter 'nope'"),
    (["--budget", "2", "--space", "lr=uniform(0.5, 0.1)"], "empty or inverted"),
    (["--budget", "2", "--space", "rounds=choice(1, 2)"], "not a searchable key"),
    (["--budget", "2", "--rows", "krum"], "has no row 'krum'"),
    (["--budget", "2", "--searcher", "grid"], "choose one of random, optuna"),
    (["--budget", "2", "--keys", "momentum"], "not a shared key"),
])
def test_bad_tuning_requests_fail_in_one_line_before_ray(tunable, tmp_path, capsys, argv, message):
    import ray

    code = main(["tune", str(tunable), "--scale", "smoke", "--out", str(tmp_path / "t.yaml"),
                 "--tracking-uri", f"sqlite:///{tmp_path}/m.db", *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and message in err, err
    assert not ray.is_initialized()


def test_a_declared_space_over_a_key_the_component_lacks_is_refused(monkeypatch):
    monkeypatch.setitem(AGGREGATORS._search, "median", {"beta": choice(0.1)})
    with pytest.raises(ConfigError, match="declares a search space over 'beta', which it does not take"):
        targets_of(load_suite("robustness"), "quick", rows=("median",))


# --- validation and test data never overlap ---

@pytest.mark.parametrize("name, options", [
    ("digits", {"num_clients": 30}), ("mnist_5k", {}), ("synthetic", {"num_clients": 10}),
    ("point_estimation", {}),
])
def test_validation_and_test_splits_never_share_a_sample(monkeypatch, name, options):
    calls = []
    original = dataset_base.split_indices

    def recording(indices, rng, fractions=dataset_base.SPLIT_FRACTIONS):
        out = original(indices, rng, fractions)
        calls.append(out)
        return out

    monkeypatch.setattr(dataset_base, "split_indices", recording)
    data = build_dataset(name, {"name": name, **options}, np.random.default_rng(0))
    assert calls and len(calls) == len(data.clients)  # every device split by it
    for train, val, test in calls:
        assert len(val) > 0
        assert not set(val) & set(test) and not set(val) & set(train) and not set(train) & set(test)


def test_fedtilt_toys_validation_samples_are_not_test_samples():
    data = build_dataset("fedtilt_toy", {"name": "fedtilt_toy"}, np.random.default_rng(0))
    for client in data.clients:
        val = {tuple(row) for row in client.val.x.tolist()}
        assert val and not val & {tuple(row) for row in client.test.x.tolist()}


# --- the search (real Ray Tune, real MLflow) ---

@pytest.mark.integration
def test_tune_finds_the_known_optimum_with_the_same_budget_for_every_row(ray_cluster, tunable, tmp_path):
    uri = f"sqlite:///{tmp_path}/m.db"
    out = tmp_path / "tuned.yaml"
    lines = []
    # Execute
    data = fedarena.tune(tunable, scale="smoke", budget=6, out=out, tracking_uri=uri, storage=tmp_path / "ray",
                         emit=lines.append)
    # Assert: c within one grid step of 0.3, both rows 6 configurations on the same validation data
    chosen = data["rows"]["detuned"]["digits"]["values"]
    assert chosen["aggregator.c"] in (0.1, 0.3, 1.0), chosen
    assert {row: d["digits"]["trials"] for row, d in data["rows"].items()} == {"fedavg": 6, "detuned": 6}
    assert set(data["rows"]["fedavg"]["digits"]["values"]) == {"lr"}
    curve = data["rows"]["detuned"]["digits"]["curve"]
    assert len(curve) == 6 and curve == sorted(curve) and curve[-1] == pytest.approx(
        data["rows"]["detuned"]["digits"]["objective"], abs=1e-6)
    runs = fedarena.runs("tune", tracking_uri=uri)
    configs = runs[runs.get("tune_choice").isna()] if "tune_choice" in runs else runs
    assert configs.groupby("tune_row").size().to_dict() == {"detuned": 6, "fedavg": 6}
    # Execute: the same search again is served from the store; then the suite with the frozen choice
    again = fedarena.tune(tunable, scale="smoke", budget=6, out=tmp_path / "again.yaml", tracking_uri=uri,
                          storage=tmp_path / "ray", emit=lines.append)
    assert again["rows"] == data["rows"] and sum("from the store" in line for line in lines) == 2
    summary = fedarena.benchmark(tunable, "smoke", tracking_uri=uri, storage=tmp_path / "ray", tuned=str(out))
    assert summary.ok and summary.finished == 4
    tuned_runs = fedarena.runs("tunable", tracking_uri=uri)
    assert set(tuned_runs["method_label"]) == {"fedavg+tuned6", "detuned+tuned6"}  # rows of their own
    detuned = tuned_runs[tuned_runs["method_label"] == "detuned+tuned6"]
    assert set(detuned["aggregator.c"].astype(float)) == {chosen["aggregator.c"]}
    assert set(tuned_runs["tuned_budget"]) == {"6"} and data["tuning_seeds"] == [2]  # the suite reports 0, 1
    paths = fedarena.leaderboard("tunable", out=tmp_path / "boards", tracking_uri=uri, scale="smoke", figures=False)
    assert any("Tuned rows (fedarena tune, 6 configurations each" in Path(p).read_text() for p in paths)


@pytest.mark.integration
def test_a_killed_search_resumes_without_running_a_finished_configuration_again(tunable, tmp_path):
    # Prepare: every rule call is logged with its c and the round's seed, one line per call
    log = tmp_path / "calls.log"
    plugin = (tmp_path / "detuned.py").read_text().replace(
        '    check_updates(updates, f)\n',
        '    check_updates(updates, f)\n'
        '    import os, time\n'
        '    time.sleep(0.15)\n'
        '    open(os.environ["CALLS_LOG"], "a").write(f"{c!r} {0 if round is None else round.seed}\\n")\n', 1)
    (tmp_path / "detuned.py").write_text(plugin)
    argv = [sys.executable, "-m", "fedarena.cli", "tune", str(tunable), "--scale", "smoke", "--budget", "4",
            "--rows", "detuned", "--out", str(tmp_path / "t.yaml"), "--tracking-uri", f"sqlite:///{tmp_path}/m.db",
            "--storage", str(tmp_path / "ray"), "--num-cpus", "2", "--space", "aggregator.c=uniform(0.2, 0.4)"]
    env = {**os.environ, "CALLS_LOG": str(log), "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen(argv, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    finished = _finished_trials(tmp_path / "ray", wanted=2, process=first)
    time.sleep(1.0)  # Tune saves its experiment state after every step (TUNE_GLOBAL_CHECKPOINT_S=0)
    os.killpg(first.pid, signal.SIGKILL)  # Execute: killed while the other configurations run
    first.wait()
    before = _counts(log)
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    # Assert: the finished configurations' calls did not grow; 4 configurations in the frozen file
    after = _counts(log)
    for c in finished:
        assert after[c] == before[c], (c, before, after)
    assert yaml.safe_load((tmp_path / "t.yaml").read_text())["rows"]["detuned"]["digits"]["trials"] == 4


def _finished_trials(storage: Path, wanted: int, process, timeout: float = 240) -> list[str]:
    """The c of trials whose last report is final (every attack run), once ``wanted`` of them exist."""
    start = time.time()
    while time.time() - start < timeout:
        found = []
        for result in storage.glob("fedarena-tune/*/*/result.json"):
            reports = [json.loads(line) for line in result.read_text().splitlines() if line.strip()]
            if reports and reports[-1].get("attacks_done") == 4:
                found.append(repr(reports[-1]["config"]["aggregator.c"]))
        if len(found) >= wanted:
            return found
        assert process.poll() is None, "the search ended before it could be killed"
        time.sleep(0.5)
    raise AssertionError("no configuration finished in time")


def _counts(log: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in log.read_text().splitlines():
        counts[line.split()[0]] = counts.get(line.split()[0], 0) + 1
    return counts
