"""A trial's share of the machine's cores, for the trials that share one machine (Ray packs several)."""

from __future__ import annotations

import torch


def limit_threads(cpus: float | None) -> None:
    """As many torch threads as the trial's CPU share (None: torch's default, one per core). Trials that share
    a machine must not each start a thread per core: set-up and rounds slow down many-fold when they do."""
    if cpus:
        torch.set_num_threads(max(1, int(cpus)))
