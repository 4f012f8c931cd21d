"""What a run cost: wall time per phase (training rounds, evaluation, checkpoints) and peak memory.

``CostMeter.phase(name)`` times a block; on CUDA it synchronises the device before reading the clock (a
kernel launch returns before the work is done) and records the block's peak allocated memory. The summary
is part of a run's result record (``cost``) and is logged with the benchmark run as ``cost_*`` metrics, so
a user sees what each cell cost. Timing never changes a number: it only reads clocks and counters.
"""

from __future__ import annotations

import contextlib
import resource
import sys
import time
from collections import defaultdict

import torch

COST_PREFIX = "cost_"


def synchronized() -> None:
    """Wait for every CUDA kernel queued in this process, where it has used CUDA (a kernel launch returns before the
    work is done, so a clock read without this times the launches); nothing in a process that never touched CUDA."""
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()


class CostMeter:
    """Accumulated seconds and calls per phase, and peak device memory per phase (CUDA only)."""

    def __init__(self, device: torch.device | str = "cpu"):
        self.device = torch.device(device)
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.calls: defaultdict[str, int] = defaultdict(int)
        self.peak_bytes: defaultdict[str, int] = defaultdict(int)
        self.started = time.perf_counter()

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @contextlib.contextmanager
    def phase(self, name: str):
        self._sync()
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        start = time.perf_counter()
        try:
            yield
        finally:
            self._sync()
            self.seconds[name] += time.perf_counter() - start
            self.calls[name] += 1
            if self.device.type == "cuda":
                self.peak_bytes[name] = max(self.peak_bytes[name], torch.cuda.max_memory_allocated(self.device))

    def summary(self) -> dict[str, float]:
        """``total_s``, per phase ``<phase>_s`` and ``<phase>_calls``, ``round_ms`` (training per round),
        ``peak_<phase>_mb`` on CUDA, and the process's peak resident memory ``peak_rss_mb``."""
        out = {"total_s": time.perf_counter() - self.started}
        for name, seconds in self.seconds.items():
            out[f"{name}_s"] = seconds
            out[f"{name}_calls"] = self.calls[name]
        if self.calls.get("round"):
            out["round_ms"] = 1000 * self.seconds["round"] / self.calls["round"]
        for name, peak in self.peak_bytes.items():
            out[f"peak_{name}_mb"] = peak / 2**20
        out["peak_rss_mb"] = peak_rss_mb()
        return out


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (a reused Ray worker: of every trial it ran)."""
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib / 1024 if sys.platform != "darwin" else kib / 2**20


def cost_metrics(cost: dict) -> dict[str, float]:
    """The summary as MLflow metric names (``cost_round_ms``, ``cost_eval_s``, ...)."""
    return {COST_PREFIX + key: float(value) for key, value in cost.items()}
