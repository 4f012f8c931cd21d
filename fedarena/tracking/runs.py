"""One MLflow run per benchmark trial: the tracking schema (the contract ``fedarena.leaderboards`` reads).

- Experiment: one per suite, named exactly the suite name (``store.suite_experiment``).
- Params: the flattened resolved config (``ExperimentConfig.flat()``: ``dataset.name``, ``method.lam``,
  ``attack.level``, ``seed``, ``rounds``...), values as strings (containers as JSON), at most
  ``PARAM_MAX`` characters (the full config is the artifact ``config.json``).
- Tags: ``TAGS`` below; ``level`` is the attack level as a fraction string, ``diverged`` is
  ``"true"``/``"false"``, labels are the suite's row/column labels (``dataset_label`` names the dataset
  really run, see ``suites.dataset_labels``). A run of one variant of a selected method (a suite entry with
  ``select``) also has ``select_group`` (the table row), ``select_by`` (the metric that picks the variant)
  and ``variant`` (e.g. ``aggregator.eps=0.5``). ``backend_used`` is the backend that ran the trial (what
  ``backend: auto`` chose; the param ``backend`` says what was asked). A run of a suite's privacy axis
  (other than ``none``) has ``privacy_label``, and one of its deployment axis (other than ``synchronous``)
  ``deployment_label`` (and ``f_declared``, half or double, where its entry declares the server's f).
- Metrics: every metric registered (``simulation.metrics.metric_directions``, a plugin's too) at every evaluation
  round, ``step = round``; NaN values are not logged (e.g. ``acc_malicious`` without malicious clients). The run
  properties (``simulation.properties``: ``epsilon`` under differential privacy) likewise, an infinite one too
  (MLflow stores the largest float; ``tracking.reading`` gives back ``inf``).
  The benchmark writes the rounds of a trial in batches (with a checkpoint, and at the end). At the last
  round, what the trial's last attempt cost (``simulation.costs``): ``cost_total_s``, ``cost_round_ms``,
  ``cost_eval_s``, ``cost_checkpoint_s``, ``cost_setup_s`` (with ``*_calls``), ``cost_peak_rss_mb`` and on CUDA
  ``cost_peak_round_mb`` / ``cost_peak_eval_mb``.
- Artifacts: ``config.json`` (at the start), ``result.json`` and ``clients.csv`` (the per-client table
  of the last evaluation) at the end. Status: FINISHED, FAILED or KILLED (interrupted).
- Identity (``simulation.identity``, ``tracking.versions``): ``config_hash`` (the values the trial uses and
  the versions of its components), ``config_key`` (the values alone) and ``component_versions`` (JSON).
- Reuse: a trial finished in another suite's experiment is not computed again; its run is copied into the
  suite's experiment (``RunStore.link``: params, metrics, artifacts, the suite's own labels) with
  ``reused_from`` (the computing run's id) and ``reused_from_suite``, and the computing run's ``used_by``
  lists every suite that shows it (comma-separated).
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param, RunTag
from mlflow.store.artifact.artifact_repo import ArtifactRepository
from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository
from mlflow.tracking import MlflowClient

from fedarena.simulation.costs import COST_PREFIX
from fedarena.simulation.metrics import metric_directions
from fedarena.simulation.properties import run_property_directions
from fedarena.tracking.reading import (
    REUSED_FROM,
    RunSummary,
    copy_material,
    download_artifacts,
    finished_elsewhere,
    finished_with,
    run_summaries,
)

HISTORY_METRIC = "acc_pooled"  # the metric whose history says which rounds a run has logged
TAGS = ("config_hash", "config_key", "component_versions", "cell_hash", "suite", "scale", "dataset_fingerprint",
        "git_sha", "fedarena_version", "torch_version", "method_label", "dataset_label", "attack_label", "level",
        "diverged", "dataset_name", "select_group", "select_by", "variant", "backend_used", "privacy_label",
        "deployment_label", "f_declared", "identity_folds", "runs_under_secure_aggregation", "runs_under_central_dp")
REUSED_FROM_SUITE, USED_BY = "reused_from_suite", "used_by"  # REUSED_FROM: ``tracking.reading``
METRIC_DIRECTIONS_TAG = "metric_directions"  # JSON {metric: higher is better} of the plugins' metrics a run logged
BACKEND_USED = "backend_used"  # the backend that ran (what ``backend: auto`` chose), tagged with the first report
# Bookkeeping tags of the benchmark runner: resume point, retries and the error of a failed trial.
CHECKPOINT, CHECKPOINT_ROUND, RESUMED_FROM, FAILURES, ERROR = (
    "checkpoint", "checkpoint_round", "resumed_from_round", "num_failures", "error")
# ``failure``: why a FAILED run failed: ``permanent`` (config, data or shape: a rerun skips it unless asked to
# retry it) or ``transient`` (Ray's retries ran out: a rerun resumes it).
FAILURE_KIND, PERMANENT, TRANSIENT = "failure", "permanent", "transient"
PARAM_MAX = 500  # older MLflow servers reject longer param values
TAG_MAX = 5000
BATCH = 100  # MLflow's limit of params / tags per log_batch call
METRIC_BATCH = 900  # below MLflow's limit of 1000 entries (metrics + tags) per log_batch call
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


def run_name(method_label: str, dataset_label: str, attack_label: str, level: float, seed: int,
             privacy_label: str = "none", deployment_label: str = "synchronous") -> str:
    """Readable run (and Ray trial) name, e.g. ``ditto digits a1@0.5 s0``, ``global fmnist clean s1``, with
    differential privacy ``global digits clean eps10 s0``, in another deployment than the synchronous lab
    ``krum digits alie@0.2 fail0.3 s0``; the config hash, not this, is the run's identity."""
    setting = f"{attack_label}@{level:g}" if level > 0 else attack_label
    private = f" {privacy_label}" if privacy_label != "none" else ""
    deployed = f" {deployment_label}" if deployment_label != "synchronous" else ""
    return f"{method_label} {dataset_label} {setting}{private}{deployed} s{seed}"


