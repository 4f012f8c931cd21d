"""Seed streams: every random draw of a trial comes from a generator keyed by (seed, stream tag, ...).

Keying draws by (seed, tag, round, client) rather than by a generator's position keeps streams
independent (adding an attack does not change the partition) and lets a resumed run draw the same clients
and minibatches as an uninterrupted one. The tags are part of the numbers: never renumber them.
"""

from __future__ import annotations

import numpy as np
import torch

PARTITION = 1  # the dataset partition (keyed by data_seed)
INIT = 2  # model initialisation
SAMPLING = 3  # clients selected each round
ATTACK = 4  # the malicious set and one-time data poisoning
TAMPER = 5  # model attacks' noise, per round
CORRUPT = 6  # persistent outliers, per round
AGGREGATE = 7  # the server rule's own random draws (DnC's coordinates), per round
TRAIN = 11  # minibatch plans, per (round, client)
DROPOUT = 12  # seeded dropout: one key per (round, step) of training (models.dropout)
DROPOUT_EVAL = 13  # seeded dropout at evaluation (models that drop there too), per evaluated round
PRIVACY = 14  # differential privacy's noise, per (round, one of the three below)
SERVER_NOISE, DEVICE_NOISE, COUNT_NOISE = 0, 1, 2  # central DP's on the output, local DP's, adaptive clipping's count


def stream(seed: int, tag: int, *more: int) -> np.random.Generator:
    return np.random.default_rng([seed, tag, *more])


def torch_stream(seed: int, tag: int, *more: int, device: torch.device | str = "cpu") -> torch.Generator:
    gen = torch.Generator(device=device)
    gen.manual_seed(int(stream(seed, tag, *more).integers(2**62)))
    return gen
