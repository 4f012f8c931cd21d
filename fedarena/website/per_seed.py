"""A submitted card held against the site's rerun seed by seed.

Every cell of a card (the clean accuracy; each setting's accuracy, spread across devices, worst 10% of devices and
attack success rate; each level's worst case and the worst 10% of devices under it; the worst attack success rate)
has one value per dataset and seed in the card's ``grid`` (``battery.spread.grid``). A rerun **reproduces** a
submitted card when every such value of the rerun lies within ``TOLERANCE`` (absolute) of the submitted card's value
of the same cell, dataset and seed. A cell the rerun measured but the submitted card gives no per-seed value of is
"absent from the submitted card"; one the submitted card gives but the rerun did not measure is "not measured by the
rerun"; either keeps the card from being reproduced.

Why 0.01: RobustBench recomputes a submission's clean accuracy and accepts agreement to two decimals. A rerun of
the same source, seed and battery on another CPU differs in float32 rounding (vectorised reductions, another BLAS
kernel); once the battery's rules break ties by index rather than by rounding (Krum, multi-Krum and Bulyan's
selection, Neurotoxin's top-k: issue 69), that rounding flips at most a few test predictions of a setting, a few
thousandths of accuracy on the battery's test sets, well inside 0.01. A defense that truly differs moves its cells by
more. The between-seed 95% interval stays on the page as a cell's uncertainty: it is not the test, for it grows with
the seeds' scatter (three seeds of .42, .50 and .58 would pass any claim up to .699) and is a point with one seed.
"""

from __future__ import annotations

import math

from fedarena.battery.card import Card
from fedarena.battery.spread import METRICS

TOLERANCE = 0.01  # absolute, on each seed's value of each cell (see the module's docstring)
SLACK = 1e-9  # a difference of exactly the tolerance passes, whatever its float rounding
WORST = (("acc", "acc_pooled"), ("acc_worst10", "acc_worst10"))  # a worst case's cells and the metrics they are

Key = tuple[str, str, int]  # (cell, dataset, seed)


def differing_cells(submitted: dict, measured: Card, tolerance: float = TOLERANCE) -> list[dict]:
    """Each (cell, dataset, seed) where the submitted card and the rerun are not within ``tolerance``:
    {cell, dataset, seed, submitted, measured, interval (the rerun's between-seed 95% interval of the cell), why}."""
    given, ours = seed_values(submitted), seed_values(measured.to_json())
    out = []
    for key in sorted(set(given) | set(ours)):
        theirs, mine = given.get(key), ours.get(key)
        if theirs is None and mine is None:
            continue
        if theirs is not None and mine is not None and abs(theirs - mine) <= tolerance + SLACK:
            continue
        why = ("not measured by the rerun" if mine is None else "absent from the submitted card" if theirs is None
               else f"differs from the rerun by more than {tolerance:g}")
        cell, dataset, seed = key
        out.append({"cell": cell, "dataset": dataset, "seed": seed, "submitted": theirs, "measured": mine,
                    "interval": _interval(measured, cell), "why": why})
    return out


def seed_values(card: dict) -> dict[Key, float | None]:
    """(cell, dataset, seed) -> the value of every cell a card (as JSON: a submitted one is untrusted data) gives per
    seed; a part of the wrong shape gives nothing."""
    grid = _settings_grid(card)
    out: dict[Key, float | None] = {}
    for setting, metrics in grid.items():
        for metric, values in metrics.items():
            out.update({(_cell(setting, metric), d, s): v for (d, s), v in values.items()})
    for level, worst in _mapping(card.get("worst")).items():
        setting = _setting_of(_mapping(worst).get("attack"), level)
        for shown, metric in WORST:
            values = grid.get(setting, {}).get(metric, {})
            out.update({(f"worst@{level} {shown}", d, s): v for (d, s), v in values.items()})
    attack, _, level = str(_mapping(card.get("worst_asr")).get("attack", "")).partition("@")
    values = grid.get(_setting_of(attack, level), {}).get("asr_pooled", {})
    out.update({("worst_asr", d, s): v for (d, s), v in values.items()})
    return out


def _settings_grid(card: dict) -> dict[str, dict[str, dict[tuple[str, int], float | None]]]:
    """setting -> metric -> (dataset, seed) -> value, from a card's grid."""
    out: dict = {}
    for entry in card.get("grid") if isinstance(card.get("grid"), list) else []:
        entry = _mapping(entry)
        setting, dataset, seeds = entry.get("setting"), entry.get("dataset"), entry.get("seeds")
        if not isinstance(setting, str) or not isinstance(dataset, str) or not isinstance(seeds, list):
            continue
        for metric in METRICS:
            values = entry.get(metric)
            if not isinstance(values, list) or len(values) != len(seeds):
                continue  # no per-seed values of this metric: its cells are absent
            for seed, value in zip(seeds, values, strict=True):
                if isinstance(seed, int) and not isinstance(seed, bool):
                    out.setdefault(setting, {}).setdefault(metric, {})[(dataset, seed)] = _number(value)
    return out


def _cell(setting: str, metric: str) -> str:
    return "clean_acc" if (setting, metric) == ("clean", "acc_pooled") else f"{setting} {metric}"


def _setting_of(attack, level) -> str:
    """The setting key ``attack@level`` (``battery.spread.setting_key``), or '' where either is not one."""
    try:
        return f"{attack}@{float(level):g}" if isinstance(attack, str) and attack else ""
    except (TypeError, ValueError):
        return ""


def _interval(card: Card, cell: str) -> list[float] | None:
    """The rerun's between-seed 95% interval of a cell (its uncertainty, shown beside it)."""
    if cell == "clean_acc":
        return card.intervals.get("clean", {}).get("acc_pooled")
    if cell == "worst_asr":
        return card.intervals.get(card.worst_asr.get("attack", ""), {}).get("asr_pooled")
    head, _, shown = cell.rpartition(" ")
    if head.startswith("worst@"):
        level = head.removeprefix("worst@")
        setting = _setting_of(card.worst.get(level, {}).get("attack"), level)
        return card.intervals.get(setting, {}).get(dict(WORST).get(shown, ""))
    return card.intervals.get(head, {}).get(shown)


def _mapping(value) -> dict:
    """A part of a submitted card as a mapping (anything else in its place: nothing submitted there)."""
    return value if isinstance(value, dict) else {}


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer past float's range
        return None
    return number if math.isfinite(number) else None
