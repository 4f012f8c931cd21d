"""How far a card's numbers would move with other seeds: the 95% Student-t interval of each setting over the
seeds (as the tables compute their cells' intervals, ``leaderboards.cells.t_halfwidth``), and the whole grid a
card is made of, one entry per (setting, dataset) with its seeds' values.

A setting's number on a card is the mean over the scale's datasets of the mean over seeds; its interval is
that number plus or minus the t half-width of the per-seed means over the datasets (the seeds are shared by the
datasets). With one seed the interval is the point itself. The interval is a cell's uncertainty, shown beside it;
a submitted card is verified seed by seed against the grid (``website.verification``), never against it.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from fedarena.leaderboards.cells import t_halfwidth

METRICS = ("acc_pooled", "acc_std", "acc_worst10", "asr_pooled")  # what a card's settings carry
CONFIDENCE = 0.95


def setting_key(attack: str, level: float) -> str:
    """A setting's key on a card: ``clean`` or ``attack@level`` (``min_max@0.2``)."""
    return "clean" if attack == "clean" else f"{attack}@{float(level):g}"


def intervals(runs: pd.DataFrame, settings: dict[str, dict[str, float]]) -> dict[str, dict[str, list[float]]]:
    """setting -> metric -> [low, high] around the card's value (``settings``), from one row's runs; a metric
    without a finite value on every seed is left out."""
    if runs.empty:
        return {}
    out: dict[str, dict[str, list[float]]] = {}
    for (attack, level), group in runs.groupby(["attack_label", "level"], sort=True):
        key = setting_key(str(attack), float(level))
        for metric in METRICS:
            centre = settings.get(key, {}).get(metric)
            if metric not in group or centre is None or not math.isfinite(centre):
                continue
            per_seed = group.groupby("seed")[metric].mean().to_numpy(dtype=float)
            if not np.isfinite(per_seed).all():
                continue
            half = 0.0 if len(per_seed) == 1 else t_halfwidth(per_seed, CONFIDENCE)
            out.setdefault(key, {})[metric] = [centre - half, centre + half]
    return out


def grid(runs: pd.DataFrame) -> list[dict]:
    """One entry per (setting, dataset) of one row's runs: each seed's value of every metric a card's settings carry
    (benign accuracy, its spread across devices, the worst 10% of devices, attack success rate), their mean and 95%
    half-width (None with one seed), sorted by setting, level and dataset. A site verifies a submitted card seed by
    seed against these values (``website.verification``)."""
    if runs.empty:
        return []
    out = []
    for (attack, level, dataset), group in runs.groupby(["attack_label", "level", "dataset_label"], sort=True):
        group = group.sort_values("seed")
        entry = {"setting": setting_key(str(attack), float(level)), "attack": str(attack), "level": float(level),
                 "dataset": str(dataset), "seeds": [int(s) for s in group["seed"]]}
        for metric in METRICS:
            values = group[metric].to_numpy(dtype=float) if metric in group else np.full(len(group), np.nan)
            if not np.isfinite(values).any():
                continue
            entry[metric] = [_finite(v) for v in values]
            entry[f"{metric}_mean"] = _finite(float(np.nanmean(values)))
            entry[f"{metric}_ci"] = _finite(t_halfwidth(values, CONFIDENCE)) if len(values) > 1 else None
        out.append(entry)
    return out


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def within(value: float, interval: list[float], tolerance: float = 1e-6) -> bool:
    """Whether ``value`` lies in ``interval`` widened by ``tolerance`` (float32 rounding of a rerun)."""
    return interval[0] - tolerance <= value <= interval[1] + tolerance
