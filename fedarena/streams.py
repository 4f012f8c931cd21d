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
SAMPLING = 3  # clients selected each round: ``keyed_uniforms`` per client (engine version 2; a numpy generator before)
ATTACK = 4  # the malicious set and one-time data poisoning
TAMPER = 5  # model attacks' noise, per round
CORRUPT = 6  # persistent outliers, per round
AGGREGATE = 7  # the server rule's own random draws (DnC's coordinates), per round: ``keyed_seed`` (engine v2)
TRAIN = 11  # minibatch plans, per (round, client): ``keyed_uniforms`` (engine version 2; a numpy generator before)
DROPOUT = 12  # seeded dropout: one key per (round, step) of training (models.dropout)
DROPOUT_EVAL = 13  # seeded dropout at evaluation (models that drop there too), per evaluated round
PRIVACY = 14  # differential privacy's noise, per (round, one of the three below)
ADAPT = 15  # an adaptive attack's own draws (A3FL's trigger search), per round
AUDIT = 16  # a privacy audit's canary directions (key 0) and its bootstrap's resampling (key 1)
ROUND_INPUT = 17  # a registered round input's own draws (``round_inputs.RoundView.rng``), per (input, round, keys)
AVAILABILITY = 18  # a deployment's device availability: phases (round 0), then per (round, device) (``fedarena.system``)
FAILURE = 19  # whether a drawn device fails to report, per (round, device)
STRAGGLER = 20  # which drawn devices straggle and their local steps, per (round, device)
LATENCY = 21  # asynchronous aggregation's latencies: device speeds (round 0), each dispatch's jitter (dispatch + 1)
SERVER_NOISE, DEVICE_NOISE, COUNT_NOISE = 0, 1, 2  # central DP's on the output, local DP's, adaptive clipping's count


# SplitMix64 (Steele, Lea and Flood, OOPSLA 2014; Java's SplittableRandom): a counter-based generator, so the
# uniforms of many keys come from one vectorised pass instead of one seeded generator object per key
_MASK, _GAMMA, _M1, _M2 = 2**64 - 1, 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB  # its constants
GOLDEN_GAMMA, _MIX1, _MIX2 = np.uint64(_GAMMA), np.uint64(_M1), np.uint64(_M2)


def _mix64(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser on uint64 values (arithmetic modulo 2^64)."""
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def _mix64_int(z: int) -> int:
    """``_mix64`` of one Python integer (a numpy scalar costs microseconds an operation)."""
    z = ((z ^ (z >> 30)) * _M1) & _MASK
    z = ((z ^ (z >> 27)) * _M2) & _MASK
    return z ^ (z >> 31)


def _key_prefix(seed: int, tag: int) -> int:
    """The key state after (seed, tag): each part in turn is added, times the golden gamma, and mixed."""
    state = 0
    for part in (seed, tag):  # Python integers: numpy scalars cost microseconds an operation
        state = _mix64_int((state + (part + 1) * _GAMMA) & _MASK)
    return state


def _key_state(seed: int, tag: int, round_idx: int) -> int:
    return _mix64_int((_key_prefix(seed, tag) + (round_idx + 1) * _GAMMA) & _MASK)


def _key_states(seed: int, tag: int, rounds: np.ndarray) -> np.ndarray:
    """``_key_state`` of every entry of ``rounds`` (non-negative), in one vectorised pass (uint64 arithmetic wraps
    modulo 2^64 as the masked integers do)."""
    with np.errstate(over="ignore"):
        return _mix64(np.uint64(_key_prefix(seed, tag)) + (rounds.astype(np.uint64) + np.uint64(1)) * GOLDEN_GAMMA)


def keyed_bits(seed: int, tag: int, round_idx: int | np.ndarray, keys: np.ndarray, count: int) -> np.ndarray:
    """[len(keys), count] uint64 words: row j is the SplitMix64 sequence of the key (seed, tag, round, keys[j]),
    so a row depends on its own key alone (not on which other keys are drawn with it). ``round_idx`` may give
    each row its own round (an array as long as ``keys``): the rows of several rounds in one pass."""
    if np.ndim(round_idx) == 0:
        state = np.uint64(_key_state(seed, tag, int(round_idx)))
    else:
        state = _key_states(seed, tag, np.asarray(round_idx, dtype=np.int64))
    with np.errstate(over="ignore"):
        rows = _mix64(state + (np.asarray(keys, dtype=np.uint64) + np.uint64(1)) * GOLDEN_GAMMA)
        counters = (np.arange(1, count + 1, dtype=np.uint64) * GOLDEN_GAMMA)[None, :]
        return _mix64(rows[:, None] + counters)


def keyed_uniforms(seed: int, tag: int, round_idx: int | np.ndarray, keys: np.ndarray, count: int) -> np.ndarray:
    """``keyed_bits`` as uniforms in [0, 1) (their top 53 bits)."""
    return (keyed_bits(seed, tag, round_idx, keys, count) >> np.uint64(11)).astype(np.float64) * 2.0**-53


def keyed_seed(seed: int, tag: int, round_idx: int) -> int:
    """One integer in [0, 2^62) keyed by (seed, tag, round): a rule's seed for the round."""
    return int(keyed_bits(seed, tag, round_idx, np.zeros(1), 1)[0, 0] >> np.uint64(2))


def stream(seed: int, tag: int, *more: int) -> np.random.Generator:
    return np.random.default_rng([seed, tag, *more])


def torch_stream(seed: int, tag: int, *more: int, device: torch.device | str = "cpu") -> torch.Generator:
    gen = torch.Generator(device=device)
    gen.manual_seed(int(stream(seed, tag, *more).integers(2**62)))
    return gen
