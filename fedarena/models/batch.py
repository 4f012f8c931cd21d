"""A minibatch of many clients at once, the unit every backend and method step works on."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Batch:
    x: torch.Tensor  # [n, B, ...]
    y: torch.Tensor  # [n, B]
    mask: torch.Tensor  # [n, B] 1 for real samples
    active: torch.Tensor  # [n] 1 if this step trains the client (epoch mode pads short clients)
    index: torch.Tensor  # [n, B] pooled sample ids (for per-round data attacks)

    def step(self, s: int) -> Batch:
        """Step ``s`` of a round's minibatches gathered at once (each field with a leading step axis)."""
        return Batch(self.x[s], self.y[s], self.mask[s], self.active[s], self.index[s])
