"""Benchmarks through real Ray Tune into real MLflow (temporary SQLite stores): tracking, skip, retry, resume.

Ray starts once for the module (2 CPUs, no dashboard). Trials are 6 rounds on 8 synthetic clients.
Failures are injected through ``BenchOptions.round_hook`` with ``tests/faults.py`` (e.g. a trial that was not
restored from a checkpoint raises when it reaches a round).
"""

import faults
import pytest
import yaml
from faults import FailAlwaysAt, FailOnceAt
from mlflow.tracking import MlflowClient

from fedarena.bench.progress import Printer
from fedarena.bench.runner import BenchOptions, run_bench
from fedarena.simulation.engine import simulate
from fedarena.simulation.setup import build_trial
from fedarena.suites.grid import expand
from fedarena.suites.parse import load_suite
from fedarena.suites.spec import SCALES

pytestmark = pytest.mark.integration  # real processes: Ray

FIXED = {"rounds": 6, "eval_every": 2, "clients_per_round": 4, "local_steps": 2}
DATASET = {"label": "syn", "dataset": {"name": "synthetic", "num_clients": 8, "max_samples": 60, "dim": 10}}
SUITE = {
    "name": "raygrid",
    "methods": [{"label": "global", "method": {"name": "global"}},
                {"label": "ditto_lam0.5", "method": {"name": "ditto", "lam": 0.5}},
                {"label": "median", "aggregator": {"name": "median"}}],
    "attacks": [{"label": "clean", "attack": {"name": "none"}, "levels": [0.0]}],
    "scales": {scale: {"fixed": FIXED, "datasets": [DATASET], "seeds": [0]} for scale in SCALES},
}


@pytest.fixture(scope="module")
def ray_cluster():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    faults.ship_by_value()  # the workers cannot import tests/: the hooks travel by value
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def suite_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("suites") / "raygrid.yaml"
    path.write_text(yaml.safe_dump(SUITE))
    return path


def options(suite_file, tmp_path, **changes) -> BenchOptions:
    base = {"scale": "smoke", "tracking_uri": f"sqlite:///{tmp_path}/mlflow.db", "storage": tmp_path / "ray",
            "checkpoint_every": 2}
    return BenchOptions(str(suite_file), **{**base, **changes})


def runs_of(tmp_path) -> list:
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("raygrid")
    return list(client.search_runs([exp.experiment_id])), client


def uninterrupted_accuracy(suite_file, method_label: str, seed: int) -> float:
    spec = next(t for t in expand(load_suite(suite_file), "smoke", seeds=(seed,)) if t.method_label == method_label)
    state, _ = simulate(build_trial(spec.config))
    return state.history[-1]["acc_pooled"]


def test_grid_is_tracked_then_skipped_on_rerun(ray_cluster, suite_file, tmp_path):
    # Prepare
    lines = []
    expected = {t.config_hash: t for t in expand(load_suite(suite_file), "smoke")}
    # Execute
    first = run_bench(options(suite_file, tmp_path), Printer(lines.append))
    second = run_bench(options(suite_file, tmp_path), Printer(lines.append))
    # Assert: one FINISHED run per trial with the schema's params, tags, metric history and artifacts
    runs, client = runs_of(tmp_path)
    assert (first.finished, first.failed, second.skipped, second.finished) == (3, 0, 3, 0)
    assert sorted(r.data.tags["config_hash"] for r in runs) == sorted(expected)
    for run in runs:
        spec = expected[run.data.tags["config_hash"]]
        assert run.info.status == "FINISHED"
        assert run.data.params["rounds"] == "6" and run.data.params["method.name"] == spec.config.method["name"]
        assert run.data.params["dataset.num_clients"] == "8" and run.data.params["seed"] == "0"
        tags = run.data.tags
        assert (tags["suite"], tags["scale"], tags["method_label"], tags["attack_label"], tags["level"]) == (
            "raygrid", "smoke", spec.method_label, "clean", "0.0")
        assert tags["cell_hash"] == spec.cell_hash and tags["diverged"] == "false" and tags["dataset_fingerprint"]
        assert run.data.params["backend"] == "auto" and tags["backend_used"] == "batched"  # synthetic's logreg
        assert [m.step for m in client.get_metric_history(run.info.run_id, "acc_pooled")] == [2, 4, 6]
        assert sorted(a.path for a in client.list_artifacts(run.info.run_id)) == ["clients.csv", "config.json",
                                                                                  "result.json"]
    ditto = next(r for r in runs if r.data.tags["method_label"] == "ditto_lam0.5")
    assert ditto.data.metrics["acc_pooled"] == pytest.approx(uninterrupted_accuracy(suite_file, "ditto_lam0.5", 0))
    assert any("3 already finished" in line for line in lines)
    assert not list((tmp_path / "ray").rglob("checkpoint_*"))  # removed once their runs were FINISHED
    cost = ditto.data.metrics  # what the trial cost: 6 rounds, 3 evaluations, checkpoints at rounds 2 and 4
    assert (cost["cost_round_calls"], cost["cost_eval_calls"], cost["cost_checkpoint_calls"]) == (6, 3, 2)
    assert cost["cost_round_ms"] == pytest.approx(1000 * cost["cost_round_s"] / 6)
    assert cost["cost_total_s"] >= cost["cost_round_s"] + cost["cost_eval_s"] and cost["cost_peak_rss_mb"] > 0
    assert any("ditto_lam0.5 syn clean s0: round 4/6 acc" in line for line in lines)


