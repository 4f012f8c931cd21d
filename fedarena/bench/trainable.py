"""The Ray Tune trainable: one federated run per trial, checkpointed every N rounds.

``run_trial`` receives ``{"trial": config_hash}`` (the trial's Tune config, kept small: Tune copies and saves it
often) and the payloads of every trial by config hash, each pickled on its own (``packed_payloads``; passed
with ``tune.with_parameters``, stored once in Ray's object store: a worker unpickles its trial's alone). It
builds the trial, restores the latest state if there is one, runs the remaining rounds and reports to Ray Tune:

- at every evaluation round: the engine's metrics (``evaluated: True``) with ``round``, unless
  ``checkpoint_every`` is 0: trials too short to be worth resuming report only at their end (each report
  waits for the driver; their evaluation rounds reach MLflow from the final ``result.json``);
- every ``checkpoint_every`` rounds (if > 0): a checkpoint directory holding ``state.pt`` (``SimState.state_dict()``:
  round, global model, per-client state such as personal models, divergence, history). Every random draw
  of the engine is keyed by (seed, stream, round, client), so a restored run continues exactly as an
  uninterrupted one would;
- at the end: ``done: True`` with a checkpoint directory holding ``result.json`` (the record of
  ``fedarena run``) and ``clients.csv`` (the per-client table of the last evaluation).

Restore order: Ray's checkpoint of this trial (a retry after a failure, ``FailureConfig``), else the
payload's ``resume_from`` (the last checkpoint of an interrupted earlier benchmark, found by the driver in
the tracking store).

Failures: an error no retry can fix (``PERMANENT``: a config, data or shape error) is reported once as a
final result with ``permanent_error`` (its one-line message) and the trial ends without raising, so Ray does
not retry it; any other error (a lost worker, a full disk, CUDA) raises and Ray retries from the last
checkpoint. A trial whose driver process is gone (same host, e.g. SIGKILL) exits within seconds.
A ``round_hook`` (``BenchOptions.round_hook``) runs in the trial's process after every round as
``hook(trial_name, resumed_from_round, round)``; what it raises is handled as above (the tests inject their
transient and permanent faults with it).
"""

from __future__ import annotations

import csv
import json
import os
import pickle
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ray import cloudpickle, tune

from fedarena.bench.budget import CheckpointBudget
from fedarena.config import ExperimentConfig
from fedarena.errors import ConfigError
from fedarena.isolation import IsolatedRuleError, Plugin, ensure_isolated
from fedarena.plugins import PluginSource, ensure_loaded
from fedarena.registry import UnknownNameError
from fedarena.simulation.checkpoint import load_state, save_state
from fedarena.simulation.costs import CostMeter
from fedarena.simulation.engine import SimState
from fedarena.simulation.experiment import run_experiment, write_result
from fedarena.simulation.setup import Trial
from fedarena.simulation.threads import limit_threads

RESULT_FILE, CLIENTS_FILE = "result.json", "clients.csv"


DRIVER_POLL_S = 2.0
_WATCHED: set[int] = set()  # driver pids this worker process watches


# Errors that the same config fails with again on any retry: bad settings, data or shapes, and bugs.
PERMANENT = (ConfigError, UnknownNameError, ValueError, TypeError, IndexError, KeyError, ZeroDivisionError,
             NotImplementedError, IsolatedRuleError)  # an isolated rule that broke or passed a limit breaks again


