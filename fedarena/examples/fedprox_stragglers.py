"""FedProx's straggler experiment (Li et al., MLSys 2020, Figure 1's synthetic(1,1) column) on the offline
``synthetic`` dataset: 30 devices, 10 drawn per round (proportional to their sizes, a simple mean), E = 20 local
epochs of batch 10 at lr 0.01, 200 rounds; 0%, 50% and 90% of the drawn devices are stragglers (each runs a number
of epochs uniform in {1, ..., 19}: FedProx's code draws ``np.random.randint(1, E)``, whose upper end is exclusive). FedAvg drops the stragglers' work (``straggler_policy: drop``); FedProx
includes it, with mu = 0 and with mu = 1 (``include``). Our synthetic caps a device at 200 samples (the paper's
sizes are lognormal without a cap), so the numbers are the paper's setting, not its figure.

    python -m fedarena.examples.fedprox_stragglers [--rounds 200] [--seeds 0 1 2] [--max-samples 200] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from fedarena.config import ExperimentConfig
from fedarena.simulation.experiment import run_experiment

ROWS = {"FedAvg (drop)": ({"name": "global"}, "drop"), "FedProx mu=0 (include)": ({"name": "fedprox", "mu": 0.0},
        "include"), "FedProx mu=1 (include)": ({"name": "fedprox", "mu": 1.0}, "include")}
STRAGGLERS = (0.0, 0.5, 0.9)


def config(method: dict, policy: str, stragglers: float, rounds: int, seed: int,
           max_samples: int = 200) -> ExperimentConfig:
    system = {"name": "synchronous", "stragglers": stragglers, "straggler_policy": policy}
    return ExperimentConfig.from_dict({
        "dataset": {"name": "synthetic", "alpha": 1.0, "beta": 1.0, "num_clients": 30,
                    "max_samples": max_samples}, "model": {"name": "logreg"},
        "method": method, "system": system, "rounds": rounds, "clients_per_round": 10, "local_steps": 0,
        "local_epochs": 20, "batch_size": 10, "lr": 0.01, "eval_every": max(rounds // 10, 1), "seed": seed,
        "data_seed": 0, "sampling": "proportional"})


def run(rounds: int, seeds: list[int], max_samples: int = 200) -> dict:
    out = {}
    for row, (method, policy) in ROWS.items():
        for stragglers in STRAGGLERS:
            finals = []
            for seed in seeds:
                start = time.perf_counter()
                final = run_experiment(config(method, policy, stragglers, rounds, seed, max_samples))["final"]
                finals.append(final)
                print(f"{row:24s} stragglers {stragglers:.0%} seed {seed}: acc {final['acc_pooled']:.4f} "
                      f"loss {final['loss_mean']:.4f} ({time.perf_counter() - start:.0f} s)", flush=True)
            out[f"{row} | {stragglers}"] = {key: float(np.mean([f[key] for f in finals]))
                                            for key in ("acc_pooled", "acc_mean", "loss_mean")}
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--max-samples", type=int, default=200, help="a device's cap (the dataset's default: 200)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    results = run(args.rounds, args.seeds, args.max_samples)
    print(f"\n{'':24s}" + "".join(f"{s:>16.0%}" for s in STRAGGLERS))
    for metric in ("acc_pooled", "loss_mean"):
        print(metric)
        for row in ROWS:
            print(f"{row:24s}" + "".join(f"{results[f'{row} | {s}'][metric]:>16.4f}" for s in STRAGGLERS))
    if args.out:
        args.out.write_text(json.dumps(results, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
