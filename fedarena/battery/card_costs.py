"""What each side pays, on a card: the defense's server step and a device's bytes per round, and per setting what
the attacker's work beyond honest training costs against the row (``simulation.work``, logged as ``cost_*``).

The aggregated cells keep no ``cost_*`` column (``leaderboards.cells.aggregate`` averages the registered metrics
only), so the card reads them from its runs. Each number is the mean over the runs that recorded it; a run made
before these metrics existed has none and counts for nothing (never as a 0): where no run recorded a number the
card has no such entry, and a card whose runs recorded none has no costs at all.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fedarena.battery.spread import setting_key
from fedarena.simulation.costs import COST_PREFIX

DEFENSE = ("server_ms", "bytes_sent", "bytes_received")  # per round (bytes: one drawn device's)
ATTACKER = ("attack_ms", "attack_forward", "attack_backward")  # ms per round; model passes in the whole run


def card_costs(runs: pd.DataFrame) -> dict:
    """A row's costs from its runs: ``server_ms``, ``bytes_sent``, ``bytes_received`` (means over the runs),
    ``attacks`` ("attack@level" -> ``attack_ms``, ``attack_forward``, ``attack_backward``: means over the setting's
    datasets and seeds; the clean setting has no attacker), and ``runs`` / ``recorded_runs`` (the card's runs, and
    how many of them recorded any cost); {} where none did."""
    recorded = _recorded(runs)
    if recorded.empty:
        return {}
    out: dict = _means(recorded, DEFENSE)
    attacks = {}
    for (attack, level), group in recorded[recorded["attack_label"] != "clean"].groupby(["attack_label", "level"],
                                                                                        sort=True):
        means = _means(group, ATTACKER)
        if means:
            attacks[setting_key(str(attack), float(level))] = means
    if attacks:
        out["attacks"] = attacks
    out.update(runs=len(runs), recorded_runs=len(recorded))
    return out


def _recorded(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs with at least one finite cost of either side."""
    columns = [COST_PREFIX + name for name in (*DEFENSE, *ATTACKER) if COST_PREFIX + name in runs]
    if runs.empty or not columns:
        return runs.iloc[:0]
    values = runs[columns].apply(pd.to_numeric, errors="coerce").to_numpy(dtype=float)
    return runs[np.isfinite(values).any(axis=1)]


def _means(runs: pd.DataFrame, names: tuple[str, ...]) -> dict[str, float]:
    """Each cost's mean over the runs with a finite value of it (a cost no run recorded is left out)."""
    out = {}
    for name in names:
        column = COST_PREFIX + name
        if column not in runs:
            continue
        values = pd.to_numeric(runs[column], errors="coerce").to_numpy(dtype=float)
        values = values[np.isfinite(values)]
        if len(values):
            out[name] = float(values.mean())
    return out


NOT_RECORDED = "not recorded by these runs (made before fedarena logged what each side pays)"


def size_text(value: float | None) -> str:
    """Bytes for a reader: ``512 B``, ``3.9 KiB (4,000 B)`` (– where not recorded)."""
    if value is None:
        return "–"
    exact = f"{value:,.0f} B"
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale:
            return f"{value / scale:.1f} {unit} ({exact})"
    return exact


def ms_text(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f} ms"


def passes_text(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f}"


def costs_text(costs: dict) -> list[str]:
    """The costs as markdown lines (``card.md``)."""
    if not costs:
        return [f"Costs: {NOT_RECORDED}."]
    lines = [f"Costs per round (means over {costs.get('recorded_runs', '?')} of {costs.get('runs', '?')} runs): "
             f"server step {ms_text(costs.get('server_ms'))}; a drawn device sends "
             f"{size_text(costs.get('bytes_sent'))} and receives {size_text(costs.get('bytes_received'))}."]
    attacks = costs.get("attacks", {})
    if attacks:
        lines += ["", "| setting | attacker ms per round | forward passes per run | backward passes per run |",
                  "|:---|:---:|:---:|:---:|"]
        lines += [f"| {setting} | {ms_text(c.get('attack_ms'))} | {passes_text(c.get('attack_forward'))} | "
                  f"{passes_text(c.get('attack_backward'))} |" for setting, c in attacks.items()]
    return lines
