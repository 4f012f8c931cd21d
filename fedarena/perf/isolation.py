"""An isolated rule against the same rule in-process (``make perf``; ``python -m fedarena.perf.isolation``).

The leaderboard reruns a submitted aggregator in a bubblewrap sandbox (``fedarena.isolation``): every call crosses
a pipe and a shared memory region. This measures what that costs on the battery's quick settings: a coordinate-wise
median written as a plugin, loaded once in-process and once isolated, each trial run twice in alternating order
(the machine's load drifts), under the attacks that call the rule most (the adaptive attack: 33 calls a round) and
least. Printed: seconds per setting and variant, the isolated over in-process ratio (goal: at most 1.2), and
whether the two gave the same accuracy. Needs bubblewrap; figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from fedarena.api import load_plugins, run
from fedarena.isolation import available, load_isolated

RULE = '''
import torch
from fedarena import aggregator, check_updates


@aggregator("{name}")
def median_rule(updates, *, weights, losses, f):
    """The coordinate-wise median (a timing stand-in for a submitted rule)."""
    check_updates(updates, f)
    return updates.median(dim=0).values
'''
FIXED = {"rounds": 30, "eval_every": 10, "clients_per_round": 10, "local_steps": 2, "batch_size": 16, "lr": 0.2,
         "backend": "batched"}  # the battery's quick scale
DATASETS = {"digits": {"dataset": {"name": "digits", "num_clients": 30}, "model": {"name": "mlp", "hidden": [64]}},
            "mnist_5k": {"dataset": {"name": "mnist_5k"}, "model": {"name": "mlp", "hidden": [64]}}}
ATTACKS = (("adaptive", 0.2), ("min_max", 0.2), ("a1", 0.2), ("ipm", 0.1))
IN_PROCESS, ISOLATED = "median_in_process", "median_isolated"


def load_rules(folder: Path) -> None:
    for name, load in ((IN_PROCESS, load_plugins), (ISOLATED, load_isolated)):
        path = folder / f"{name}.py"
        path.write_text(RULE.format(name=name))
        load([path])


def timed(config: dict) -> tuple[float, float]:
    start = time.perf_counter()
    final = run(config).final
    return time.perf_counter() - start, final["acc_pooled"]


def isolation_rows(datasets: tuple[str, ...] = ("digits",), repeats: int = 2) -> list[dict]:
    """One row per (dataset, attack): seconds in-process and isolated (sums over ``repeats`` alternating runs)."""
    reason = available()
    if reason:
        return [{"skipped": reason}]
    rows = []
    with tempfile.TemporaryDirectory(prefix="fedarena-perf-isolation-") as folder:
        load_rules(Path(folder))
        for label in datasets:
            for rule in (IN_PROCESS, ISOLATED):  # untimed: the data's first load, the sandbox's start
                timed({**DATASETS[label], **FIXED, "rounds": 1, "aggregator": {"name": rule}})
            for attack, level in ATTACKS:
                seconds, accuracy = {IN_PROCESS: 0.0, ISOLATED: 0.0}, {}
                for repeat in range(repeats):
                    order = (IN_PROCESS, ISOLATED) if repeat % 2 == 0 else (ISOLATED, IN_PROCESS)
                    for rule in order:
                        config = {**DATASETS[label], **FIXED, "aggregator": {"name": rule},
                                  "attack": {"name": attack, "level": level}}
                        took, accuracy[rule] = timed(config)
                        seconds[rule] += took
                rows.append({"dataset": label, "attack": f"{attack}@{level}", "in_process_s": seconds[IN_PROCESS],
                             "isolated_s": seconds[ISOLATED], "ratio": seconds[ISOLATED] / seconds[IN_PROCESS],
                             "same_accuracy": accuracy[IN_PROCESS] == accuracy[ISOLATED]})
    total_in = sum(r["in_process_s"] for r in rows)
    total_iso = sum(r["isolated_s"] for r in rows)
    rows.append({"dataset": "all", "attack": "all", "in_process_s": total_in, "isolated_s": total_iso,
                 "ratio": total_iso / total_in, "same_accuracy": all(r["same_accuracy"] for r in rows)})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--datasets", default="digits", help="comma-separated: digits, mnist_5k")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    for row in isolation_rows(tuple(args.datasets.split(",")), args.repeats):
        print("  " + "  ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))


if __name__ == "__main__":
    main()
