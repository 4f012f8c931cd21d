"""The driver-side Ray Tune callback: every MLflow write of a benchmark happens here, in one process.

Trials only report to Ray Tune, and metrics reach MLflow by that one road: evaluation rounds as they are
reported, and the final report's whole history for the rounds not reported one by one. This callback turns
the reports into the tracking schema of
``fedarena.tracking.runs`` (one run per trial, metrics per evaluation round, artifacts and status at the
end) and prints the progress lines. Writing from the driver alone keeps an SQLite store safe with
many concurrent trials. A trial's evaluation rounds (and its first-report tags) are held until its next
checkpoint, its end or its failure and written then in one batch: few writes per trial, and whenever a
checkpoint is recorded the metrics up to it are in the store.
"""

from __future__ import annotations

import functools
import json
import shutil
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ray import tune

from fedarena.bench.progress import Printer, final_line, round_line, tally
from fedarena.bench.trainable import CLIENTS_FILE, RESULT_FILE
from fedarena.privacy.compatibility import privacy_tags
from fedarena.simulation.costs import cost_metrics
from fedarena.simulation.metrics import plugin_metric_directions
from fedarena.suites.grid import TrialSpec
from fedarena.suites.spec import NO_PRIVACY, SYNCHRONOUS
from fedarena.tracking.notes import NOTE_TAG, run_note
from fedarena.tracking.runs import (
    BACKEND_USED,
    CHECKPOINT,
    CHECKPOINT_ROUND,
    ERROR,
    FAILED,
    FAILURE_KIND,
    FAILURES,
    FINISHED,
    KILLED,
    METRIC_DIRECTIONS_TAG,
    PERMANENT,
    RESUMED_FROM,
    TRANSIENT,
    RunStore,
    run_params,
)
from fedarena.tracking.store import STORE_ERRORS
from fedarena.tracking.versions import CHECKPOINT_HASH_TAG, FOLDED_TAG


@dataclass
class Planned:
    """A trial to run: its spec, and the unfinished run (with its checkpoint) it continues, if any."""

    spec: TrialSpec
    run_id: str | None = None
    resume_from: str | None = None
    resume_round: int | None = None  # the round of ``resume_from``
    resume_legacy: bool = False  # the run a previous release started (its checkpoint carries that release's hash)
    resume_hash: str = ""  # the hash its run recorded before folding (``tracking.versions.refolded``; its checkpoint's)


@dataclass
class Active:
    spec: TrialSpec
    run_id: str
    last_round: int = 0  # last round whose metrics are in the store or pending
    checkpoint_round: int | None = None  # round of the latest checkpoint a retry restores (None: none)
    resumed_from: int | None = None  # start round of the attempt whose reports arrive (None: none yet)
    pending_rounds: dict[int, dict] = field(default_factory=dict)  # round -> metrics, not written yet
    pending_tags: dict[str, object] = field(default_factory=dict)

    def take_pending(self) -> tuple[dict[int, dict], dict[str, object]]:
        rounds, tags = self.pending_rounds, self.pending_tags
        self.pending_rounds, self.pending_tags = {}, {}
        return rounds, tags


def identity_tags(spec: TrialSpec, versions: dict[str, str]) -> dict[str, str]:
    """The schema's identity tags of a trial (``dataset_fingerprint`` follows with the first report)."""
    tags = {"config_hash": spec.config_hash, "config_key": spec.config_key,
            "component_versions": json.dumps(spec.versions, sort_keys=True), "cell_hash": spec.cell_hash,
            "suite": spec.suite, "scale": spec.scale,
            "method_label": spec.method_label, "dataset_label": spec.dataset_label,
            "attack_label": spec.attack_label, "level": str(spec.level), "diverged": "false",
            "dataset_name": spec.config.dataset["name"], FOLDED_TAG: "true", **versions}
    if spec.select_group:
        tags.update(select_group=spec.select_group, select_by=spec.select_by, variant=spec.variant)
    if spec.privacy_label != NO_PRIVACY:  # runs without the tag read as none (the tables' ``privacy_label``)
        tags["privacy_label"] = spec.privacy_label
    if spec.deployment_label != SYNCHRONOUS:  # likewise: runs without it read as synchronous
        tags["deployment_label"] = spec.deployment_label
    tags.update(_privacy_tags(json.dumps({"method": spec.config.method, "aggregator": spec.config.aggregator},
                                         sort_keys=True, default=str)))
    if plugin_metric_directions():
        tags[METRIC_DIRECTIONS_TAG] = json.dumps(plugin_metric_directions(), sort_keys=True)
    tags.update(spec.tags)
    return tags