def trial_payload(config: ExperimentConfig, config_hash: str, name: str, *, checkpoint_every: int,
                  resume_from: str | None = None, scratch: str | None = None, driver: dict | None = None,
                  round_hook: Callable[[str, int, int], None] | None = None, cpus: float | None = None,
                  checkpoint_budget: float | None = None, legacy_hash: str = "") -> dict:
    """What the trainable receives for one trial: the driver's resolved config itself (the worker neither parses,
    validates nor resolves it again), its identity and name, and how to checkpoint and report.
    ``scratch``: the folder for temporary checkpoint directories (under the suite's storage, so a killed
    benchmark's leftovers are found and removed by the next run); ``driver``: host and pid of the driver;
    ``round_hook``: called after every round (module docstring); ``cpus``: the trial's
    CPU share (its torch threads); ``checkpoint_budget``: the most time fraction checkpoints may take
    (``bench.budget``; None: every ``checkpoint_every`` rounds exactly); ``legacy_hash``: the trial's config hash
    as a previous release computed it (a checkpoint that release wrote carries it)."""
    return {"config": config, "config_hash": config_hash, "name": name,
            "checkpoint_every": checkpoint_every, "resume_from": resume_from, "scratch": scratch,
            "driver": driver, "cpus": cpus, "checkpoint_budget": checkpoint_budget, "round_hook": round_hook,
            "legacy_hash": legacy_hash}


