"""A run interrupted and resumed from its saved state, as ``fedarena bench run`` resumes one (the tests of
attacks and rules that keep state across rounds)."""

from __future__ import annotations

import pytest

from fedarena.config import ExperimentConfig
from fedarena.simulation.checkpoint import load_state, save_state
from fedarena.simulation.engine import simulate
from fedarena.simulation.setup import build_trial


def run_interrupted(config, stop_at: int, folder):
    """``config`` run until round ``stop_at``, its state saved to ``folder``, then loaded in a new trial and run
    to the end: (the new trial, the loaded state, the final state)."""

    def stop(state, metrics):
        if state.round == stop_at:
            save_state(folder, state, "h")
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        simulate(build_trial(config), on_round=stop)
    trial = build_trial(config)
    loaded = load_state(folder, trial, "h")
    return trial, loaded, simulate(trial, loaded)[0]


def attacked_digits_config(attack: dict, rounds: int) -> ExperimentConfig:
    """A small digits run (10 devices, 5 a round, a 16-unit MLP) under ``attack``: the resume tests' run."""
    return ExperimentConfig.from_dict({
        "dataset": {"name": "digits", "num_clients": 10}, "model": {"name": "mlp", "hidden": [16]},
        "rounds": rounds, "eval_every": 3, "clients_per_round": 5, "local_steps": 2, "batch_size": 16, "lr": 0.2,
        "attack": attack, "seed": 1})
