"""Leaderboards read from a real (temporary, SQLite) MLflow tracking store, and its error messages."""

import pandas as pd
import pytest
from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from fedarena.errors import ConfigError
from fedarena.leaderboards import LeaderboardError, build_leaderboards, read_runs
from fedarena.leaderboards.build import suite_tables
from fedarena.simulation.engine import ENGINE_VERSION


def log_trial(client, exp_id, *, method, seed, accs, std, status="FINISHED", sha="sha1", versions=f'{{"engine": {ENGINE_VERSION}}}',
              start=None):
    """One trial as the tracking schema logs it: params, tags (its component versions), a metric history."""
    run = client.create_run(exp_id, start_time=start)
    params = {"dataset.name": "fmnist", "method.name": method, "attack.name": "a1", "attack.level": "0.5",
              "aggregator.name": "mean", "seed": str(seed), "rounds": "3"}  # fmt: skip
    tags = {"suite": "robustness", "scale": "quick", "cell_hash": f"cell-{method}", "config_hash": f"{method}{seed}",
            "dataset_fingerprint": "fp1", "git_sha": sha, "method_label": method, "dataset_label": "fmnist",
            "attack_label": "a1", "level": "0.5", "diverged": "false", "component_versions": versions}  # fmt: skip
    metrics = [Metric("acc_pooled", acc, 0, step) for step, acc in enumerate(accs)]
    metrics += [Metric("acc_std", std, 0, len(accs) - 1), Metric("diverged", 0.0, 0, len(accs) - 1)]
    client.log_batch(
        run.info.run_id,
        metrics=metrics,
        params=[Param(k, v) for k, v in params.items()],
        tags=[RunTag(k, v) for k, v in tags.items()],
    )
    if status != "RUNNING":
        client.set_terminated(run.info.run_id, status=status)
    return run.info.run_id


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """robustness: 3 finished runs (global x 2 seeds, ditto), 1 running, 1 failed; 'ablation' is empty;
    'versions': two seeds of one cell run at two versions of a component this process does not know (a plugin's
    source, the newer one current); 'inflight': one running run."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow')}/mlflow.db"
    client = MlflowClient(tracking_uri=uri)
    exp_id = client.create_experiment("robustness")
    client.create_experiment("ablation")
    log_trial(client, exp_id, method="global", seed=0, accs=[0.5, 0.7, 0.84], std=0.09)
    log_trial(client, exp_id, method="global", seed=1, accs=[0.6, 0.8, 0.86], std=0.11)
    log_trial(client, exp_id, method="ditto", seed=0, accs=[0.6, 0.9, 0.93], std=0.07)
    log_trial(client, exp_id, method="ditto", seed=1, accs=[0.1], std=0.5, status="RUNNING")
    log_trial(client, exp_id, method="ditto", seed=2, accs=[0.1], std=0.5, status="FAILED")
    versions = client.create_experiment("versions")
    log_trial(client, versions, method="global", seed=0, accs=[0.84], std=0.09, sha="sha1", start=1000,
              versions=f'{{"aggregator/mine": "1+src:aa", "engine": {ENGINE_VERSION}}}')
    log_trial(client, versions, method="global", seed=1, accs=[0.86], std=0.11, sha="sha2", start=2000,
              versions=f'{{"aggregator/mine": "1+src:bb", "engine": {ENGINE_VERSION}}}')
    log_trial(
        client,
        client.create_experiment("inflight"),
        method="global",
        seed=0,
        accs=[0.5],
        std=0.1,
        status="RUNNING",
    )
    return uri


@pytest.mark.slow  # the module's real MLflow store
def test_reader_returns_one_row_per_run_with_final_metrics(store):
    runs = read_runs(store, "robustness")
    assert len(runs) == 5
    assert sorted(runs["status"]) == ["FAILED", "FINISHED", "FINISHED", "FINISHED", "RUNNING"]
    finished = runs[runs["status"] == "FINISHED"].set_index(["method_label", "seed"])
    assert finished.loc[("global", "1"), "acc_pooled"] == 0.86  # latest value of the history
    assert finished.loc[("global", "1"), "attack.level"] == "0.5"
    assert finished.loc[("global", "1"), "dataset_fingerprint"] == "fp1"


@pytest.mark.slow  # the module's real MLflow store
def test_build_leaderboards_writes_tables_reproduction_and_figures(store, tmp_path):
    paths = build_leaderboards("robustness", store, str(tmp_path / "out"), "markdown", ci=True)
    assert sorted(p.name for p in paths) == [
        "curves_fmnist.png", "ditto_table1.md", "figure3_fmnist.png", "figure5_fmnist.png", "full.md", "reproduction.md",
    ]  # fmt: skip
    assert all(p.stat().st_size > 0 for p in paths)
    table1 = (tmp_path / "out" / "ditto_table1.md").read_text()
    # global: mean of 0.84 and 0.86 over two seeds, t(0.975, 1) = 12.706 -> ±.127; ditto: one seed
    assert "| global | .850±.127 (.10) |" in table1
    assert "| ditto | **.930 (.07)** |" in table1
    assert "- 1 run(s) still in progress are left out." in table1
    assert "- 1 failed or interrupted run(s) are left out." in table1
    repro = (tmp_path / "out" / "reproduction.md").read_text()
    assert "| fmnist | global | A1 50% | acc_pooled | 1, 9 | 0.855 | 0.850 | -0.005 | 2 |" in repro


@pytest.mark.slow  # the module's real MLflow store
def test_a_run_of_an_older_component_version_is_left_out_not_mixed_into_a_cell(store, tmp_path):
    paths = build_leaderboards("versions", store, str(tmp_path / "out"), "csv", figures=False)
    full = pd.read_csv(tmp_path / "out" / "full.csv")
    assert full[["mixed", "acc_pooled", "n_seeds"]].to_dict("records") == [
        {"mixed": False, "acc_pooled": 0.86, "n_seeds": 1}]
    assert [p.suffix for p in paths] == [".csv"] * len(paths)
    tables, _, _ = suite_tables("versions", store)
    full_table = next(t for t in tables if t.name == "full")
    assert "1 stale run(s), computed at other component versions than today's, are left out." in full_table.footnotes


@pytest.mark.slow  # the module's real MLflow store
def test_unknown_suite_lists_the_experiments_and_how_to_fill_one(store, tmp_path):
    with pytest.raises(LeaderboardError) as err:
        build_leaderboards("fairness", store, str(tmp_path), "latex")
    message = str(err.value)
    assert "no experiment named 'fairness'" in message
    assert "experiments there: Default (empty), ablation (empty), inflight, robustness, versions." in message
    assert "make benchmark SUITE=fairness" in message
    assert isinstance(err.value, ConfigError)


@pytest.mark.slow  # the module's real MLflow store
def test_a_suite_without_runs_says_how_to_fill_it(store, tmp_path):
    with pytest.raises(
        LeaderboardError, match=r"experiment 'ablation' .* has no runs .*make benchmark SUITE=ablation"
    ):
        build_leaderboards("ablation", store, str(tmp_path), "html")


@pytest.mark.slow  # the module's real MLflow store
def test_a_suite_with_only_running_trials_says_so(store, tmp_path):
    with pytest.raises(
        LeaderboardError, match=r"no finished runs .*1 run\(s\) still in progress.*SUITE=inflight"
    ):
        build_leaderboards("inflight", store, str(tmp_path), "markdown")


def test_a_missing_store_is_reported_and_not_created(tmp_path):
    uri = f"sqlite:///{tmp_path}/absent.db"
    with pytest.raises(LeaderboardError, match=r"no MLflow tracking store at .*absent\.db.*SUITE=robustness"):
        build_leaderboards("robustness", uri, str(tmp_path / "out"), "csv")
    assert not (tmp_path / "absent.db").exists()


def test_unknown_format_fails_before_reading(tmp_path):
    with pytest.raises(ConfigError, match="allowed: latex, markdown, html, csv"):
        build_leaderboards("robustness", f"sqlite:///{tmp_path}/absent.db", str(tmp_path), "docx")
