"""Identity through real Ray Tune into real MLflow: a trial shared by two suites is computed once (one after
the other and at the same time), and a store and an interrupted checkpoint a previous release wrote are read
and resumed."""

import json
import sqlite3
import time
from dataclasses import replace

import pytest
import yaml
from mlflow.tracking import MlflowClient
from test_bench_faults import Bench, bench_argv

from fedarena.bench.progress import Printer
from fedarena.bench.runner import BenchOptions, run_bench
from fedarena.simulation.checkpoint import save_state
from fedarena.simulation.engine import ENGINE_VERSION, simulate
from fedarena.simulation.experiment import code_version
from fedarena.simulation.setup import build_trial
from fedarena.suites.grid import expand
from fedarena.suites.parse import load_suite
from fedarena.tracking.runs import KILLED, run_params, version_tags
from fedarena.tracking.versions import V1_COMMITS

pytestmark = pytest.mark.integration  # real processes: Ray

SYNTHETIC = {"label": "synthetic", "dataset": {"name": "synthetic", "num_clients": 8, "max_samples": 60, "dim": 10}}
SHARED = {"label": "global", "method": {"name": "global"}}


def suite(name: str, own: dict, rounds: int) -> dict:
    return {"name": name, "methods": [SHARED, own],
            "attacks": [{"label": "clean", "attack": {"name": "none"}, "levels": [0.0]}],
            "scales": {"smoke": {"fixed": {"rounds": rounds, "eval_every": rounds // 4, "clients_per_round": 4},
                                 "datasets": [SYNTHETIC], "seeds": [0]}}}


def write(folder, data: dict):
    path = folder / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def store_runs(db) -> list[tuple[str, str, str, str | None, str | None]]:
    """(suite, config_hash, status, reused_from, used_by) of every run."""
    with sqlite3.connect(db) as con:
        return con.execute(
            "SELECT e.name, h.value, r.status, (SELECT value FROM tags WHERE run_uuid = r.run_uuid AND "
            "key = 'reused_from'), (SELECT value FROM tags WHERE run_uuid = r.run_uuid AND key = 'used_by') "
            "FROM runs r JOIN experiments e ON e.experiment_id = r.experiment_id JOIN tags h ON "
            "h.run_uuid = r.run_uuid AND h.key = 'config_hash'").fetchall()


def assert_shared_once(db, shared_hash: str) -> None:
    found = store_runs(db)
    computed = [r for r in found if r[1] == shared_hash and r[3] is None]
    copies = [r for r in found if r[1] == shared_hash and r[3] is not None]
    assert len(computed) == 1 and len(copies) == 1, found
    assert computed[0][4] == "alpha,beta" and {computed[0][0], copies[0][0]} == {"alpha", "beta"}
    assert all(status == "FINISHED" for _, _, status, _, _ in found) and len(found) == 4, found


@pytest.fixture
def suites(tmp_path):
    # the shared trial is long enough (4,000 cheap rounds) to be running when the other benchmark plans
    alpha = write(tmp_path, suite("alpha", {"label": "median", "aggregator": {"name": "median"}}, 4000))
    beta = write(tmp_path, suite("beta", {"label": "ditto", "method": {"name": "ditto", "lam": 0.5}}, 4000))
    shared = next(t.config_hash for t in expand(load_suite(alpha), "smoke") if t.method_label == "global")
    return alpha, beta, shared


def test_a_trial_finished_in_one_suite_is_reused_by_the_next(tmp_path, suites):
    alpha, beta, shared = suites
    first = Bench(tmp_path, bench_argv(tmp_path, alpha), name="alpha")
    assert first.wait() == 0, first.text()
    second = Bench(tmp_path, bench_argv(tmp_path, beta), name="beta")
    assert second.wait() == 0, second.text()
    assert "1 finished by other suites (reused)" in second.text() and "done: 1 finished" in second.text()
    assert_shared_once(tmp_path / "store" / "mlflow.db", shared)


@pytest.mark.parametrize("gap_s", [0.0, 3.0], ids=["same moment", "3 s apart"])
def test_two_suites_at_once_compute_their_shared_trial_once(tmp_path, suites, gap_s):
    alpha, beta, shared = suites
    first = Bench(tmp_path, bench_argv(tmp_path, alpha), name="alpha")
    time.sleep(gap_s)
    second = Bench(tmp_path, bench_argv(tmp_path, beta), name="beta")
    codes = (first.wait(), second.wait())
    assert codes == (0, 0), first.text() + second.text()
    assert "computed by another running benchmark" in first.text() + second.text()
    assert_shared_once(tmp_path / "store" / "mlflow.db", shared)


def test_a_previous_release_store_is_read_as_engine_version_one_and_rerun(ray_cluster, tmp_path):
    # Prepare: what a previous release left: one trial FINISHED, one interrupted at round 100 of 200 with its
    # checkpoint keyed by that release's config hash; tags without component versions, a commit of that release
    path = write(tmp_path, suite("legacy", {"label": "ditto", "method": {"name": "ditto", "lam": 0.5}}, 200))
    finished, interrupted = expand(load_suite(path), "smoke")
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment("legacy", artifact_location=(tmp_path / "artifacts").as_uri())
    old_tags = {**version_tags(code_version()), "git_sha": sorted(V1_COMMITS)[-1], "suite": "legacy", "scale": "smoke"}
    state = partial_state(interrupted.config, 100)
    checkpoint = tmp_path / "old_checkpoint"
    checkpoint.mkdir()
    save_state(checkpoint, state, interrupted.config.legacy_hash())
    for spec, status in ((finished, "FINISHED"), (interrupted, KILLED)):
        tags = {**old_tags, "config_hash": spec.config.legacy_hash(), "cell_hash": "old",
                "method_label": spec.method_label, "dataset_label": "synthetic", "attack_label": "clean", "level": "0.0"}
        if status == KILLED:
            tags.update(checkpoint=str(checkpoint), checkpoint_round="100")
        run = client.create_run(experiment, run_name=spec.name, tags=tags)
        for key, value in run_params(spec.config.flat()).items():
            client.log_param(run.info.run_id, key, value)
        client.log_metric(run.info.run_id, "acc_pooled", 0.5, step=100)
        client.set_terminated(run.info.run_id, status)
    lines = []
    # Execute
    summary = run_bench(BenchOptions(str(path), scale="smoke", tracking_uri=uri, storage=tmp_path / "ray",
                                     checkpoint_every=50), Printer(lines.append))
    # Assert: that release ran engine version 1 (its commit is one whose numbers version 1 reproduces); at today's
    # engine version both its runs are stale: nothing is skipped, its checkpoint is not resumed (it would
    # continue version 1's trajectory with today's engine), both trials run afresh, the old runs stay
    assert (summary.skipped, summary.resumed, summary.finished) == (0, 0, 2), lines
    assert any(f"engine v1 -> v{ENGINE_VERSION}" in line for line in lines), lines
    runs = client.search_runs([experiment])
    fresh = next(r for r in runs if r.info.run_name == interrupted.name and r.info.status == "FINISHED")
    full, _ = simulate(build_trial(interrupted.config))
    assert fresh.data.metrics["acc_pooled"] == full.history[-1]["acc_pooled"]
    assert fresh.data.tags["config_hash"] == interrupted.config_hash and fresh.data.tags["resumed_from_round"] == "0"
    assert len(runs) == 4 and json.loads(fresh.data.tags["component_versions"]) == interrupted.versions


def partial_state(config, rounds: int):
    """The state of a trial after ``rounds`` rounds, as a checkpoint holds it."""
    trial = build_trial(config)
    short = replace(trial, cfg=type(trial.cfg).from_dict({**trial.cfg.to_dict(), "rounds": rounds}))
    state, _ = simulate(short)
    return state