def test_failed_trial_is_retried_from_its_checkpoint(ray_cluster, suite_file, tmp_path):
    # Prepare: every trial raises once at round 3; the checkpoint of round 2 exists
    opts = options(suite_file, tmp_path, seeds=(7,), round_hook=FailOnceAt(3), max_failures=1, max_concurrent=2)
    # Execute
    summary = run_bench(opts, Printer(lambda line: None))
    # Assert: finished after one retry that restarted from round 2, with the uninterrupted run's numbers
    runs, client = runs_of(tmp_path)
    assert (summary.finished, summary.failed, len(runs)) == (3, 0, 3)
    for run in runs:
        assert run.info.status == "FINISHED"
        assert (run.data.tags["num_failures"], run.data.tags["resumed_from_round"]) == ("1", "2")
        assert [m.step for m in client.get_metric_history(run.info.run_id, "acc_pooled")] == [2, 4, 6]
    median = next(r for r in runs if r.data.tags["method_label"] == "median")
    assert median.data.metrics["acc_pooled"] == pytest.approx(uninterrupted_accuracy(suite_file, "median", 7))


def test_interrupted_grid_resumes_without_duplicates(ray_cluster, suite_file, tmp_path):
    # Prepare: seed 0 finishes; then seeds 0 and 1 where seed 1 dies at round 3 (no retries left)
    done = run_bench(options(suite_file, tmp_path), Printer(lambda line: None))
    broken = run_bench(options(suite_file, tmp_path, seeds=(0, 1), round_hook=FailOnceAt(3), max_failures=0),
                       Printer(lambda line: None))
    failed_ids = {r.info.run_id for r in runs_of(tmp_path)[0] if r.info.status == "FAILED"}
    # Execute: the same command again, without the failure
    again = run_bench(options(suite_file, tmp_path, seeds=(0, 1)), Printer(lambda line: None))
    # Assert: seed-0 trials skipped twice; the failed runs continued (same run ids) from round 2
    runs, client = runs_of(tmp_path)
    assert (done.finished, broken.skipped, broken.failed) == (3, 3, 3)
    assert (again.skipped, again.resumed, again.finished, len(runs)) == (3, 3, 3, 6)
    assert all(r.info.status == "FINISHED" for r in runs)
    resumed = [r for r in runs if r.info.run_id in failed_ids]
    assert len(resumed) == 3 and all(r.data.tags["resumed_from_round"] == "2" for r in resumed)
    assert not any("error" in r.data.tags for r in resumed)
    for run in resumed:
        assert [m.step for m in client.get_metric_history(run.info.run_id, "acc_pooled")] == [2, 4, 6]
    assert not list((tmp_path / "ray").rglob("checkpoint_*"))  # the failed attempts' ones included
    global_run = next(r for r in resumed if r.data.tags["method_label"] == "global")
    assert global_run.data.metrics["acc_pooled"] == pytest.approx(uninterrupted_accuracy(suite_file, "global", 1))


def test_permanent_failure_is_attempted_once_skipped_on_rerun_and_retried_on_request(ray_cluster, suite_file,
                                                                                     tmp_path):
    # Prepare: every trial raises a config error at round 3 (no retry can fix it), with 2 retries allowed
    lines = []
    opts = options(suite_file, tmp_path, seeds=(3,), round_hook=FailAlwaysAt(3), max_failures=2)
    # Execute
    first = run_bench(opts, Printer(lines.append))
    rerun = run_bench(opts, Printer(lines.append))
    retried = run_bench(options(suite_file, tmp_path, seeds=(3,), retry_failed=True), Printer(lines.append))
    # Assert: one attempt each, recorded FAILED/permanent with the message; the rerun ran nothing and said
    # why; --retry-failed continued the same runs to FINISHED
    assert (first.failed, first.finished, first.ok) == (3, 0, False)
    assert (rerun.skipped_failed, rerun.finished, rerun.failed, rerun.ok) == (3, 0, 0, False)
    assert any("3 trial(s) skipped: they failed with an error a rerun cannot fix" in line and "--retry-failed"
               in line for line in lines)
    assert any("FAILED (a retry cannot fix it: not retried): injected config error at round 3" in line
               for line in lines)
    assert (retried.resumed, retried.finished, retried.ok) == (3, 3, True)
    runs, _ = runs_of(tmp_path)
    assert len(runs) == 3 and all(r.info.status == "FINISHED" for r in runs)
    assert not any({"error", "failure"} & set(r.data.tags) for r in runs)


def test_max_concurrent_bounds_the_trials_running_at_once(ray_cluster, suite_file, tmp_path):
    # Prepare: three trials and a limit of one (the cluster has room for two)
    lines = []
    # Execute
    summary = run_bench(options(suite_file, tmp_path, max_concurrent=1), Printer(lines.append))
    # Assert: every progress line shows at most one trial running; all three finished
    running = [int(line.split(" running")[0].rsplit("| ", 1)[1]) for line in lines if " running |" in line]
    assert summary.finished == 3 and running and max(running) == 1
