"""Asynchronous aggregation's clock (FedBuff, Nguyen et al. AISTATS 2022): how long each dispatched device takes,
and what a late update counts for. Pure functions of (seed, device, dispatch), so a resumed run's clock is the same.

A device's latency is ``mean_k x jitter``: ``mean_k`` its own (``latency_mean`` x a lognormal speed of mean 1 and
sigma ``speed_sigma``, drawn once per device; or its mean latency from a trace), the jitter lognormal of
mean 1 and sigma ``jitter_sigma`` per dispatch. An attacker chooses when its update arrives (``attacker_timing``):
as any device (honest), at once (fresh: latency 0, so it is in the next buffer, never stale) or late (stale:
``stale_factor`` x its latency)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from fedarena.errors import ConfigError
from fedarena.streams import LATENCY, keyed_uniforms
from fedarena.system.base import SystemSpec


def staleness_weight(staleness: np.ndarray) -> np.ndarray:
    """FedBuff's staleness scaling s(tau) = 1 / sqrt(1 + tau) (its experiments' choice), tau the server steps since
    the device received its model."""
    return 1.0 / np.sqrt(1.0 + np.asarray(staleness, dtype=np.float64))


def _normals(seed: int, key: int, ids: np.ndarray) -> np.ndarray:
    """Standard normals keyed by (seed, LATENCY, key, device) (Box-Muller on two keyed uniforms)."""
    u = keyed_uniforms(seed, LATENCY, key, np.asarray(ids), 2)
    return np.sqrt(-2.0 * np.log1p(-u[:, 0])) * np.cos(2.0 * np.pi * u[:, 1])


def lognormal_mean_one(sigma: float, z: np.ndarray) -> np.ndarray:
    """exp(sigma z - sigma^2 / 2): a lognormal factor of mean 1."""
    return np.exp(sigma * z - sigma * sigma / 2.0)


def read_latency_trace(path: str, devices: int) -> np.ndarray:
    """A ``device,latency`` CSV (every device once, latency > 0: its mean latency) as [devices]; one-line errors."""
    try:
        rows = list(csv.reader(Path(path).read_text().splitlines()))
    except OSError as err:
        raise ConfigError(f"system latency trace {path}: cannot read it ({err.strerror or err})") from None
    if not rows or [c.strip() for c in rows[0]] != ["device", "latency"]:
        raise ConfigError(f"system latency trace {path}: the first line must be the header device,latency")
    means = np.full(devices, np.nan)
    for number, row in enumerate(rows[1:], start=2):
        try:
            device, latency = int(row[0]), float(row[1])
        except (ValueError, IndexError):
            raise ConfigError(f"system latency trace {path}, line {number}: expected device,latency, got "
                              f"{','.join(row)!r}") from None
        if not 0 <= device < devices or not 0 < latency < np.inf:
            raise ConfigError(f"system latency trace {path}, line {number}: device must be in [0, {devices}) and "
                              f"latency a finite number > 0; got {device},{latency}")
        means[device] = latency
    missing = np.flatnonzero(np.isnan(means))
    if len(missing):
        raise ConfigError(f"system latency trace {path}: no latency for device(s) {missing[:5].tolist()}"
                          f"{' ...' if len(missing) > 5 else ''}; list every device once")
    return means


def mean_latencies(spec: SystemSpec, seed: int, devices: int) -> np.ndarray:
    """[devices] each device's mean latency: the trace's, or ``latency_mean`` x its speed (stream LATENCY, key 0)."""
    if spec.trace is not None:
        return read_latency_trace(spec.trace, devices)
    return spec.latency_mean * lognormal_mean_one(spec.speed_sigma, _normals(seed, 0, np.arange(devices)))


def latencies(spec: SystemSpec, seed: int, means: np.ndarray, malicious: np.ndarray, ids: np.ndarray,
              dispatch: int) -> np.ndarray:
    """[len(ids)] the latency of each device dispatched at server step ``dispatch`` (stream LATENCY, key
    dispatch + 1), an attacker's as its ``attacker_timing`` chooses."""
    ids = np.asarray(ids)
    latency = means[ids] * lognormal_mean_one(spec.jitter_sigma, _normals(seed, dispatch + 1, ids))
    bad = malicious[ids]
    if spec.attacker_timing == "fresh":
        latency = np.where(bad, 0.0, latency)
    elif spec.attacker_timing == "stale":
        latency = np.where(bad, spec.stale_factor * latency, latency)
    return latency


def first_arrivals(arrival: np.ndarray, ids: np.ndarray, buffer: int) -> np.ndarray:
    """Positions of the ``buffer`` earliest arrivals (ties: the lower device id first), in arrival order."""
    order = np.lexsort((ids, arrival))
    return order[:buffer]
