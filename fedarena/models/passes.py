"""Counting a model's forward and backward passes inside a block (an attacker's work beyond honest training:
``simulation.work``). Outside a ``counting`` block nothing is counted and a forward pass pays one context lookup."""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass

import torch


@dataclass
class Passes:
    forward: int = 0  # calls of ``FlatModel.forward``
    backward: int = 0  # of those, the outputs a gradient flowed back through


_COUNTING: contextvars.ContextVar[Passes | None] = contextvars.ContextVar("fedarena_counting_passes", default=None)


@contextlib.contextmanager
def counting():
    """Count the model's passes within the block; yields the ``Passes`` it fills."""
    passes = Passes()
    token = _COUNTING.set(passes)
    try:
        yield passes
    finally:
        _COUNTING.reset(token)


def counted(out: torch.Tensor) -> torch.Tensor:
    """A forward pass's output, counted where a block counts (a backward pass when a gradient reaches it)."""
    passes = _COUNTING.get()
    if passes is None:
        return out
    passes.forward += 1
    if out.requires_grad:
        out.register_hook(lambda grad: _backward(passes, grad))
    return out


def _backward(passes: Passes, grad: torch.Tensor) -> torch.Tensor:
    passes.backward += 1
    return grad
