"""What k paper-scale trials cost when they start and run together on one machine (``make perf-paper``).

Each trial is its own process, as under Ray (spawned, so every one imports and initialises its own torch and
CUDA context). The processes wait at a barrier once imported, then time their set-up (``build_trial`` and
the initial state, i.e. loading the data, partitioning it, building the model, allocating per-client
tables) and ``rounds`` training rounds after one warm-up round. With ``threads="share"`` each trial gets
``cores // k`` torch threads, as a benchmark trial gets its ``--cpus-per-trial`` (``simulation.threads``);
with ``threads="all"`` each keeps torch's default of one thread per core, as trials did before. Figures
are one run's measurements, printed and never asserted.
"""

from __future__ import annotations

import multiprocessing
import os
import queue

from fedarena.config import ExperimentConfig
from fedarena.simulation.costs import CostMeter
from fedarena.simulation.engine import initial_state, run_round
from fedarena.simulation.setup import build_trial, resolve_device
from fedarena.simulation.threads import limit_threads

START_TIMEOUT_S = 600  # spawned processes import torch and fedarena before the barrier


def _trial_process(config: dict, threads: int | None, rounds: int, barrier, results) -> None:
    """One trial: wait for the others, then time set-up and ``rounds`` rounds (after a warm-up round)."""
    limit_threads(threads)
    cfg = ExperimentConfig.from_dict(config)
    meter = CostMeter(resolve_device(cfg.device))  # each phase: a clock synchronised with the device
    barrier.wait(timeout=START_TIMEOUT_S)
    with meter.phase("setup"):
        trial = build_trial(cfg)
        state = initial_state(trial)
    state = run_round(trial, state)  # warm-up
    with meter.phase("rounds"):
        for _ in range(rounds):
            state = run_round(trial, state)
    results.put((meter.seconds["setup"], 1000 * meter.seconds["rounds"] / rounds))


def run_together(cfg: ExperimentConfig, k: int, rounds: int, threads: str = "share") -> list[tuple[float, float]]:
    """(set-up seconds, ms per round) of each of ``k`` trials of ``cfg`` started together in their own
    processes; ``threads``: "share" (``cores // k`` torch threads each) or "all" (torch's default)."""
    if threads not in ("share", "all"):
        raise ValueError(f"threads must be 'share' or 'all', got {threads!r}")
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(k), ctx.Queue()
    per_trial = max(1, (os.cpu_count() or 1) // k) if threads == "share" else None
    procs = [ctx.Process(target=_trial_process, args=(cfg.to_dict(), per_trial, rounds, barrier, results))
             for _ in range(k)]
    for proc in procs:
        proc.start()
    found = []
    while len(found) < k:
        try:
            found.append(results.get(timeout=1))
        except queue.Empty:
            failed = [proc.exitcode for proc in procs if proc.exitcode not in (None, 0)]
            if failed:  # the others wait at the barrier or run on: end them, say why
                for proc in procs:
                    proc.kill()
                raise RuntimeError(f"{len(failed)} of {k} trial processes failed (exit codes {failed}); "
                                   "their error is printed above") from None
    for proc in procs:
        proc.join()
    return found


def report(cfg: ExperimentConfig, counts: list[int], rounds: int) -> list[str]:
    """Set-up and per-round time of 1 trial alone and of k together (threads shared, and not), with the
    throughput of k together relative to one alone."""
    build_trial(cfg)  # the partition cache is written once here: every measured set-up reads it
    alone = run_together(cfg, 1, rounds)[0]
    lines = [f"trials together ({cfg.method['name']}, {resolve_device(cfg.device).type}, {os.cpu_count()} cores): set-up s | ms per "
             f"round each | throughput vs one alone",
             f"  1 alone: {alone[0]:.1f} s | {alone[1]:.1f} ms | 1.00x"]
    for k in counts:
        for threads in ("share", "all"):
            found = run_together(cfg, k, rounds, threads)
            setup = [s for s, _ in found]
            per_round = [ms for _, ms in found]
            throughput = sum(alone[1] / ms for ms in per_round)
            label = f"{os.cpu_count() // k} threads each" if threads == "share" else "torch default threads"
            lines.append(f"  {k} together, {label}: {min(setup):.1f}-{max(setup):.1f} s "
                         f"({max(setup) / alone[0]:.1f}x alone) | {min(per_round):.1f}-{max(per_round):.1f} ms "
                         f"| {throughput:.2f}x")
    return lines