class RunStore:
    """Writes and queries the runs of one suite's experiment through an explicit client."""

    def __init__(self, client: MlflowClient, experiment_id: str):
        self.client = client
        self.experiment_id = experiment_id
        # run id -> artifact URI of the runs this store opened or wrote artifacts to, until it finishes them: the
        # client would read the whole run back from the database for it (~4 ms of the driver's time per trial)
        self.artifact_uris: dict[str, str] = {}

    def open(self, name: str, params: Mapping[str, str], tags: Mapping[str, str], config: dict) -> str:
        run = self.client.create_run(self.experiment_id, run_name=name, tags={k: _tag(v) for k, v in tags.items()})
        run_id = run.info.run_id
        self.artifact_uris[run_id] = run.info.artifact_uri
        items = [Param(k, v) for k, v in params.items()]
        for start in range(0, len(items), BATCH):
            self.client.log_batch(run_id, params=items[start : start + BATCH])
        with tempfile.TemporaryDirectory() as tmp:  # as ``MlflowClient.log_dict`` writes it
            path = Path(tmp, "config.json")
            path.write_text(json.dumps(config, indent=2, default=str))
            self._artifacts(run_id).log_artifact(str(path))
        return run_id

    def _artifacts(self, run_id: str) -> ArtifactRepository:
        """The run's artifact repository, as ``MlflowClient.log_artifact`` finds it."""
        if run_id not in self.artifact_uris:  # a resumed run: read once, not once per artifact
            self.artifact_uris[run_id] = self.client.get_run(run_id).info.artifact_uri
        return get_artifact_repository(self.artifact_uris[run_id], tracking_uri=self.client.tracking_uri)

    def reopen(self, run_id: str) -> int:
        """Mark an interrupted run RUNNING again (dropping the error of a failed attempt and its kind); returns
        the last round it has metrics for (0: none)."""
        tags = self.client.get_run(run_id).data.tags
        for key in (ERROR, FAILURE_KIND):
            if key in tags:
                self.client.delete_tag(run_id, key)
        self.client.update_run(run_id, status=RUNNING)
        history = self.client.get_metric_history(run_id, HISTORY_METRIC)
        return max((m.step for m in history), default=0)

    def log_round(self, run_id: str, round_idx: int, metrics: Mapping[str, float]) -> None:
        self.log_rounds(run_id, {round_idx: metrics})

    def log_rounds(self, run_id: str, rounds: Mapping[int, Mapping[str, float]],
                   tags: Mapping[str, Any] | None = None) -> None:
        """The metrics of several evaluation rounds (``{round: metrics}``) and some tags, in as few
        ``log_batch`` calls as MLflow's limits allow."""
        now = int(time.time() * 1000)
        entries = [metric for round_idx, metrics in sorted(rounds.items())
                   for metric in _metric_entries(metrics, round_idx, now)]
        items = [RunTag(k, _tag(v)) for k, v in (tags or {}).items()]
        while entries or items:
            self.client.log_batch(run_id, metrics=entries[:METRIC_BATCH], tags=items[:BATCH])
            entries, items = entries[METRIC_BATCH:], items[BATCH:]

    def set_tags(self, run_id: str, tags: Mapping[str, Any]) -> None:
        items = [RunTag(k, _tag(v)) for k, v in tags.items()]
        for start in range(0, len(items), BATCH):
            self.client.log_batch(run_id, tags=items[start : start + BATCH])

    def finish(self, run_id: str, status: str, files: Iterable[Path] = (), tags: Mapping[str, Any] | None = None,
               rounds: Mapping[int, Mapping[str, float]] | None = None):
        """Close a run: its artifacts, the metrics of rounds not logged yet and its last tags, then the status."""
        for path in files:
            self._artifacts(run_id).log_artifact(str(path))
        if tags or rounds:
            self.log_rounds(run_id, rounds or {}, tags)
        self.client.set_terminated(run_id, status)
        self.artifact_uris.pop(run_id, None)

    # The reads (``tracking.reading``, the one reader of runs) of this suite's experiment:
    def runs(self) -> list[RunSummary]:
        """Every run of the experiment with its identity, newest first."""
        return run_summaries(self.client, self.experiment_id)

    def finished_elsewhere(self) -> dict[str, RunSummary]:
        """The newest FINISHED computing run of each identity in the other suites' experiments."""
        return finished_elsewhere(self.client, self.experiment_id)

    def finished_with(self, config_hash: str) -> RunSummary | None:
        """The newest FINISHED computing run of an identity in any experiment (None: none yet)."""
        return finished_with(self.client, config_hash)

    def link(self, source: RunSummary, name: str, params: Mapping[str, str], tags: Mapping[str, str]) -> str:
        """Copy a run another suite computed into this suite's experiment (its metrics at every step and its
        artifacts) under this suite's ``tags``, FINISHED; the source's ``used_by`` gains this suite."""
        run, metrics = copy_material(self.client, source.run_id)
        carried = {k: v for k, v in run.data.tags.items() if k in ("dataset_fingerprint", BACKEND_USED, "diverged",
                                                                   FAILURES, RESUMED_FROM)}
        tags = {**carried, **tags, REUSED_FROM: source.run_id, REUSED_FROM_SUITE: run.data.tags.get("suite", "")}
        created = self.client.create_run(self.experiment_id, run_name=name,
                                         tags={k: _tag(v) for k, v in tags.items()})
        run_id = created.info.run_id
        items = [Param(k, v) for k, v in params.items()]
        for start in range(0, len(items), BATCH):
            self.client.log_batch(run_id, params=items[start : start + BATCH])
        for start in range(0, len(metrics), METRIC_BATCH):
            self.client.log_batch(run_id, metrics=metrics[start : start + METRIC_BATCH])
        with tempfile.TemporaryDirectory() as tmp:
            folder = download_artifacts(self.client, source.run_id, tmp)
            get_artifact_repository(created.info.artifact_uri, tracking_uri=self.client.tracking_uri
                                    ).log_artifacts(folder)
        self.client.set_terminated(run_id, FINISHED)
        suite = tags.get("suite", "")
        users = sorted({*run.data.tags.get(USED_BY, run.data.tags.get("suite", "")).split(","), suite} - {""})
        self.client.set_tag(source.run_id, USED_BY, ",".join(users))
        return run_id

    def runs_by_hash(self) -> dict[str, list[RunSummary]]:
        """Every run of the experiment grouped by its identity (``config_hash``), newest first."""
        grouped: dict[str, list[RunSummary]] = {}
        for run in self.runs():
            if run.config_hash:
                grouped.setdefault(run.config_hash, []).append(run)
        return grouped