@functools.lru_cache(maxsize=256)
def _privacy_tags(sections: str) -> dict[str, str]:
    """What a trial's method and rule declare about secure aggregation and central DP (``privacy.compatibility``), once
    per pair of sections: a plugin's row shows it in the tables and on the site without the plugin."""
    return privacy_tags(json.loads(sections))


def checkpoint_uri(checkpoint: tune.Checkpoint) -> str:
    """Where a persisted checkpoint lives, as a path (local storage) or a URI (remote storage)."""
    scheme = getattr(checkpoint.filesystem, "type_name", "local")
    return checkpoint.path if scheme == "local" else f"{scheme}://{checkpoint.path}"



def _guarded(hook):
    """A Tune hook that stops writing at the store's first error and keeps it in ``store_error`` (Tune would
    log and swallow it, and the trial would go on with its metrics lost). The runner's ``StoreStopper`` then
    stops the benchmark; what was not written is recomputed on the next run, from the last recorded
    checkpoint."""

    @functools.wraps(hook)
    def guarded(self, *args, **kwargs):
        if self.store_error is not None:
            return None
        try:
            return hook(self, *args, **kwargs)
        except STORE_ERRORS as err:
            self.store_error = err
            return None

    return guarded


class StoreStopper(tune.Stopper):
    """Stops every trial once the callback's store has failed."""

    def __init__(self, callback: TrackingCallback):
        self.callback = callback

    def __call__(self, trial_id, result) -> bool:
        return False

    def stop_all(self) -> bool:
        return self.callback.store_error is not None


