"""``make perf``: throughput of the engine against a bare PyTorch loop, batched vs sequential backends,
batched evaluation, and one aggregation per rule. One run each; figures are printed, never asserted.

Data are random tensors shaped like Fashion-MNIST (1x28x28, 10 classes, Ditto's 5-classes-per-client
lognormal partition), so the benchmark runs offline and measures compute, not accuracy.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from fedarena.config import ExperimentConfig
from fedarena.datasets.base import from_partition
from fedarena.datasets.partition import k_classes
from fedarena.datasets.registry import DATASETS, register_dataset
from fedarena.methods.aggregators.perf import time_aggregators
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


def perf_config(model: str, device: str, backend: str = "sequential", **extra) -> ExperimentConfig:
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


def batched_vs_sequential(model: str, device: str, rounds: int, method: dict) -> dict:
    seq_s, _ = time_engine(perf_config(model, device, "sequential", method=method), rounds)
    bat_s, _ = time_engine(perf_config(model, device, "batched", method=method), rounds)
    return {"model": model, "method": method["name"], "sequential_s": seq_s, "batched_s": bat_s,
            "batched_speedup": seq_s / bat_s}


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


def aggregation_times(device: str) -> list[dict]:
    trial = build_trial(perf_config("cnn_fmnist", device, rounds=1))
    return time_aggregators(trial.model.dim, ns=(10, 100), device=device, repeats=1)


def _print_rows(title: str, rows: list[dict]) -> None:
    print(f"\n## {title}")
    for row in rows:
        print("  " + "  ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5, help="engine vs bare: alternating repetitions")
    parser.add_argument("--skip-aggregators", action="store_true")
    args = parser.parse_args(argv)
    print(f"device={args.device} torch={torch.__version__} threads={torch.get_num_threads()}")
    _print_rows("engine vs bare PyTorch SGD loop (10 clients/round, 5 steps, batch 16)",
                [engine_vs_bare(m, args.device, args.rounds, args.repeats) for m in ("cnn_fmnist", "mlp")])
    _print_rows("batched vs sequential backend",
                [batched_vs_sequential(m, args.device, args.rounds, {"name": meth})
                 for m in ("cnn_fmnist", "mlp") for meth in ("global", "ditto")])
    _print_rows("evaluation: every client's personal model vs one model, pooled test set",
                [evaluation_cost(m, args.device) for m in ("cnn_fmnist", "mlp")])
    if not args.skip_aggregators:
        _print_rows("one aggregation of n updates of the Fashion-MNIST CNN (d parameters)", aggregation_times(args.device))


if __name__ == "__main__":
    main()
