"""The Ray Tune trainable: one federated run per trial, checkpointed every N rounds.

``run_trial`` receives ``{"trial": {"index", "config_hash", "name"}}`` (the trial's Tune config, kept small:
Tune copies and saves it often) and the payloads of every trial by config hash (see ``trial_payload``;
passed with ``tune.with_parameters``, stored once in Ray's object store). It builds the trial, restores the
latest state if there is one, runs the remaining rounds and reports to Ray Tune:

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
the tracking store). Test hook: ``fail_once_at_round = R`` makes a trial that was *not* restored raise
``InjectedFailure`` when it reaches round R, so tests can watch a retry resume from the checkpoint.
"""

from __future__ import annotations

import csv
import os
import tempfile
from pathlib import Path

from ray import tune

from fedarena.config import ExperimentConfig
from fedarena.simulation.checkpoint import load_state, save_state
from fedarena.simulation.engine import SimState
from fedarena.simulation.runner import run_experiment, write_result
from fedarena.simulation.setup import Trial, build_trial

RESULT_FILE, CLIENTS_FILE = "result.json", "clients.csv"


class InjectedFailure(RuntimeError):
    """Raised by the ``fail_once_at_round`` test hook."""


def trial_payload(config: ExperimentConfig, config_hash: str, name: str, *, checkpoint_every: int,
                  resume_from: str | None = None, fail_once_at_round: int | None = None) -> dict:
    """What the trainable receives for one trial (plain data: Ray stores it with the experiment)."""
    return {"config": config.to_dict(), "config_hash": config_hash, "name": name,
            "checkpoint_every": checkpoint_every, "resume_from": resume_from,
            "fail_once_at_round": fail_once_at_round}


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

    def __init__(self, trial: Trial | None, payload: dict, start_round: int):
        self.trial, self.payload, self.start = trial, payload, start_round
        self.every = payload["checkpoint_every"]

    def start_trial(self, trial: Trial) -> SimState | None:
        """``run_experiment``'s start hook: check the trial is the driver's, and restore its latest state."""
        if trial.cfg.hash() != self.payload["config_hash"]:
            raise RuntimeError(f"trial {self.payload['name']!r}: the resolved config hashes to {trial.cfg.hash()}, "
                               f"the driver expected {self.payload['config_hash']}")
        self.trial = trial
        checkpoint = _restore_checkpoint(self.payload)
        if checkpoint is None:
            return None
        with checkpoint.as_directory() as directory:
            state = load_state(Path(directory), trial, self.payload["config_hash"])
        self.start = state.round
        return state

    def base(self, round_idx: int) -> dict:
        return {"round": round_idx, "rounds": self.trial.cfg.rounds, "resumed_from_round": self.start,
                "dataset_fingerprint": self.trial.dataset.fingerprint}

    def on_round(self, state: SimState, metrics: dict | None) -> None:
        fail_at = self.payload.get("fail_once_at_round")
        if fail_at is not None and self.start == 0 and state.round == fail_at:
            raise InjectedFailure(f"injected failure at round {fail_at} (test hook fail_once_at_round)")
        checkpoint = self.every > 0 and state.round % self.every == 0 and state.round < self.trial.cfg.rounds
        if (metrics is None or self.every == 0) and not checkpoint:
            return
        result = {**self.base(state.round), "evaluated": metrics is not None, "done": False, **(metrics or {})}
        if not checkpoint:
            tune.report(result)
            return
        with tempfile.TemporaryDirectory(prefix="fedarena-ckpt-") as tmp:
            save_state(Path(tmp), state, self.payload["config_hash"])
            tune.report(result, checkpoint=tune.Checkpoint.from_directory(tmp))

    def finish(self, state_round: int, directory: Path) -> None:
        result = {**self.base(state_round), "evaluated": False, "done": True}
        tune.report(result, checkpoint=tune.Checkpoint.from_directory(str(directory)))


def run_trial(tune_config: dict, payloads: dict[str, dict]) -> None:
    """Ray Tune function trainable for one benchmark trial (see the module docstring): ``run_experiment``,
    as ``fedarena run``, with the Reporter restoring and reporting."""
    payload = payloads[tune_config["trial"]["config_hash"]]
    if _finished_checkpoint(payload):
        return
    reporter = Reporter(None, payload, 0)
    result = run_experiment(ExperimentConfig.from_dict(payload["config"]), reporter.on_round, reporter.start_trial)
    with tempfile.TemporaryDirectory(prefix="fedarena-final-") as tmp:
        write_final(Path(tmp), result)
        reporter.finish(result["final"]["round"], Path(tmp))


def _finished_checkpoint(payload: dict) -> bool:
    """A finished trial whose logging alone was lost: report its final checkpoint again, without training."""
    checkpoint = _restore_checkpoint(payload)
    if checkpoint is None:
        return False
    with checkpoint.as_directory() as directory:
        if not os.path.exists(os.path.join(directory, RESULT_FILE)):
            return False
        trial = build_trial(ExperimentConfig.from_dict(payload["config"]))
        Reporter(trial, payload, trial.cfg.rounds).finish(trial.cfg.rounds, Path(directory))
    return True
