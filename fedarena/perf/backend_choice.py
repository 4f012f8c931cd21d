"""``backend: auto`` against measurements: per model and method at paper-scale shapes (Fashion-MNIST-shaped
data on 100 devices, 10 a round, 5 local steps of batch 16), the ms per round of each backend, the one
``auto`` picks, and its time over the faster one's (the goal: within 1.1)."""

from __future__ import annotations

from fedarena.models.backends import auto_backend
from fedarena.perf.engine_vs_loop import perf_config, time_engine

CASES = (("cnn_fmnist", "global"), ("cnn_fmnist", "ditto"), ("mlp", "global"), ("mlp", "ditto"),
         ("logreg", "global"))


def auto_vs_measured(model: str, method: str, device: str, rounds: int, repeats: int = 2) -> dict:
    """Best-of-``repeats`` ms per round of both backends (alternating) and ``auto``'s pick."""
    times = {"sequential": [], "batched": []}
    for _ in range(repeats):
        for backend, seconds in times.items():
            elapsed, trial = time_engine(perf_config(model, device, backend, method={"name": method}), rounds)
            seconds.append(1e3 * elapsed / rounds)
    best = {backend: min(seconds) for backend, seconds in times.items()}
    pick = auto_backend(trial.model, trial.device)
    return {"model": model, "method": method, "sequential_ms": best["sequential"], "batched_ms": best["batched"],
            "auto": pick, "auto_over_best": best[pick] / min(best.values())}


def auto_rows(device: str, rounds: int) -> list[dict]:
    return [auto_vs_measured(model, method, device, rounds) for model, method in CASES]
