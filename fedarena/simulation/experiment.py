"""Run one experiment end to end and package its result (what ``fedarena run`` writes as JSON)."""

from __future__ import annotations

import functools
import json
import math
import platform
import subprocess
from collections.abc import Callable
from pathlib import Path

import torch

import fedarena
import fedarena.simulation.buffered  # noqa: F401  (registers asynchronous aggregation's server step)
from fedarena.config import ExperimentConfig
from fedarena.simulation.costs import CostMeter
from fedarena.simulation.engine import SimState, evaluate_state, simulate
from fedarena.simulation.identity import trial_identity
from fedarena.simulation.metrics import client_table
from fedarena.simulation.properties import run_properties
from fedarena.simulation.setup import Trial, build_trial
from fedarena.simulation.work import bytes_per_round


def code_version() -> dict[str, str]:
    """Package versions and the git commit of the source tree (``unknown`` outside a checkout), read once a
    process (a benchmark's worker runs many trials of one source tree; a git call costs it milliseconds)."""
    return dict(_code_version())


@functools.cache
def _code_version() -> tuple[tuple[str, str], ...]:
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
                             text=True, timeout=5, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        sha = "unknown"
    import numpy

    return (("git_sha", sha), ("fedarena", fedarena.__version__), ("torch", torch.__version__),
            ("numpy", numpy.__version__), ("python", platform.python_version()))


def result_record(trial: Trial, state: SimState, counts) -> dict:
    final = dict(state.history[-1]) if state.history and state.history[-1]["round"] == state.round else None
    if final is None:  # resumed after the last evaluation: score the final state now
        final = {"round": state.round, **evaluate_state(trial, state)[1], **run_properties(trial, state.round)}
    final["diverged"] = bool(state.diverged)
    identity = trial_identity(trial.cfg)
    return {
        "config": trial.cfg.to_dict(),
        "config_hash": identity.config_hash,  # the trial's identity: the values it uses and its components' versions
        "config_key": identity.config_key,
        "component_versions": identity.versions,
        "backend": trial.backend.name,  # what backend: auto chose
        "dataset_fingerprint": trial.dataset.fingerprint,
        "malicious_clients": [int(k) for k in trial.threat.malicious.nonzero()[0]],
        "diverged_round": state.diverged_at,
        "final": final,
        "history": state.history,
        "clients": client_table(counts, trial.threat.malicious),
        "versions": code_version(),
    }


def run_experiment(cfg: ExperimentConfig, on_round: Callable | None = None,
                   start: Callable[[Trial], SimState | None] | None = None, meter: CostMeter | None = None) -> dict:
    """One experiment, as ``fedarena run`` and every benchmark trial run it: build the trial (every check
    before training), ``start(trial)`` (returns a state to resume from, or None for a fresh start; a
    caller's set-up, e.g. a progress bar), run the remaining rounds (``on_round`` after each) and package
    the result record, with what it cost (``cost``: seconds per phase, peak memory; ``meter`` may be the
    caller's, to time its own phases such as checkpoints)."""
    meter = meter or CostMeter()
    with meter.phase("setup"):
        trial = build_trial(cfg)
    meter.device = trial.device
    state = start(trial) if start is not None else None
    first = 0 if state is None else state.round
    state, counts = simulate(trial, state, on_round=on_round, meter=meter)
    cost = {**meter.summary(), **sides_cost(trial, state.round - first)}
    return {**result_record(trial, state, counts), "cost": cost}


def sides_cost(trial: Trial, rounds_run: int) -> dict[str, float]:
    """What the server's rule and the attacker paid in the ``rounds_run`` rounds this process ran (a resumed run: since
    it resumed; ``simulation.work``) and a device's bytes per round."""
    sends = trial.method.uses_aggregator if trial.method.sends_updates is None else trial.method.sends_updates
    sizes = bytes_per_round(trial.w0.numel(), trial.w0.element_size(), trial.needs_losses, sends)
    return {**trial.work.summary(rounds_run), **sizes}


def _json_safe(value):
    if isinstance(value, float) and math.isnan(value):
        return None  # a missing metric (e.g. acc_malicious without attackers) is null; an infinity stays Infinity
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def write_result(result: dict, path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_json_safe(result), indent=2))
