"""Tracking: store location, fail-fast checks, the run schema written and read through MLflow (SQLite)."""

import math

import pytest
from local_ports import free_port

from fedarena.bench.callback import identity_tags
from fedarena.bench.commands import ui_command
from fedarena.cli import main
from fedarena.config import ExperimentConfig
from fedarena.suites.grid import TrialSpec
from fedarena.tracking.location import TrackingError, redact, tracking_uri
from fedarena.tracking.runs import RunStore, param_value, run_params
from fedarena.tracking.store import check_store, suite_experiment


def test_tracking_uri_precedence(tmp_path, monkeypatch):
    # Prepare
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    # Execute / Assert: default sqlite file in the working directory, then the env var, then explicit
    assert tracking_uri(cwd=tmp_path) == f"sqlite:///{tmp_path.resolve()}/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://tracking.example:5000")
    assert tracking_uri(cwd=tmp_path) == "http://tracking.example:5000"
    assert tracking_uri("sqlite:///x.db", cwd=tmp_path) == "sqlite:///x.db"


def test_redact_hides_only_the_password():
    assert redact("postgresql://ann:s3cret@db:5432/runs") == "postgresql://ann:***@db:5432/runs"
    assert redact("sqlite:////tmp/a.db") == "sqlite:////tmp/a.db"


def test_unreachable_server_fails_fast_naming_its_address():
    # Prepare: a port nobody listens on
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    # Execute / Assert
    with pytest.raises(TrackingError, match=f"MLflow tracking server {uri} cannot be reached"):
        check_store(uri)


def test_sqlite_store_in_a_missing_folder_is_an_error(tmp_path):
    with pytest.raises(TrackingError, match="does not exist"):
        check_store(f"sqlite:///{tmp_path}/nowhere/mlflow.db")


def test_param_values_are_strings_with_json_containers_and_a_length_limit():
    assert param_value((64, 32)) == "[64, 32]"
    assert param_value(None) == "None"
    assert param_value(0.1) == "0.1"
    long = param_value("x" * 600)
    assert len(long) == 500 and long.endswith("...")
    assert run_params({"model.hidden": (64,), "seed": 3}) == {"model.hidden": "[64]", "seed": "3"}


@pytest.mark.slow  # a real MLflow store
def test_run_store_round_trip(tmp_path):
    # Prepare
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = check_store(uri)
    store = RunStore(client, suite_experiment(client, uri, "mysuite"))
    result = tmp_path / "clients.csv"
    result.write_text("client,accuracy\n0,0.5\n")
    # Execute
    run_id = store.open("global digits clean s0", {"rounds": "4", "method.name": "global"},
                        {"config_hash": "abc", "component_versions": '{"engine": 1}', "diverged": False},
                        {"rounds": 4})
    store.log_round(run_id, 2, {"acc_pooled": 0.25, "acc_malicious": math.nan, "round": 2})
    store.log_round(run_id, 4, {"acc_pooled": 0.75, "acc_malicious": math.nan})
    store.finish(run_id, "FINISHED", [result], {"diverged": True})
    # Assert
    exp = client.get_experiment_by_name("mysuite")
    assert exp.artifact_location == (tmp_path / "mlartifacts" / "mysuite").resolve().as_uri()
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params == {"rounds": "4", "method.name": "global"}
    assert run.data.tags["config_hash"] == "abc" and run.data.tags["diverged"] == "true"
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "acc_pooled")] == [(2, 0.25), (4, 0.75)]
    assert "acc_malicious" not in run.data.metrics and "round" not in run.data.metrics
    assert sorted(a.path for a in client.list_artifacts(run_id)) == ["clients.csv", "config.json"]
    assert [r.run_id for r in store.runs_by_hash()["abc"]] == [run_id]


@pytest.mark.slow  # a real MLflow store
def test_rounds_and_tags_are_written_in_one_batch_and_every_registered_metric_is_logged(tmp_path):
    # Prepare
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = check_store(uri)
    store = RunStore(client, suite_experiment(client, uri, "batched"))
    run_id = store.open("r", {}, {"config_hash": "h"}, {})
    # Execute: two evaluation rounds and a tag at once, then the end with one more round
    store.log_rounds(run_id, {20: {"acc_pooled": 0.5, "val_acc_pooled": 0.6}, 10: {"acc_pooled": 0.25}},
                     {"checkpoint_round": 20})
    store.finish(run_id, "FINISHED", tags={"diverged": False}, rounds={30: {"acc_pooled": 0.75}})
    # Assert
    run = client.get_run(run_id)
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "acc_pooled")] == [
        (10, 0.25), (20, 0.5), (30, 0.75)]
    assert run.data.metrics["val_acc_pooled"] == 0.6
    assert (run.data.tags["checkpoint_round"], run.data.tags["diverged"], run.info.status) == (
        "20", "false", "FINISHED")


@pytest.mark.slow  # a real MLflow store
def test_reopen_marks_running_drops_the_error_and_returns_last_round(tmp_path):
    # Prepare
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = check_store(uri)
    store = RunStore(client, suite_experiment(client, uri, "resume"))
    run_id = store.open("r", {}, {"config_hash": "h"}, {})
    store.log_round(run_id, 3, {"acc_pooled": 0.5})
    store.finish(run_id, "FAILED", tags={"error": "RuntimeError: boom"})
    # Execute
    last = store.reopen(run_id)
    # Assert
    run = client.get_run(run_id)
    assert last == 3
    assert run.info.status == "RUNNING" and "error" not in run.data.tags


def test_identity_tags_follow_the_schema():
    # Prepare
    cfg = ExperimentConfig.from_dict({"dataset": {"name": "digits"}, "attack": {"name": "a1", "level": 0.5}})
    spec = TrialSpec(cfg, "robustness", "quick", "ditto", "digits", "a1", 0.5, 0, "h1", "c1", "ditto digits a1@0.5 s0",
                     config_key="k1", versions={"engine": 1, "method/ditto": 2})
    # Execute
    tags = identity_tags(spec, {"git_sha": "abc", "fedarena_version": "0.1.0", "torch_version": "2"})
    # Assert
    assert tags == {"config_hash": "h1", "config_key": "k1", "component_versions": '{"engine": 1, "method/ditto": 2}',
                    "cell_hash": "c1", "identity_folds": "true", "suite": "robustness", "scale": "quick",
                    "method_label": "ditto", "dataset_label": "digits", "attack_label": "a1", "level": "0.5",
                    "diverged": "false", "dataset_name": "digits", "git_sha": "abc", "fedarena_version": "0.1.0",
                    "torch_version": "2", "runs_under_secure_aggregation": "true", "runs_under_central_dp": "true"}


def test_ui_binds_localhost_by_default(tmp_path):
    # Execute
    cmd = ui_command(f"sqlite:///{tmp_path}/mlflow.db", "127.0.0.1", 5000)
    # Assert
    assert cmd[1:4] == ["-m", "mlflow", "ui"]
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1" and cmd[cmd.index("--port") + 1] == "5000"
    assert cmd[cmd.index("--backend-store-uri") + 1] == f"sqlite:///{tmp_path}/mlflow.db"
    assert cmd[cmd.index("--default-artifact-root") + 1] == (tmp_path / "mlartifacts").resolve().as_uri()


def test_ui_refuses_a_missing_store(tmp_path, capsys):
    # Execute
    code = main(["ui", "--tracking-uri", f"sqlite:///{tmp_path}/none.db"])
    # Assert
    assert code == 2
    assert "no tracking store" in capsys.readouterr().err
