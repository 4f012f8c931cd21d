"""What ``fedarena ui`` opens: a suite's runs table in the MLflow UI, with the accuracy and fairness columns.

MLflow 3.17 opens an experiment on its GenAI "Overview" page (traces) and its runs table shows no metric
column. For the chosen suite's experiment this module writes, idempotently, what MLflow's frontend reads:

- the experiment tag ``mlflow.experimentKind = custom_model_development`` ("Model training": the Runs tab);
- the experiment tag ``mlflow.sharedViewState.fedarena``: a saved runs-table view (JSON) showing the metric
  columns ``VIEW_METRICS`` first, then the run descriptions; the URL's ``viewStateShareKey=fedarena`` loads it
  (MLflow's "Share view" mechanism: the page says it shows a shared view);
- each run's description (``mlflow.note.content``, ``tracking.notes.run_note``) where a run has none yet
  (runs tracked before descriptions were written),

and :func:`runs_url` is the direct address of that table. The per-client table of each run is its
``clients.csv`` artifact (written when the trial ends, ``tracking.runs``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from mlflow.entities import Experiment, Run
from mlflow.tracking import MlflowClient

from fedarena.errors import ConfigError
from fedarena.tracking.notes import NOTE_TAG, run_note
from fedarena.tracking.reading import all_runs, newest_run

VIEW_KEY = "fedarena"
SHARED_VIEW_TAG = "mlflow.sharedViewState." + VIEW_KEY
KIND_TAG, KIND = "mlflow.experimentKind", "custom_model_development"
# Benign accuracy, its std across benign devices, worst-10% devices, class-level fairness (mu_sigma, sigma_sigma).
VIEW_METRICS = ("acc_pooled", "acc_std", "acc_worst10", "class_std_mean", "class_std_std")
RUN_NAME, DESCRIPTION = "attributes.`Run Name`", "attributes.`Description`"


class UiError(ConfigError):
    """No suite to show: the message names the store's suites and how to fill one."""


@dataclass(frozen=True)
class SuiteView:
    name: str
    experiment_id: str
    runs: int
    described: int  # runs whose description was written now


def metric_column(name: str) -> str:
    return f"metrics.`{name}`"


def view_state() -> dict:
    """The runs-table view: metric columns first (after the run name), then the description; newest first."""
    metrics = [metric_column(m) for m in VIEW_METRICS]
    return {
        "selectedColumns": [*metrics, DESCRIPTION],
        "columnOrder": [RUN_NAME, *metrics, DESCRIPTION],
        "columnWidths": {RUN_NAME: 190, **{m: 115 for m in metrics}, DESCRIPTION: 520},
        "orderByKey": "attributes.start_time",
        "orderByAsc": False,
    }


def runs_url(host: str, port: int, experiment_id: str) -> str:
    """The direct address of the suite's runs table with the saved view (a wildcard host reads as localhost)."""
    shown = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    netloc = f"[{shown}]" if ":" in shown else shown
    query = f"workflowType=machine_learning&viewStateShareKey={VIEW_KEY}"
    return f"http://{netloc}:{port}/#/experiments/{experiment_id}/runs?{query}"


def latest_suite_run(client: MlflowClient, experiment: Experiment) -> Run | None:
    """The experiment's newest run if it is a benchmark trial (it carries the ``suite`` tag)."""
    newest = newest_run(client, experiment.experiment_id)
    return newest if newest is not None and "suite" in newest.data.tags else None


def suite_experiments(client: MlflowClient) -> list[tuple[Experiment, int]]:
    """(experiment, start time of its newest run) of every suite in the store, most recent first."""
    found = []
    for experiment in client.search_experiments():
        run = latest_suite_run(client, experiment)
        if run is not None:
            found.append((experiment, run.info.start_time or 0))
    return sorted(found, key=lambda item: -item[1])


def pick_suite(client: MlflowClient, store: str, suite: str | None) -> Experiment:
    """``suite``'s experiment, or (None) the suite run most recently; UiError naming the suites otherwise."""
    suites = suite_experiments(client)
    names = ", ".join(sorted(e.name for e, _ in suites)) or "none"
    fill = "fill one with `make benchmark SUITE=NAME` (fedarena bench run NAME) using the same tracking store"
    if suite is None:
        if not suites:
            raise UiError(f"no benchmark runs in the tracking store {store}; {fill}")
        return suites[0][0]
    chosen = [e for e, _ in suites if e.name == suite]
    if not chosen:
        raise UiError(f"no suite {suite!r} with runs in the tracking store {store}; suites there: {names}; "
                      f"or {fill}")
    return chosen[0]


def describe_runs(client: MlflowClient, runs: list[Run]) -> int:
    """Write the description of every benchmark run that has none; returns how many were written."""
    missing = [r for r in runs if NOTE_TAG not in r.data.tags and "suite" in r.data.tags]
    for run in missing:
        client.set_tag(run.info.run_id, NOTE_TAG, run_note(run.data.tags, run.data.params))
    return len(missing)


def prepare_view(client: MlflowClient, experiment: Experiment) -> SuiteView:
    """Make the experiment open on its runs table with the saved view; describe runs without a description."""
    state = json.dumps(view_state(), sort_keys=True)
    if experiment.tags.get(SHARED_VIEW_TAG) != state:
        client.set_experiment_tag(experiment.experiment_id, SHARED_VIEW_TAG, state)
    if experiment.tags.get(KIND_TAG) != KIND:
        client.set_experiment_tag(experiment.experiment_id, KIND_TAG, KIND)
    runs = all_runs(client, experiment.experiment_id)
    return SuiteView(experiment.name, experiment.experiment_id, len(runs), describe_runs(client, runs))
