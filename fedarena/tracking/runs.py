"""One MLflow run per benchmark trial: the tracking schema (the contract ``fedarena.leaderboards`` reads).

- Experiment: one per suite, named exactly the suite name (``store.suite_experiment``).
- Params: the flattened resolved config (``ExperimentConfig.flat()``: ``dataset.name``, ``method.lam``,
  ``attack.level``, ``seed``, ``rounds``...), values as strings (containers as JSON), at most
  ``PARAM_MAX`` characters (the full config is the artifact ``config.json``).
- Tags: ``TAGS`` below; ``level`` is the attack level as a fraction string, ``diverged`` is
  ``"true"``/``"false"``, labels are the suite's row/column labels.
- Metrics: ``METRICS`` at every evaluation round, ``step = round``; NaN values are not logged
  (e.g. ``acc_malicious`` without malicious clients).
- Artifacts: ``config.json`` (at the start), ``result.json`` and ``clients.csv`` (the per-client table
  of the last evaluation) at the end. Status: FINISHED, FAILED or KILLED (interrupted).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param, Run, RunTag
from mlflow.tracking import MlflowClient

METRICS = ("acc_pooled", "acc_mean", "acc_std", "acc_worst10", "class_std_mean", "class_std_std",
           "acc_malicious", "loss_mean", "diverged")
TAGS = ("config_hash", "cell_hash", "suite", "scale", "dataset_fingerprint", "git_sha", "fedarena_version",
        "torch_version", "method_label", "dataset_label", "attack_label", "level", "diverged", "dataset_name")
# Bookkeeping tags of the benchmark runner: resume point, retries and the error of a failed trial.
CHECKPOINT, CHECKPOINT_ROUND, RESUMED_FROM, FAILURES, ERROR = (
    "checkpoint", "checkpoint_round", "resumed_from_round", "num_failures", "error")
PARAM_MAX = 500  # older MLflow servers reject longer param values
TAG_MAX = 5000
BATCH = 100  # MLflow's limit of params / tags per log_batch call
FINISHED, FAILED, KILLED, RUNNING = "FINISHED", "FAILED", "KILLED", "RUNNING"


def param_value(value: Any) -> str:
    """A config value as an MLflow param string: scalars with ``str``, containers as JSON, truncated."""
    if isinstance(value, (list, tuple, dict)):
        text = json.dumps(value, sort_keys=True, default=str)
    else:
        text = str(value)
    return text if len(text) <= PARAM_MAX else text[: PARAM_MAX - 3] + "..."


def run_params(flat_config: Mapping[str, Any]) -> dict[str, str]:
    return {key[:250]: param_value(value) for key, value in flat_config.items()}


def run_name(method_label: str, dataset_label: str, attack_label: str, level: float, seed: int) -> str:
    """Readable run (and Ray trial) name, e.g. ``ditto fmnist a1@0.5 s0`` or ``global fmnist clean s1``;
    the config hash, not this, is the run's identity."""
    setting = f"{attack_label}@{level:g}" if level > 0 else attack_label
    return f"{method_label} {dataset_label} {setting} s{seed}"


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    status: str
    tags: dict[str, str]
    start_time: int


class RunStore:
    """Writes and queries the runs of one suite's experiment through an explicit client."""

    def __init__(self, client: MlflowClient, experiment_id: str):
        self.client = client
        self.experiment_id = experiment_id

    def open(self, name: str, params: Mapping[str, str], tags: Mapping[str, str], config: dict) -> str:
        run = self.client.create_run(self.experiment_id, run_name=name, tags={k: _tag(v) for k, v in tags.items()})
        run_id = run.info.run_id
        items = [Param(k, v) for k, v in params.items()]
        for start in range(0, len(items), BATCH):
            self.client.log_batch(run_id, params=items[start : start + BATCH])
        self.client.log_dict(run_id, config, "config.json")
        return run_id

    def reopen(self, run_id: str) -> int:
        """Mark an interrupted run RUNNING again (dropping the error of a failed attempt); returns the last
        round it has metrics for (0: none)."""
        if ERROR in self.client.get_run(run_id).data.tags:
            self.client.delete_tag(run_id, ERROR)
        self.client.update_run(run_id, status=RUNNING)
        history = self.client.get_metric_history(run_id, METRICS[0])
        return max((m.step for m in history), default=0)

    def log_round(self, run_id: str, round_idx: int, metrics: Mapping[str, float]) -> None:
        now = int(time.time() * 1000)
        entries = [Metric(key, float(metrics[key]), now, round_idx) for key in METRICS
                   if key in metrics and metrics[key] is not None and math.isfinite(float(metrics[key]))]
        if entries:
            self.client.log_batch(run_id, metrics=entries)

    def set_tags(self, run_id: str, tags: Mapping[str, Any]) -> None:
        items = [RunTag(k, _tag(v)) for k, v in tags.items()]
        for start in range(0, len(items), BATCH):
            self.client.log_batch(run_id, tags=items[start : start + BATCH])

    def finish(self, run_id: str, status: str, files: Iterable[Path] = (), tags: Mapping[str, Any] | None = None):
        for path in files:
            self.client.log_artifact(run_id, str(path))
        if tags:
            self.set_tags(run_id, tags)
        self.client.set_terminated(run_id, status)

    def runs_by_hash(self) -> dict[str, list[RunSummary]]:
        """Every run of the experiment grouped by its ``config_hash`` tag, newest first."""
        grouped: dict[str, list[RunSummary]] = {}
        for run in self._all_runs():
            key = run.data.tags.get("config_hash")
            if key:
                grouped.setdefault(key, []).append(
                    RunSummary(run.info.run_id, run.info.status, dict(run.data.tags), run.info.start_time))
        for runs in grouped.values():
            runs.sort(key=lambda r: r.start_time or 0, reverse=True)
        return grouped

    def _all_runs(self) -> list[Run]:
        runs, token = [], None
        while True:
            page = self.client.search_runs([self.experiment_id], max_results=1000, page_token=token)
            runs += list(page)
            token = page.token
            if not token:
                return runs


def _tag(value: Any) -> str:
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return text if len(text) <= TAG_MAX else text[: TAG_MAX - 3] + "..."


def version_tags(versions: Mapping[str, str]) -> dict[str, str]:
    """Provenance tags from ``simulation.runner.code_version()``: git_sha and the package versions."""
    tags = {"git_sha": versions.get("git_sha", "unknown")}
    tags.update({f"{name}_version": value for name, value in versions.items() if name != "git_sha"})
    return tags
