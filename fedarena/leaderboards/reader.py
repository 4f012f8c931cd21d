"""Read the runs of one suite from the MLflow tracking store (the benchmark's tracking URI).

Tracking schema (the contract with ``fedarena.tracking``): one experiment per suite, named after the
suite; one run per trial with the flattened config as params, provenance and table labels as tags,
and per-round metrics (the latest value is the final one). Everything goes through an explicit
``MlflowClient(tracking_uri=...)``; no global MLflow state is touched.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

import pandas as pd

from fedarena.params import ConfigError
from fedarena.tracking.location import redact
from fedarena.tracking.paging import all_runs

if TYPE_CHECKING:  # mlflow is imported when a store is read, not when the package is imported
    from mlflow.entities import Run
    from mlflow.tracking import MlflowClient



class LeaderboardError(ConfigError):
    """No runs to build leaderboards from: the message says what exists and how to fill a suite."""


@contextlib.contextmanager
def redacted_errors(tracking_uri: str):
    """LeaderboardErrors raised in the block name the store: re-raised with its password replaced by ``***``."""
    try:
        yield
    except LeaderboardError as err:
        raise LeaderboardError(str(err).replace(tracking_uri, redact(tracking_uri))) from None


def fill_hint(suite: str) -> str:
    return f"fill it with `make benchmark SUITE={suite}` (or `fedarena bench run {suite}`) using the same tracking URI"


def local_store_path(tracking_uri: str) -> Path | None:
    """The file or folder of a local store (sqlite / file), None for remote stores."""
    if tracking_uri.startswith("sqlite:///"):
        return Path(tracking_uri[len("sqlite:///") :])
    parsed = urlparse(tracking_uri)
    if parsed.scheme == "file":
        return Path(parsed.path)
    if parsed.scheme == "" or len(parsed.scheme) == 1:  # a plain path (or a Windows drive letter)
        return Path(tracking_uri)
    return None


def client_for(tracking_uri: str, suite: str) -> MlflowClient:
    """A client on an existing store; reading never creates an empty store as a side effect."""
    path = local_store_path(tracking_uri)
    if path is not None and not path.exists():
        raise LeaderboardError(
            f"no MLflow tracking store at {tracking_uri} ({path} does not exist); {fill_hint(suite)}"
        )
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri)


def experiment_summary(client: MlflowClient) -> str:
    """The experiments of a store, each marked '(empty)' when it has no runs."""
    names = []
    for exp in client.search_experiments():
        empty = not client.search_runs([exp.experiment_id], max_results=1)
        names.append(exp.name + (" (empty)" if empty else ""))
    return ", ".join(sorted(names)) or "none"


def suite_experiment_id(client: MlflowClient, tracking_uri: str, suite: str) -> str:
    """The experiment id of ``suite``; a LeaderboardError naming the experiments that exist if absent."""
    exp = client.get_experiment_by_name(suite)
    if exp is None:
        listing = experiment_summary(client)
        raise LeaderboardError(
            f"no experiment named {suite!r} in the tracking store {tracking_uri}; experiments there: "
            f"{listing}. Pick one of them or {fill_hint(suite)}"
        )
    return exp.experiment_id


def runs_frame(runs: list[Run]) -> pd.DataFrame:
    """One row per run: run_id, status, start_time, params, tags (not mlflow.*), final metrics."""
    rows = []
    for run in runs:
        row: dict = dict(run.data.params)
        row.update({k: v for k, v in run.data.tags.items() if not k.startswith("mlflow.")})
        row.update(run.data.metrics)
        row.update(run_id=run.info.run_id, status=run.info.status, start_time=run.info.start_time)
        rows.append(row)
    return pd.DataFrame(rows)


def read_runs(tracking_uri: str, suite: str) -> pd.DataFrame:
    """Every run (any status) of the suite's experiment; a LeaderboardError when there is none."""
    client = client_for(tracking_uri, suite)
    runs = all_runs(client, suite_experiment_id(client, tracking_uri, suite))
    if not runs:
        raise LeaderboardError(
            f"experiment {suite!r} in {tracking_uri} has no runs (experiments there: "
            f"{experiment_summary(client)}); {fill_hint(suite)}"
        )
    return runs_frame(runs)


def read_histories(tracking_uri: str, run_ids: list[str], metric: str = "acc_pooled") -> pd.DataFrame:
    """Per-round values of ``metric`` (step = round) for the given runs: run_id, step, value."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    rows = [
        (run_id, m.step, m.value) for run_id in run_ids for m in client.get_metric_history(run_id, metric)
    ]
    return pd.DataFrame(rows, columns=["run_id", "step", "value"])
