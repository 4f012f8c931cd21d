"""`fedarena ui`: the suite's runs table with the accuracy and fairness columns, run descriptions, clear errors.

The last test starts the real MLflow UI the way `make ui` does and looks at what it opens in headless
Chromium (skipped where Chromium is not installed).
"""

import json

import pytest
from mlflow.tracking import MlflowClient
from store_for_views import NAME, fill_store

from fedarena.bench import commands as bench_commands
from fedarena.bench.trainable import CLIENTS_FILE
from fedarena.cli import main
from fedarena.tracking.notes import CLIENTS_ARTIFACT, NOTE_TAG, run_note
from fedarena.tracking.view import (
    KIND,
    KIND_TAG,
    SHARED_VIEW_TAG,
    UiError,
    pick_suite,
    prepare_view,
    runs_url,
    view_state,
)


def test_run_note_says_method_attack_level_and_the_dataset_run():
    # Prepare
    tags = {"method_label": "krum", "attack_label": "a1", "level": "0.5", "dataset_label": "digits",
            "dataset_name": "digits", "scale": "quick"}
    params = {"method.name": "global", "aggregator.name": "krum", "seed": "1"}
    clean = {**tags, "attack_label": "clean", "level": "0.0", "dataset_label": "my_mix"}
    # Execute / Assert
    assert run_note(tags, params) == ("method global, aggregator krum, dataset digits; attack a1 at level 0.5 (50% "
                                      "of clients malicious); seed 1, scale quick. Per-client table: artifact "
                                      "clients.csv.")
    assert ", dataset digits (table label my_mix); no attack; seed 1" in run_note(clean, params)
    assert CLIENTS_ARTIFACT == CLIENTS_FILE


def test_view_state_shows_the_metric_columns_first_and_the_url_opens_it():
    # Execute
    state = view_state()
    # Assert
    assert state["selectedColumns"] == ["metrics.`acc_pooled`", "metrics.`acc_std`", "metrics.`acc_worst10`",
                                        "metrics.`class_std_mean`", "metrics.`class_std_std`", "attributes.`Description`"]
    assert state["columnOrder"][0] == "attributes.`Run Name`" and state["columnOrder"][1:] == state["selectedColumns"]
    assert runs_url("127.0.0.1", 5000, "3") == ("http://127.0.0.1:5000/#/experiments/3/runs?"
                                               "workflowType=machine_learning&viewStateShareKey=fedarena")
    assert runs_url("0.0.0.0", 80, "1").startswith("http://127.0.0.1:80/#/")
    assert runs_url("::1", 80, "1").startswith("http://[::1]:80/#/")


@pytest.mark.slow  # real MLflow stores
def test_prepare_view_tags_the_experiment_and_describes_undescribed_runs(tmp_path):
    # Prepare: runs tracked without descriptions (older versions)
    client = MlflowClient(tracking_uri=fill_store(tmp_path, described=False))
    experiment = pick_suite(client, "store", None)
    # Execute
    first = prepare_view(client, experiment)
    second = prepare_view(client, client.get_experiment(experiment.experiment_id))
    # Assert
    tags = client.get_experiment(experiment.experiment_id).tags
    assert (first.name, first.runs, first.described, second.described) == (NAME, 12, 12, 0)
    assert tags[KIND_TAG] == KIND and json.loads(tags[SHARED_VIEW_TAG]) == view_state()
    run = client.search_runs([experiment.experiment_id], filter_string="tags.method_label = 'median' and "
                             "tags.attack_label = 'a1' and params.seed = '1'")[0]
    assert run.data.tags[NOTE_TAG].startswith("method global, aggregator median, dataset synthetic (table label "
                                              "syn); attack a1 at level 0.5")
    assert [a.path for a in client.list_artifacts(run.info.run_id)] == ["clients.csv", "config.json"]


@pytest.mark.slow  # real MLflow stores
def test_the_most_recent_suite_is_the_default_and_a_named_one_is_found(tmp_path):
    # Prepare: a second suite run later, and an experiment of another tool
    client = MlflowClient(tracking_uri=fill_store(tmp_path))
    later = client.create_experiment("later")
    client.create_run(later, tags={"suite": "later"})
    other = client.create_experiment("notebook")
    client.create_run(other)
    # Execute / Assert
    assert pick_suite(client, "store", None).name == "later"
    assert pick_suite(client, "store", NAME).name == NAME
    with pytest.raises(UiError, match=r"no suite 'notebook' with runs in the tracking store store; suites there: "
                                      r"later, viewgrid; or fill one with `make benchmark SUITE=NAME`"):
        pick_suite(client, "store", "notebook")


def run_cli(argv, capsys, monkeypatch) -> tuple[int, list[str]]:
    """``fedarena ARGV`` in-process; starting the MLflow server would fail the test."""

    def no_server(uri, host, port):
        raise AssertionError("the UI would have started")

    monkeypatch.setattr(bench_commands, "ui_command", no_server)
    capsys.readouterr()  # what the test's preparation printed (MLflow creating a store)
    code = main(argv)
    captured = capsys.readouterr()
    return code, (captured.out + captured.err).strip().splitlines()


@pytest.mark.slow  # real MLflow stores
def test_ui_on_an_empty_store_or_an_unknown_suite_is_one_error_line(tmp_path, capsys, monkeypatch):
    # Prepare: a real store with no run at all, and a filled one
    empty = f"sqlite:///{tmp_path}/empty.db"
    MlflowClient(tracking_uri=empty).search_experiments()
    filled = fill_store(tmp_path)
    # Execute
    code, lines = run_cli(["ui", "--tracking-uri", empty, "--port", "5991"], capsys, monkeypatch)
    code2, lines2 = run_cli(["ui", "--tracking-uri", filled, "--suite", "robustness", "--port", "5991"], capsys,
                            monkeypatch)
    # Assert
    assert (code, code2) == (2, 2)
    assert lines == [f"fedarena: error: no benchmark runs in the tracking store {empty}; fill one with "
                     "`make benchmark SUITE=NAME` (fedarena bench run NAME) using the same tracking store"]
    assert len(lines2) == 1 and lines2[0].startswith("fedarena: error: no suite 'robustness' with runs")
    assert "suites there: viewgrid;" in lines2[0]