def _metric_entries(metrics: Mapping[str, float], round_idx: int, now: int) -> list[Metric]:
    """The schema's metrics of one round with a finite value (others, e.g. ``round``, are not metrics), and
    what the run cost (``cost_*``, at its last round)."""
    properties = run_property_directions()
    keys = [*metric_directions(), *properties, *sorted(k for k in metrics if k.startswith(COST_PREFIX))]
    return [Metric(key, float(metrics[key]), now, round_idx) for key in keys
            if key in metrics and metrics[key] is not None and _kept(key, float(metrics[key]), properties)]


def _kept(key: str, value: float, properties: Mapping[str, bool | None]) -> bool:
    """Finite values, and a run property's infinity (a value: no privacy guarantee), never NaN."""
    return math.isfinite(value) or (key in properties and math.isinf(value))


def _tag(value: Any) -> str:
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return text if len(text) <= TAG_MAX else text[: TAG_MAX - 3] + "..."


def version_tags(versions: Mapping[str, str]) -> dict[str, str]:
    """Provenance tags from ``simulation.runner.code_version()``: git_sha and the package versions."""
    tags = {"git_sha": versions.get("git_sha", "unknown")}
    tags.update({f"{name}_version": value for name, value in versions.items() if name != "git_sha"})
    return tags
