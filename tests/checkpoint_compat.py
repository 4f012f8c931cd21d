"""Checkpoints written by an earlier release, kept so that a later one proves it resumes them (issue 54: the round
became a pipeline of stages and the run's state a set of parts; a checkpoint from before must resume to the numbers
an uninterrupted run gives).

``tests/golden/checkpoints/<name>/state.pt`` holds, for each config below, the state after ``STOP`` of its rounds,
saved by ``simulation.checkpoint.save_state`` of the release named in ``WRITTEN_BY``. To write them again (only with
a deliberate change of the checkpoint format, under a new folder):

    PYTHONPATH=<a checkout of that release> .venv/bin/python tests/checkpoint_compat.py --write
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fedarena.config import ExperimentConfig

FOLDER = Path(__file__).parent / "golden" / "checkpoints"
WRITTEN_BY = "62ace6f"  # the last commit before the round's pipeline and state parts
STOP = 3
BASE = {"dataset": {"name": "digits", "num_clients": 10}, "model": {"name": "mlp", "hidden": [16]}, "rounds": 6,
        "eval_every": 3, "clients_per_round": 5, "local_steps": 2, "batch_size": 16, "lr": 0.2, "seed": 1}
DP = {"sampling": "uniform"}
# one config per kind of state a component keeps across rounds
CONFIGS = {
    "foolsgold": {"aggregator": {"name": "foolsgold"}, "attack": {"name": "a1", "level": 0.2}},  # its history
    "fldetector": {"aggregator": {"name": "fldetector", "window": 1}, "attack": {"name": "a3", "level": 0.2}},
    "crfl": {"aggregator": {"name": "crfl", "samples": 20}, "attack": {"name": "badnets", "level": 0.2}},
    "fltrust": {"aggregator": {"name": "fltrust", "root_size": 30}, "attack": {"name": "a2", "level": 0.2}},
    "a3fl": {"attack": {"name": "a3fl", "level": 0.2, "steps": 5}},  # its trigger
    "iba": {"attack": {"name": "iba", "level": 0.2, "epochs": 1, "hidden": 16}},  # its generator's trigger
    "adaptive_clipping": {**DP, "privacy": {"name": "central", "noise_multiplier": 1.0, "clip": 0.5,
                                            "adaptive": True, "count_noise": 1.0}},  # its bound
    "audit": {**DP, "clients_per_round": 10, "privacy": {"name": "central", "noise_multiplier": 1.0, "clip": 0.5,
                                                         "audit": {"canaries": 4, "unseen": 40, "resamples": 5}}},
}


def config(name: str) -> ExperimentConfig:
    return ExperimentConfig.from_dict({**BASE, **CONFIGS[name]})


def write() -> None:
    from fedarena.simulation.checkpoint import save_state
    from fedarena.simulation.engine import simulate
    from fedarena.simulation.identity import trial_identity
    from fedarena.simulation.setup import build_trial

    for name in CONFIGS:
        cfg = config(name)
        folder, digest = FOLDER / name, trial_identity(cfg).config_hash
        folder.mkdir(parents=True, exist_ok=True)

        def stop(state, metrics, folder=folder, digest=digest):
            if state.round == STOP:
                save_state(folder, state, digest)
                raise KeyboardInterrupt

        try:
            simulate(build_trial(cfg), on_round=stop)
        except KeyboardInterrupt:
            print(f"{name}: saved after round {STOP}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", action="store_true")
    if parser.parse_args().write:
        write()