class TrackingCallback(tune.Callback):
    """Opens (or reopens, to resume) the MLflow run of each trial when it starts, logs its evaluation rounds,
    records its checkpoints, and closes it FINISHED (with its artifacts), FAILED (with the error) or, when
    the benchmark is interrupted, KILLED."""

    def __init__(self, store: RunStore, plan: dict[str, Planned], versions: dict[str, str],
                 printer: Printer | None = None):
        self.store, self.plan, self.versions = store, plan, versions
        self.printer = printer or Printer()
        self.active: dict[str, Active] = {}  # Ray trial id -> run
        self.closed: set[str] = set()
        self.outcomes: Counter[str] = Counter()  # FINISHED / FAILED / KILLED runs of this session
        self._closing = threading.Lock()
        self.store_error: BaseException | None = None  # the store's first error: nothing more is written

    def __getstate__(self) -> dict:  # Tune pickles its callbacks with the experiment state; a lock cannot be
        return {k: v for k, v in self.__dict__.items() if k != "_closing"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._closing = threading.Lock()

    def _event(self, trials, text: str) -> None:
        self.printer.event(tally((t.status for t in trials), len(self.plan)), text)

    def _planned(self, trial) -> Planned:
        return self.plan[trial.config["trial"]]

    @_guarded
    def on_trial_start(self, iteration, trials, trial, **info):
        if trial.trial_id in self.active:
            return
        planned = self._planned(trial)
        spec = planned.spec
        tags = {**identity_tags(spec, self.versions), "ray_trial_id": trial.trial_id}
        tags[NOTE_TAG] = run_note(tags, spec.config.flat())  # the run's description in the MLflow UI
        if planned.run_id:
            last = self.store.reopen(planned.run_id)
            if planned.resume_hash:  # its checkpoint carries the hash recorded before folding: kept for a later resume
                tags[CHECKPOINT_HASH_TAG] = planned.resume_hash
            self.store.set_tags(planned.run_id, tags)
            self.active[trial.trial_id] = Active(spec, planned.run_id, last, planned.resume_round)
            self._event(trials, f"{spec.name}: resuming run {planned.run_id[:8]} (metrics up to round {last})")
            return
        run_id = self.store.open(spec.name, run_params(spec.config.flat()), tags, spec.config.to_dict())
        self.active[trial.trial_id] = Active(spec, run_id)
        self._event(trials, f"{spec.name}: started")

    @_guarded
    def on_trial_result(self, iteration, trials, trial, result, **info):
        run = self.active.get(trial.trial_id)
        if run is None or run.run_id in self.closed:
            return
        if result.get("permanent_error"):  # the trial ends without raising: Ray must not retry it
            self._fail(trials, trial, run, result["permanent_error"], permanent=True)
            return
        self.printer.advance(run.spec.name, result)  # rounds run, for the suite's ETA and the end summary
        start = result.get("resumed_from_round", 0)
        if run.resumed_from != start:  # first report of an attempt (the first one, or a retry)
            run.pending_tags.update({"dataset_fingerprint": result.get("dataset_fingerprint", ""),
                                     BACKEND_USED: result.get("backend_used", ""), RESUMED_FROM: start})
            run.resumed_from = start
        if result.get("evaluated") and result["round"] > run.last_round:
            run.pending_rounds[result["round"]] = _numbers(result)
            run.last_round = result["round"]
        if not result.get("done"):
            self._event(trials, round_line(run.spec.name, result))

    @_guarded
    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info):
        run = self.active.get(trial.trial_id)
        if run is not None and not trial.last_result.get("done"):  # the final one goes with the run's end
            rounds, tags = run.take_pending()
            run.checkpoint_round = trial.last_result.get("round", 0)
            tags.update({CHECKPOINT: checkpoint_uri(checkpoint), CHECKPOINT_ROUND: run.checkpoint_round})
            self.store.log_rounds(run.run_id, rounds, tags)

    @_guarded
    def on_trial_recover(self, iteration, trials, trial, **info):
        run = self.active.get(trial.trial_id)
        if run is not None:
            self.store.set_tags(run.run_id, {FAILURES: trial.num_failures})
            start = (f"from its checkpoint at round {run.checkpoint_round}" if run.checkpoint_round is not None
                     else "from its start (no checkpoint yet)")
            self._event(trials, f"{run.spec.name}: failed ({_error_line(trial)}); retrying {start}")

    @_guarded
    def on_trial_complete(self, iteration, trials, trial, **info):
        run = self.active.get(trial.trial_id)
        if run is None or run.run_id in self.closed or not trial.last_result.get("done"):
            return  # stopped before its final report (an interrupted benchmark): closed as KILLED
        result = trial.last_result  # the final report carries the whole history, the final metrics and the cost
        for entry in result["history"]:  # rounds not reported one by one (short trials, a resume after the last)
            if entry["round"] > run.last_round:
                run.pending_rounds[entry["round"]] = _numbers(entry)
                run.last_round = entry["round"]
        rounds, tags = run.take_pending()
        final_round = result["final"]["round"]  # what the trial's last attempt cost, at its last round
        rounds[final_round] = {**rounds.get(final_round, {}), **cost_metrics(result.get("cost", {}))}
        tags.update({"diverged": bool(result["final"]["diverged"]), FAILURES: trial.num_failures})
        with trial.checkpoint.as_directory() as directory:  # the artifacts
            files = [Path(directory, RESULT_FILE), Path(directory, CLIENTS_FILE)]
            self.store.finish(run.run_id, FINISHED, files, tags, rounds)
        self._close(run, FINISHED)
        remove_checkpoints(trial.path, self._planned(trial).resume_from)
        self._event(trials, final_line(run.spec.name, result["final"]))

    @_guarded
    def on_trial_error(self, iteration, trials, trial, **info):
        run = self.active.get(trial.trial_id)
        if run is None or run.run_id in self.closed:
            return
        self._fail(trials, trial, run, _error_line(trial), permanent=False)

    def _fail(self, trials, trial, run: Active, error: str, permanent: bool) -> None:
        rounds, tags = run.take_pending()
        tags.update({ERROR: error, FAILURES: trial.num_failures, FAILURE_KIND: PERMANENT if permanent else TRANSIENT})
        self.store.finish(run.run_id, FAILED, tags=tags, rounds=rounds)
        self._close(run, FAILED)
        why = " (a retry cannot fix it: not retried)" if permanent else ""
        self._event(trials, f"{run.spec.name}: FAILED{why}: {error}")

    def close_open_runs(self) -> int:
        """Mark runs still open (an interrupted benchmark) KILLED; the next run of the command resumes them.
        Safe to call twice, also from the SIGTERM watchdog's thread (``guard.TermAsInterrupt``)."""
        with self._closing:
            still_open = [run for run in self.active.values() if run.run_id not in self.closed]
            for run in still_open if self.store_error is None else ():
                rounds, tags = run.take_pending()
                try:
                    self.store.finish(run.run_id, KILLED, tags=tags, rounds=rounds)
                except STORE_ERRORS as err:  # left open: the next run resumes it all the same
                    self.store_error = err
                    break
                self._close(run, KILLED)
            return self.outcomes[KILLED]

    def _close(self, run: Active, status: str) -> None:
        self.closed.add(run.run_id)
        self.outcomes[status] += 1


