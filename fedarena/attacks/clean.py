"""Clean training: the attack ``none`` (no malicious device; its level must be 0)."""

from __future__ import annotations

import numpy as np

from fedarena.attacks.base import Effect, attack
from fedarena.datasets.base import FederatedDataset


@attack("none", device_reads=())
def no_attack(dataset: FederatedDataset, malicious: np.ndarray, rng: np.random.Generator) -> Effect:
    """Clean training (level must be 0)."""
    return Effect(dataset)
