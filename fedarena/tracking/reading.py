"""The one reader of runs: a suite's runs as a DataFrame (leaderboards, report, figures, ``fedarena.runs``), metric
histories and per-client tables, the runs a benchmark plans with (``RunSummary``, ``RunStore``'s reads) and
what the UI view needs, from an existing store.

Tracking schema (the contract with ``tracking.runs``, which writes it): one experiment per suite, named
after the suite; one run per trial with the flattened config as params, provenance and table labels as
tags, per-round metrics (the latest value is the final one) and the ``clients.csv`` artifact. Everything
goes through an explicit ``MlflowClient(tracking_uri=...)``; no global MLflow state is touched, and reading
never creates an empty store as a side effect.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from mlflow.entities import Run
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from fedarena.config import ExperimentConfig
from fedarena.errors import ConfigError
from fedarena.simulation.properties import stored_value
from fedarena.tracking.environ import env_vars
from fedarena.tracking.location import local_store_path
from fedarena.tracking.location import tracking_uri as resolve_uri
from fedarena.tracking.notes import CLIENTS_ARTIFACT
from fedarena.tracking.store import mlflow_client
from fedarena.tracking.versions import (
    VERSIONS_TAG,
    RunIdentity,
    current_versions,
    is_current,
    parse_param,
    run_identity,
)

CONFIG_KEYS = set(ExperimentConfig().to_dict())  # a run's params are its flattened config: these are its roots
PAGE = 1000  # runs per search_runs call (MLflow's maximum is larger; this keeps responses small)


def all_runs(client: MlflowClient, experiment_id: str | list[str], filter_string: str = "") -> list[Run]:
    """Every run of an experiment (or of several; those matching ``filter_string``), page by page: what the
    tables, the UI view and a resumed benchmark read."""
    ids = [experiment_id] if isinstance(experiment_id, str) else list(experiment_id)
    runs, token = [], None
    while True:
        page = client.search_runs(ids, filter_string, max_results=PAGE, page_token=token)
        runs += list(page)
        token = page.token
        if not token:
            return runs


REUSED_FROM = "reused_from"  # the tag of a run copied from another suite's: the computing run's id

@dataclass(frozen=True)
class RunSummary:
    run_id: str
    status: str
    tags: dict[str, str]
    start_time: int
    identity: RunIdentity | None = None  # its identity (``tracking.versions.run_identity``)

    @property
    def config_hash(self) -> str | None:
        return self.identity.config_hash if self.identity is not None else self.tags.get("config_hash")


def summarize(run) -> RunSummary:
    """A stored run with its identity as recorded (or inferred for a previous release's run)."""
    tags = dict(run.data.tags)
    return RunSummary(run.info.run_id, run.info.status, tags, run.info.start_time,
                      run_identity(run.data.params, tags))



def run_summaries(client: MlflowClient, experiment_id: str) -> list[RunSummary]:
    """Every run of an experiment with its identity, newest first."""
    runs = [summarize(run) for run in all_runs(client, experiment_id)]
    return sorted(runs, key=lambda r: r.start_time or 0, reverse=True)


def finished_elsewhere(client: MlflowClient, experiment_id: str) -> dict[str, RunSummary]:
    """The newest FINISHED computing run (not itself a copy) of each identity in the other suites'
    experiments: the trials a suite reuses instead of computing them again."""
    others = [e.experiment_id for e in client.search_experiments() if e.experiment_id != experiment_id]
    found: dict[str, RunSummary] = {}
    for run in all_runs(client, others, "attributes.status = 'FINISHED'") if others else ():
        summary = summarize(run)
        key = summary.config_hash
        if key and "suite" in summary.tags and REUSED_FROM not in summary.tags and (
                key not in found or summary.start_time > found[key].start_time):
            found[key] = summary
    return found


def finished_with(client: MlflowClient, config_hash: str) -> RunSummary | None:
    """The newest FINISHED computing run of an identity in any experiment (None: none yet)."""
    experiments = [e.experiment_id for e in client.search_experiments()]
    found = client.search_runs(experiments, f"tags.config_hash = '{config_hash}' and attributes.status = 'FINISHED'",
                               order_by=["attributes.start_time DESC"], max_results=50)
    computed = [run for run in found if REUSED_FROM not in run.data.tags]
    return summarize(computed[0]) if computed else None


def newest_run(client: MlflowClient, experiment_id: str) -> Run | None:
    """The experiment's most recently started run (None: it has none)."""
    newest = client.search_runs([experiment_id], order_by=["attributes.start_time DESC"], max_results=1)
    return newest[0] if newest else None


def copy_material(client: MlflowClient, run_id: str) -> tuple[Run, list]:
    """(the run, every value of its every metric at every step): what a copy of it logs."""
    run = client.get_run(run_id)
    return run, [m for key in run.data.metrics for m in client.get_metric_history(run_id, key)]


def download_artifacts(client: MlflowClient, run_id: str, folder: str) -> str:
    """Every artifact of a run into ``folder`` (no progress bar); returns where."""
    with env_vars(MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR="false"):
        return client.download_artifacts(run_id, "", folder)


class NoRunsError(ConfigError):
    """Nothing to read (no store, no such suite, no runs): the message says what exists and how to fill it."""


def fill_hint(suite: str) -> str:
    return f"fill it with `make benchmark SUITE={suite}` (or `fedarena bench run {suite}`) using the same tracking URI"


def client_for(tracking_uri: str, suite: str) -> MlflowClient:
    """A client on an existing store (a missing local store is a NoRunsError, never created here)."""
    path = local_store_path(tracking_uri)
    if path is not None and not path.exists():
        raise NoRunsError(f"no MLflow tracking store at {tracking_uri} ({path} does not exist); {fill_hint(suite)}")
    return mlflow_client(tracking_uri)


def experiment_summary(client: MlflowClient) -> str:
    """The experiments of a store, each marked '(empty)' when it has no runs."""
    names = []
    for exp in client.search_experiments():
        empty = not client.search_runs([exp.experiment_id], max_results=1)
        names.append(exp.name + (" (empty)" if empty else ""))
    return ", ".join(sorted(names)) or "none"


def suite_experiment_id(client: MlflowClient, tracking_uri: str, suite: str) -> str:
    """The experiment id of ``suite``; a NoRunsError naming the experiments that exist if absent."""
    exp = client.get_experiment_by_name(suite)
    if exp is None:
        raise NoRunsError(f"no experiment named {suite!r} in the tracking store {tracking_uri}; experiments there: "
                          f"{experiment_summary(client)}. Pick one of them or {fill_hint(suite)}")
    return exp.experiment_id


def runs_frame(runs: list[Run]) -> pd.DataFrame:
    """One row per run: run_id, status, start_time, params, tags (not mlflow.*), final metrics, and whether
    the run is ``current`` (of today's component versions, ``tracking.versions``; a previous release's run
    gets the versions inferred for it in ``component_versions``, or none: stale)."""
    identities = [run_identity(run.data.params, run.data.tags) for run in runs]
    today = current_versions((i.versions, run.info.start_time or 0) for i, run in zip(identities, runs, strict=True)
                             if i.versions is not None)
    rows = []
    for run, identity in zip(runs, identities, strict=True):
        row: dict = dict(run.data.params)
        row.update({k: v for k, v in run.data.tags.items() if not k.startswith("mlflow.")})
        row.update({key: stored_value(key, value) for key, value in run.data.metrics.items()})
        row.update(run_id=run.info.run_id, status=run.info.status, start_time=run.info.start_time,
                   current=is_current(identity, today))
        if identity.legacy:
            row[VERSIONS_TAG] = json.dumps(identity.versions, sort_keys=True) if identity.versions else None
            row["config_hash"] = identity.config_hash
        if identity.recorded_hash:  # recorded before folding: today's identity, so its cell meets today's runs
            row.update(config_hash=identity.config_hash, config_key=identity.config_key, cell_hash=identity.cell_hash)
        rows.append(row)
    return pd.DataFrame(rows)


def read_runs(tracking_uri: str, suite: str) -> pd.DataFrame:
    """Every run (any status) of the suite's experiment; a NoRunsError when there is none."""
    client = client_for(tracking_uri, suite)
    runs = all_runs(client, suite_experiment_id(client, tracking_uri, suite))
    if not runs:
        raise NoRunsError(f"experiment {suite!r} in {tracking_uri} has no runs (experiments there: "
                          f"{experiment_summary(client)}); {fill_hint(suite)}")
    return runs_frame(runs)


def read_histories(tracking_uri: str, run_ids: list[str], metric: str = "acc_pooled") -> pd.DataFrame:
    """Per-round values of ``metric`` (step = round) for the given runs: run_id, step, value."""
    client = mlflow_client(tracking_uri)
    rows = [(run_id, m.step, stored_value(metric, m.value)) for run_id in run_ids
            for m in client.get_metric_history(run_id, metric)]
    return pd.DataFrame(rows, columns=["run_id", "step", "value"])


def read_client_tables(tracking_uri: str, run_ids: list[str]) -> tuple[pd.DataFrame, int]:
    """(run_id, client, malicious, accuracy) of every run's per-client table; and how many runs had none."""
    client = mlflow_client(tracking_uri)
    frames, missing = [], 0
    # no MLflow progress bar per artifact downloaded (one per run: hundreds of bars)
    with tempfile.TemporaryDirectory() as tmp, env_vars(MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR="false"):
        for run_id in run_ids:
            try:
                path = client.download_artifacts(run_id, CLIENTS_ARTIFACT, str(Path(tmp, run_id)))
            except (MlflowException, OSError):
                missing += 1
                continue
            table = pd.read_csv(path, usecols=["client", "malicious", "accuracy"])
            frames.append(table.assign(run_id=run_id))
    columns = ["client", "malicious", "accuracy", "run_id"]
    return (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)), missing


def runs(suite: str, tracking_uri: str | None = None) -> pd.DataFrame:
    """``fedarena.runs``: one row per run of the suite's experiment: status, labels and every tag, the final
    metrics, whether it is ``current``, its ``config`` (a nested dict, from its params) and ``versions``
    (component -> version)."""
    frame = read_runs(resolve_uri(tracking_uri), suite)
    frame["config"] = [config_of(row) for row in frame.to_dict("records")]
    versions = frame[VERSIONS_TAG] if VERSIONS_TAG in frame else pd.Series([None] * len(frame))
    frame["versions"] = [json.loads(v) if isinstance(v, str) else {} for v in versions]
    return frame


def config_of(row: dict) -> dict:
    """A run's config from its params (``section.key`` columns and top-level keys)."""
    config: dict = {}
    for key, text in row.items():
        if key.split(".")[0] not in CONFIG_KEYS or not isinstance(text, str):
            continue
        target = config
        parts = key.split(".")
        for part in parts[:-1]:
            target = target.setdefault(part, {})
        target[parts[-1]] = parse_param(text)
    return config