def remove_checkpoints(trial_dir: str, resumed_from: str | None) -> None:
    """Once a trial's run is FINISHED (its result and client table are MLflow artifacts), its checkpoints are
    of no use: remove them from local storage (a paper-scale Ditto checkpoint is gigabytes), with those the
    same trial left in earlier benchmarks of the suite (interrupted ones, recorded in the store or not) and
    the one it resumed from. Remote storage (s3://...) is left to its lifecycle rules."""
    if "://" in trial_dir:
        return
    folders = _checkpoint_folders(Path(trial_dir))
    for earlier in _earlier_trial_dirs(Path(trial_dir)):
        folders += _checkpoint_folders(earlier)
    if resumed_from and "://" not in resumed_from and Path(resumed_from).name.startswith("checkpoint_"):
        folders += _checkpoint_folders(Path(resumed_from).parent)
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


def _earlier_trial_dirs(trial_dir: Path) -> list[Path]:
    """The same trial's folders in the suite's earlier Tune experiments under the same storage: experiment
    folders are ``<suite>-<scale>-<date>-<time>`` and trial folders ``<index>_<config hash>``."""
    experiment, (_, config_hash) = trial_dir.parent, trial_dir.name.split("_", 1)
    prefix = experiment.name.rsplit("-", 2)[0] + "-"
    earlier = [d for d in experiment.parent.glob(f"{prefix}*") if d != experiment]  # not this one's 1,506 folders
    return [d for folder in earlier for d in folder.glob(f"*_{config_hash}")]


def _checkpoint_folders(trial_dir: Path) -> list[Path]:
    """The ``checkpoint_*`` folders of one Tune trial folder."""
    return [p for p in trial_dir.glob("checkpoint_*") if p.is_dir()]


def _numbers(entry: dict) -> dict:
    return {k: v for k, v in entry.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _error_line(trial) -> str:
    """The last line of the trial's error trace (the exception and its message)."""
    try:
        text = trial.get_error() or ""
    except (OSError, ValueError):
        text = ""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[-1] if lines else "unknown error (see the Ray trial directory)"
