"""Wall-clock cost of one aggregation per rule, for ``make perf``.

    time_aggregators(d=3_300_000, ns=(10, 100))  # d ~ the Fashion-MNIST CNN's parameter count

Each rule aggregates n random float32 updates of dimension d with f = n // 10 assumed malicious; a rule
that cannot run with that f (e.g. bulyan needs n >= 4f + 3) is timed with f = 0, and skipped with a note
if it cannot run at all. Times are the best of ``repeats`` runs (after one untimed warm-up on CUDA).
"""

from __future__ import annotations

import time

import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators.base import AGGREGATORS, RoundDraw
from fedarena.methods.aggregators.builder import check_aggregator, make_aggregator
from fedarena.round_inputs import INPUTS


def usable_f(name: str, n: int) -> int | None:
    """n // 10 if the rule accepts it, else 0 if it accepts that, else None."""
    for f in (n // 10, 0):
        try:
            check_aggregator({"name": name}, n=n, f=f)
        except ConfigError:
            continue
        return f
    return None


def random_round(
    n: int, d: int, device: str, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(updates[n, d], sample counts[n], losses[n]) drawn from a fixed torch.Generator on the CPU."""
    gen = torch.Generator().manual_seed(seed)
    updates = torch.randn(n, d, generator=gen).mul_(1e-2)
    weights = torch.randint(10, 1000, (n,), generator=gen).float()
    losses = torch.rand(n, generator=gen)
    return updates.to(device), weights.to(device), losses.to(device)


def best_time(fn, repeats: int, device: str) -> float:
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    if device.startswith("cuda"):
        fn()
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return min(times)


def time_round(n: int, d: int, device: str, repeats: int, rules: tuple[str, ...]) -> list[dict]:
    """Time the given rules on one random round of n updates."""
    updates, weights, losses = random_round(n, d, device)
    rows = []
    for name in rules:
        f = usable_f(name, n)
        row = {"rule": name, "n": n, "d": d, "f": f, "device": device, "seconds": None, "note": ""}
        if f is None:
            row["note"] = f"skipped: {name} cannot run with n={n} for any f"
        elif missing := [i for i in make_aggregator({"name": name}, f=f).inputs if INPUTS.get(i).stand_in is None]:
            row["note"] = f"skipped: {name} reads {', '.join(missing)}, made only inside a trial; its cost is the trial's"
        else:
            agg = make_aggregator({"name": name}, f=f)
            if agg.inputs:  # stand-ins of the round inputs it reads (FLTrust's root update: the updates' mean)
                agg = agg.for_round(RoundDraw(torch.arange(n), inputs={i: INPUTS.get(i).stand_in(updates)
                                                                         for i in agg.inputs}))
            row["seconds"] = best_time(lambda agg=agg: agg(updates, weights, losses), repeats, device)
            row["note"] = "" if f == n // 10 else f"f = n // 10 = {n // 10} not allowed; timed with f = 0"
        rows.append(row)
    return rows


def time_aggregators(
    d: int,
    ns: tuple[int, ...] = (10, 100),
    device: str = "cpu",
    repeats: int = 3,
    rules: tuple[str, ...] | None = None,
) -> list[dict]:
    """One row per (rule, n): rule, n, d, f, device, seconds (None when skipped) and a note.
    ``rules`` defaults to every registered aggregator; unknown names raise the registry's error."""
    names = tuple(AGGREGATORS.names()) if rules is None else tuple(rules)
    for name in names:
        AGGREGATORS.get(name)
    return [row for n in ns for row in time_round(n, d, device, repeats, names)]
