"""Seeded dropout whose masks do not depend on how clients are grouped.

torch's ``nn.Dropout`` draws from the global generator, and under ``vmap`` one draw serves a whole group
of clients, so the sequential and batched backends (and any regrouping) would see different masks. Here
a mask is a pure function of (key, layer, sample, feature): the simulation draws one 32-bit key per
training step from the trial's seed stream (``streams.DROPOUT``, keyed by round and step), and
each sample is named by its pooled index, unique across clients. Client k's masks therefore depend only
on the seed, the round, the step and its own samples, whichever backend or group computes them, and the
same sample gets a fresh mask at every step. The bits come from a counter-based hash (Wellons'
``lowbias32``), exact in int64 arithmetic on every device.
"""

from __future__ import annotations

import torch
from torch import nn

MASK32 = 0xFFFFFFFF
GOLDEN = 0x9E3779B9  # spreads the layer index over 32 bits before hashing


def mul32(x, c: int):
    """(x * c) mod 2^32 for x in [0, 2^32) without int64 overflow (16-bit halves); ints or int64 tensors."""
    lo, hi = x & 0xFFFF, x >> 16
    return (lo * c + (((hi * c) & 0xFFFF) << 16)) & MASK32


def hash32(x):
    """Wellons' lowbias32: a bijective 32-bit mixer (python ints or int64 tensors in [0, 2^32))."""
    x = x ^ (x >> 16)
    x = mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def keep_mask(key: int, layer: int, ids: torch.Tensor, features: int, rate: float) -> torch.Tensor:
    """[B, features] boolean mask (True with probability 1 - rate) for samples ``ids`` [B] under ``key``."""
    salt = hash32((key ^ hash32((layer * GOLDEN) & MASK32)) & MASK32)
    rows = hash32((ids.long() & MASK32) ^ salt)
    cols = hash32(torch.arange(features, device=ids.device, dtype=torch.long))
    bits = hash32(rows[:, None] ^ cols[None, :])
    return bits >= int(round(rate * 2**32))


class KeyedDropout(nn.Module):
    """Inverted dropout with rate ``rate`` whose mask is ``keep_mask(key, layer, ids, ...)``.

    ``FlatModel.forward`` sets ``key`` (an int, or None for no dropout) and ``ids`` (the samples' pooled
    indices) around each call; outside such a call the layer is the identity."""

    def __init__(self, rate: float, layer: int):
        super().__init__()
        self.rate, self.layer = float(rate), int(layer)
        self.key: int | None = None
        self.ids: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.key is None or self.rate == 0.0:
            return x
        if self.ids is None:
            raise ValueError("KeyedDropout needs the samples' ids with a key")
        features = x[0].numel()
        mask = keep_mask(self.key, self.layer, self.ids, features, self.rate).to(x.dtype)
        return x * mask.view(x.shape) / (1.0 - self.rate)
