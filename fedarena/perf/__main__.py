"""``make perf`` (``python -m fedarena.perf``): prints, in one run, the small workload against a bare loop
and its arithmetic limit, ``backend: auto`` against both backends, the engine against a bare loop at
Fashion-MNIST shapes, batched evaluation, one aggregation per rule, the rule calls per round of each attack
that searches against the server's rule, with their cost, and an isolated (sandboxed) rule against the same rule
in-process. Figures are printed, never asserted."""

from __future__ import annotations

import argparse

import torch

from fedarena.perf.aggregators import time_aggregators
from fedarena.perf.backend_choice import auto_rows
from fedarena.perf.engine_vs_loop import build_trial, engine_vs_bare, evaluation_cost, perf_config
from fedarena.perf.isolation import isolation_rows
from fedarena.perf.rule_calls import rule_call_rows
from fedarena.perf.small import WORKLOADS, small_workload


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
    parser.add_argument("--skip-isolation", action="store_true")
    args = parser.parse_args(argv)
    print(f"device={args.device} torch={torch.__version__} threads={torch.get_num_threads()}")
    if args.device == "cpu":
        _print_rows("small workloads, one thread: MLP 64-200-200-10, 2 steps of batch 16 (goal on digits: "
                    "engine_over_bare >= 4.5)",
                    [{"workload": name, **small_workload(config=config, rounds=200 if "100" in name else 50)}
                     for name, config in WORKLOADS.items()])
    _print_rows("backend: auto against both backends (goal: auto_over_best <= 1.1)", auto_rows(args.device, args.rounds))
    _print_rows("engine vs bare PyTorch SGD loop (10 clients/round, 5 steps, batch 16)",
                [engine_vs_bare(m, args.device, args.rounds, args.repeats) for m in ("cnn_fmnist", "mlp")])
    _print_rows("evaluation: every client's personal model vs one model, pooled test set",
                [evaluation_cost(m, args.device) for m in ("cnn_fmnist", "mlp")])
    if not args.skip_aggregators:
        _print_rows("one aggregation of n updates of the Fashion-MNIST CNN (d parameters)", aggregation_times(args.device))
        _print_rows("the server's rule under each attack that searches against it: calls per round (the server's own "
                    "included) and their cost, the quick robustness suite's seed-0 trials (5 rounds)", rule_call_rows())
    if not args.skip_isolation:
        _print_rows("a submitted rule isolated in its sandbox against the same rule in-process, quick digits trials "
                    "(goal: ratio <= 1.2)", isolation_rows())


if __name__ == "__main__":
    main()
