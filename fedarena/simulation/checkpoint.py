"""A run's state on disk: ``SimState`` with its format and config hash, so a resumed run continues exactly
(every random draw is keyed by (seed, stream, round, client), not by a generator's position)."""

from __future__ import annotations

from pathlib import Path

import torch

from fedarena.simulation.engine import SimState
from fedarena.simulation.setup import Trial

STATE_FILE = "state.pt"
STATE_FORMAT = 1


def save_state(directory: Path, state: SimState, config_hash: str) -> None:
    torch.save({"format": STATE_FORMAT, "config_hash": config_hash, "sim": state.state_dict()},
               Path(directory) / STATE_FILE)


def load_state(directory: Path, trial: Trial, config_hash: str) -> SimState:
    data = torch.load(Path(directory) / STATE_FILE, map_location="cpu", weights_only=True)
    if data.get("format") != STATE_FORMAT or data.get("config_hash") != config_hash:
        raise RuntimeError(f"checkpoint {directory} belongs to config {data.get('config_hash')!r}, not "
                           f"{config_hash!r} (or has an unknown format)")
    return SimState.from_state_dict(data["sim"], trial.device)
