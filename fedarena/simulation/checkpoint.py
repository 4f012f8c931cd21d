"""A run's state on disk: ``SimState`` with its format and the trial's identity (``config_hash``), so a resumed run
continues exactly (every random draw is keyed by (seed, stream, round, client), not by a generator's position).
A checkpoint a previous release wrote carries that release's config hash (``ExperimentConfig.legacy_hash``)."""

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


def load_state(directory: Path, trial: Trial, config_hash: str, also: tuple[str, ...] = ()) -> SimState:
    """The state saved for ``config_hash`` (or one of ``also``: the trial's previous-release hash)."""
    data = torch.load(Path(directory) / STATE_FILE, map_location="cpu", weights_only=True)
    if data.get("format") != STATE_FORMAT or data.get("config_hash") not in (config_hash, *also):
        raise RuntimeError(f"checkpoint {directory} belongs to config {data.get('config_hash')!r}, not "
                           f"{config_hash!r} (or has an unknown format)")
    return SimState.from_state_dict(data["sim"], trial.device)
