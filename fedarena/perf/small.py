"""The small workload of ``make perf``: the batched engine against a bare per-client PyTorch loop and against
its arithmetic limit.

Workloads: scikit-learn digits on 100 clients, an MLP 64-200-200-10, 10 clients a round, 2 local steps of
batch 16, one torch thread; and the same model and steps on 1,000 synthetic clients, 50 a round. The bare loop takes the same minibatches with an ``nn.Module`` and
``torch.optim.SGD``, client after client. The limit is the round's multiply-adds (forward, weight gradients
and input gradients of every layer but the first) at the rate this core reaches on one large matrix
product: what no implementation of these steps can beat on this machine. ``products_ms`` times the round's
batched matrix products alone at their real shapes (small: they run below that rate): what the engine's round
costs beyond them is its overhead (minibatch plans, sampling, the update, aggregation).
"""

from __future__ import annotations

import time

import torch

from fedarena.config import ExperimentConfig
from fedarena.perf.engine_vs_loop import time_bare_loop, time_engine

HIDDEN = (200, 200)


def small_config(backend: str = "batched") -> ExperimentConfig:
    return ExperimentConfig.from_dict({
        "dataset": {"name": "digits", "num_clients": 100, "partition_options": {"min_size": 10}},
        "model": {"name": "mlp", "hidden": list(HIDDEN)}, "method": {"name": "global"},
        "rounds": 100_000, "clients_per_round": 10, "local_steps": 2, "batch_size": 16, "lr": 0.05,
        "eval_every": 100_000, "backend": backend, "device": "cpu"})


def thousand_config(backend: str = "batched") -> ExperimentConfig:
    """The same model and local schedule on 1,000 clients, 50 a round: FedProx's Synthetic(1, 1) with 64
    features (digits has too few samples for 1,000 clients)."""
    return ExperimentConfig.from_dict({
        "dataset": {"name": "synthetic", "num_clients": 1000, "dim": 64}, "model": {"name": "mlp", "hidden": list(HIDDEN)},
        "method": {"name": "global"}, "rounds": 100_000, "clients_per_round": 50, "local_steps": 2, "batch_size": 16,
        "lr": 0.05, "eval_every": 100_000, "backend": backend, "device": "cpu"})


WORKLOADS = {"digits, 100 clients, 10 a round": small_config, "synthetic, 1000 clients, 50 a round": thousand_config}


def round_flops(cfg: ExperimentConfig, widths: tuple[int, ...]) -> float:
    """Floating-point operations of one round's local steps for an MLP with layer widths ``widths``."""
    products = [a * b for a, b in zip(widths[:-1], widths[1:], strict=False)]
    per_sample = 2 * sum(products) * 2 + 2 * sum(products[1:])  # forward + weight grads, input grads
    return per_sample * cfg.clients_per_round * cfg.local_steps * cfg.batch_size


def matmul_rate(size: int = 512, repeats: int = 5) -> float:
    """FLOP per second of one float32 [size x size] matrix product, the best of ``repeats``."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)
    best = min(_seconds(lambda: torch.mm(a, b)) for _ in range(repeats))
    return 2 * size**3 / best


def products_seconds(cfg: ExperimentConfig, widths: tuple[int, ...], repeats: int = 5) -> float:
    """Seconds of one round's batched matrix products alone, as the dense step issues them (per local step and
    layer: the forward product, the weight gradient, and the input gradient of every layer but the first), on
    random data of the same shapes: the part of the engine's round that is arithmetic, the best of ``repeats``."""
    n, batch = cfg.clients_per_round, cfg.batch_size
    layers = [(torch.randn(n, batch, a), torch.randn(n, b, a), torch.randn(n, batch, b))
              for a, b in zip(widths[:-1], widths[1:], strict=False)]

    def one_round() -> None:
        for _ in range(cfg.local_steps):
            for i, (x, w, dz) in enumerate(layers):
                torch.bmm(x, w.transpose(1, 2))
                torch.bmm(dz.transpose(1, 2), x)
                if i > 0:
                    torch.bmm(dz, w)

    one_round()
    return min(_seconds(one_round) for _ in range(repeats))


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def small_workload(rounds: int = 200, repeats: int = 5, config=small_config) -> dict:
    """Best-of-``repeats`` ms per round of the batched engine and of the bare loop (alternating, since this
    shared machine's timings scatter), with the arithmetic limit; on one torch thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        engine, bare = [], []
        for _ in range(repeats):
            seconds, trial = time_engine(config(), rounds)
            engine.append(seconds / rounds)
            bare.append(time_bare_loop(trial, rounds) / rounds)
        widths = (trial.dataset.input_shape[-1], *HIDDEN, trial.dataset.num_classes)
        limit = round_flops(trial.cfg, widths) / matmul_rate()
        products = products_seconds(trial.cfg, widths)
    finally:
        torch.set_num_threads(threads)
    return {"engine_ms": 1e3 * min(engine), "bare_ms": 1e3 * min(bare), "limit_ms": 1e3 * limit,
            "products_ms": 1e3 * products, "engine_over_bare": min(bare) / min(engine),
            "engine_over_limit": min(engine) / limit, "engine_over_products": min(engine) / products,
            "mflop_per_round": round_flops(trial.cfg, widths) / 1e6}
