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
