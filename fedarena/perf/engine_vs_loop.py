"""``make perf``: the small workload against a bare loop and its arithmetic limit (``perf.small``), the
engine against a bare PyTorch loop at Fashion-MNIST shapes, batched vs sequential backends and ``auto``'s
pick (``perf.backend_choice``), batched evaluation, and one aggregation per rule. One run each; figures are
printed, never asserted.

Data are random tensors shaped like Fashion-MNIST (1x28x28, 10 classes, Ditto's 5-classes-per-client
lognormal partition), so the benchmark runs offline and measures compute, not accuracy.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from fedarena.config import ExperimentConfig
from fedarena.datasets.base import from_partition
from fedarena.datasets.catalog import DATASETS, register_dataset
from fedarena.datasets.partition import k_classes
from fedarena.simulation.data import gather, round_plan
from fedarena.simulation.engine import evaluate_state, initial_state, run_round, sample_clients
from fedarena.simulation.evaluate import evaluate
from fedarena.simulation.setup import build_trial

PERF_DATASET = "perf_fmnist_shape"


def _perf_dataset(rng: np.random.Generator, *, num_clients: int = 100, samples: int = 20000):
    """Random 1x28x28 images, 10 classes, Ditto's lognormal k-classes partition (benchmark only)."""
    gen = torch.Generator().manual_seed(int(rng.integers(2**31)))
    y = torch.randint(0, 10, (samples,), generator=gen)
    x = torch.randn(samples, 1, 28, 28, generator=gen)
    parts = k_classes(y.numpy(), num_clients, rng, classes_per_client=5, min_size=20)
    return from_partition(PERF_DATASET, x, y, parts, rng, num_classes=10, source="perf-random")


if PERF_DATASET not in DATASETS:
    register_dataset(PERF_DATASET, model="cnn_fmnist")(_perf_dataset)


def perf_config(model: str, device: str, backend: str = "auto", **extra) -> ExperimentConfig:
    data = {"dataset": {"name": PERF_DATASET}, "model": {"name": model}, "method": {"name": "global"},
            "rounds": 10_000, "clients_per_round": 10, "local_steps": 5, "batch_size": 16, "lr": 0.05,
            "eval_every": 10_000, "device": device, "backend": backend}
    data.update(extra)
    return ExperimentConfig.from_dict(data)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_engine(cfg: ExperimentConfig, rounds: int) -> tuple[float, object]:
    """Seconds for ``rounds`` rounds of the engine (after one warm-up round)."""
    trial = build_trial(cfg)
    state = run_round(trial, initial_state(trial))
    _sync(trial.device)
    start = time.perf_counter()
    for _ in range(rounds):
        state = run_round(trial, state)
    _sync(trial.device)
    return time.perf_counter() - start, trial


def time_bare_loop(trial, rounds: int) -> float:
    """The same minibatch steps with an nn.Module and torch.optim.SGD, client after client, then the mean."""
    cfg, module = trial.cfg, trial.model.module
    params = list(module.parameters())
    opt = torch.optim.SGD(params, lr=cfg.lr)
    global_flat = trial.w0.clone()
    _sync(trial.device)
    start = time.perf_counter()
    for t in range(1, rounds + 1):
        ids = sample_clients(trial, t)
        updates = []
        for k in ids:
            torch.nn.utils.vector_to_parameters(global_flat, params)
            index, mask, active = round_plan(trial.train, np.array([k]), cfg.local_steps, 0, cfg.batch_size,
                                             cfg.seed, t)
            for s in range(index.shape[0]):
                batch = gather(trial.train, index[s], mask[s], active[s])
                opt.zero_grad(set_to_none=True)
                loss = torch.nn.functional.cross_entropy(module(batch.x[0]), batch.y[0])
                loss.backward()
                opt.step()
            updates.append(torch.nn.utils.parameters_to_vector(params).detach() - global_flat)
        global_flat = global_flat + torch.stack(updates).mean(0)
    _sync(trial.device)
    return time.perf_counter() - start


def engine_vs_bare(model: str, device: str, rounds: int, repeats: int) -> dict:
    """Best of ``repeats`` alternating measurements of each side (this shared VM's timings scatter by +-30%)."""
    engine, bare = [], []
    for _ in range(repeats):
        seconds, trial = time_engine(perf_config(model, device), rounds)
        engine.append(seconds)
        bare.append(time_bare_loop(trial, rounds))
    steps = rounds * trial.cfg.clients_per_round * trial.cfg.local_steps
    return {"model": model, "steps": steps, "engine_steps_per_s": steps / min(engine),
            "bare_steps_per_s": steps / min(bare), "engine_over_bare": min(bare) / min(engine),
            "median_ratio": float(np.median(np.array(bare) / np.array(engine)))}


def evaluation_cost(model: str, device: str) -> dict:
    """All clients' personal models (Ditto) vs one global model on the same pooled test set."""
    trial = build_trial(perf_config(model, device, method={"name": "ditto"}))
    state = initial_state(trial)
    evaluate_state(trial, state)  # warm-up
    timings = {}
    for label, params in (("personal", state.clients["personal"]), ("global", state.w)):
        _sync(trial.device)
        start = time.perf_counter()
        evaluate(trial.model, params, trial.test, trial.dataset.num_classes)
        _sync(trial.device)
        timings[label] = time.perf_counter() - start
    return {"model": model, "clients": trial.dataset.num_clients, "test_samples": int(trial.test.sizes.sum()),
            "personal_s": timings["personal"], "global_s": timings["global"],
            "personal_over_global": timings["personal"] / timings["global"]}