def auto_checkpoint_every(rounds: int, eval_every: int) -> int:
    """About ten checkpoints per trial, on evaluation rounds."""
    target = max(1, rounds // 10)
    return max(eval_every, (target // eval_every) * eval_every)


def write_final(directory: Path, result: dict) -> None:
    write_result(result, directory / RESULT_FILE)
    rows = result["clients"]
    with open(directory / CLIENTS_FILE, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["client"])
        writer.writeheader()
        writer.writerows(rows)


def _restore_checkpoint(payload: dict) -> tune.Checkpoint | None:
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        return checkpoint
    source = payload.get("resume_from")
    if not source or ("://" not in source and not Path(source).is_dir()):
        return None
    return tune.Checkpoint(source)


class Reporter:
    """The ``on_round`` hook of ``simulate``: reports metrics and checkpoints to Ray Tune (evaluations only
    when the trial checkpoints at all, ``checkpoint_every > 0``)."""

    def __init__(self, trial: Trial | None, payload: dict, start_round: int, meter: CostMeter | None = None):
        self.trial, self.payload, self.start = trial, payload, start_round
        self.every = payload["checkpoint_every"]
        self.meter = meter or CostMeter()
        fraction = payload.get("checkpoint_budget")
        self.budget = CheckpointBudget(fraction) if fraction else None

    def start_trial(self, trial: Trial) -> SimState | None:
        """``run_experiment``'s start hook: restore the trial's latest state (a checkpoint of its identity)."""
        self.trial = trial
        checkpoint = _restore_checkpoint(self.payload)
        if checkpoint is None:
            return None
        with checkpoint.as_directory() as directory:
            legacy = self.payload.get("legacy_hash")
            state = load_state(Path(directory), trial, self.payload["config_hash"], (legacy,) if legacy else ())
        self.start = state.round
        return state

    def base(self, round_idx: int) -> dict:
        return {"round": round_idx, "rounds": self.trial.cfg.rounds, "resumed_from_round": self.start,
                "dataset_fingerprint": self.trial.dataset.fingerprint, "backend_used": self.trial.backend.name}

    def on_round(self, state: SimState, metrics: dict | None) -> None:
        hook = self.payload.get("round_hook")
        if hook is not None:
            hook(self.payload["name"], self.start, state.round)
        checkpoint = (self.every > 0 and state.round % self.every == 0 and state.round < self.trial.cfg.rounds
                      and (self.budget is None or self.budget.allows(_state_bytes(state))))
        if (metrics is None or self.every == 0) and not checkpoint:
            return
        result = {**self.base(state.round), "evaluated": metrics is not None, "done": False, **(metrics or {})}
        if not checkpoint:
            tune.report(result)
            return
        before = self.meter.seconds["checkpoint"]
        with self.meter.phase("checkpoint"), tempfile.TemporaryDirectory(
                prefix="fedarena-ckpt-", dir=_scratch(self.payload)) as tmp:  # saved and persisted by Tune
            save_state(Path(tmp), state, self.payload["config_hash"])
            tune.report(result, checkpoint=tune.Checkpoint.from_directory(tmp))
        if self.budget is not None:  # this checkpoint's time, as the meter took it
            self.budget.record(self.meter.seconds["checkpoint"] - before)

    def finish(self, record: dict, directory: Path) -> None:
        """The final report: the run's record (its whole history, final metrics and cost: what the driver logs)
        with the directory of its ``result.json`` and ``clients.csv`` as the final checkpoint."""
        result = {"round": record["final"]["round"], "rounds": record["config"]["rounds"],
                  "resumed_from_round": self.start, "dataset_fingerprint": record["dataset_fingerprint"],
                  "backend_used": record["backend"], "evaluated": False, "done": True,
                  "history": record["history"], "final": record["final"], "cost": record.get("cost", {})}
        tune.report(result, checkpoint=tune.Checkpoint.from_directory(str(directory)))


def packed_payloads(payloads: dict[str, dict]) -> dict[str, bytes]:
    """Each trial's payload pickled on its own. Ray unpickles what ``tune.with_parameters`` holds for every trial
    it starts: a dict of bytes costs 0.3 ms there, a dict of 1,506 configs 17 ms (the quick robustness suite)."""
    return {config_hash: cloudpickle.dumps(payload) for config_hash, payload in payloads.items()}


def run_trial(tune_config: dict, payloads: dict[str, bytes], plugins: tuple[PluginSource, ...] = (),
              isolated: tuple[Plugin, ...] = ()) -> None:
    """Ray Tune function trainable for one benchmark trial (see the module docstring): ``run_experiment``,
    as ``fedarena run``, with the Reporter restoring and reporting, after importing the driver's plugins."""
    ensure_loaded(plugins)
    ensure_isolated(isolated)  # submitted rules: stand-ins here, their code in a sandbox (``fedarena.isolation``)
    payload = pickle.loads(payloads[tune_config["trial"]])
    _watch_driver(payload.get("driver"))
    if _finished_checkpoint(payload):
        return
    limit_threads(payload.get("cpus"))
    reporter = Reporter(None, payload, 0)
    try:
        result = run_experiment(payload["config"], reporter.on_round, reporter.start_trial, reporter.meter)
    except PERMANENT as err:  # reported as the trial's end: Ray would retry a raised error in vain
        round_idx = reporter.trial.cfg.rounds if reporter.trial is not None else 0
        tune.report({"round": 0, "done": True, "evaluated": False, "permanent_error": _one_line(err),
                     "rounds": round_idx})
        return
    with tempfile.TemporaryDirectory(prefix="fedarena-final-", dir=_scratch(payload)) as tmp:
        write_final(Path(tmp), result)
        reporter.finish(result, Path(tmp))


def _state_bytes(state: SimState) -> int:
    tensors = [state.w, *state.clients.values()]
    return sum(t.numel() * t.element_size() for t in tensors)


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}" if not isinstance(err, ConfigError) else text


def _scratch(payload: dict) -> str | None:
    folder = payload.get("scratch")
    if folder is None:
        return None
    os.makedirs(folder, exist_ok=True)
    return folder


def _watch_driver(driver: dict | None) -> None:
    """End this worker process soon after the driver process is gone (only when both share a host: on a
    cluster, Ray itself ends the trials of a driver that disconnects)."""
    if not driver or driver.get("host") != socket.gethostname() or driver["pid"] in _WATCHED:
        return
    _WATCHED.add(driver["pid"])  # one watcher per worker process (Ray reuses a worker for many trials)

    def watch(pid: int) -> None:
        while True:
            time.sleep(DRIVER_POLL_S)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                os._exit(1)  # nothing to save: the next benchmark resumes from the last checkpoint
            except PermissionError:
                continue  # the pid is alive (owned by another user after reuse; keep watching)

    threading.Thread(target=watch, args=(driver["pid"],), daemon=True, name="fedarena-driver-watch").start()


def _finished_checkpoint(payload: dict) -> bool:
    """A finished trial whose logging alone was lost: report its final checkpoint again, without training."""
    checkpoint = _restore_checkpoint(payload)
    if checkpoint is None:
        return False
    with checkpoint.as_directory() as directory:
        path = Path(directory, RESULT_FILE)
        if not path.exists():
            return False
        record = json.loads(path.read_text())
        Reporter(None, payload, record["final"]["round"]).finish(record, Path(directory))
    return True
