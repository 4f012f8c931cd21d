"""The worst case over attacks: per table row, the attack at one level that hurt it most.

A defense shown only against attacks that ignore it looks stronger than it is. Wherever at least two attacks
(clean not counted) ran at one level on one dataset, every row gets a ``worst@<level>`` cell: the attack with
the lowest mean benign accuracy (``acc_pooled``) over seeds among those the row ran there (ties: the first
in attack order), and that attack's cell as it is (mean, CI, std across devices, seeds). The cell is
therefore a column like the others: bold and the significance test use the worst attack's per-seed scores.
A row that ran a single attack at that level gets no worst-case cell; one whose attack cell there is
``mixed`` gets a mixed worst case (the minimum is unknown).

The worst-case cells are cells of the aggregated frame with ``attack_label`` :data:`WORST` (no suite label
can contain a space) and ``worst_attack`` naming the attack.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fedarena.leaderboards.tables import WORST, label, setting_label, sort_key

EXPLAINED = ("worst@L: per row, the lowest mean benign accuracy over the attacks run at level L (in brackets: "
             "the attack); its ±, seeds, bold and significance are that attack's cell's.")


def attacks_at(cells: pd.DataFrame) -> dict[tuple[str, float], list[str]]:
    """(dataset, level) -> the attacks (clean not counted) run there, in attack order, where there are two
    or more."""
    attacked = cells[(cells["attack_label"] != "clean") & (cells["attack_label"] != WORST)]
    out = {}
    for (dataset, level), part in attacked.groupby(["dataset_label", "level"], sort=True):
        names = sorted(set(part["attack_label"].astype(str)), key=lambda a: sort_key("attack_label", a))
        if len(names) >= 2:
            out[(dataset, float(level))] = names
    return out


def worst_row(candidates: pd.DataFrame) -> dict | None:
    """The worst-case cell of one row at one level from its attack cells (two or more); None when no cell
    has an accuracy."""
    mixed = candidates[candidates["mixed"]]
    usable = candidates[~candidates["mixed"] & np.isfinite(candidates["acc_pooled"])]
    if len(mixed):
        pick = mixed.iloc[0].to_dict()
        note = f"{pick['note']} (under {label('attack_label', pick['attack_label'])})"
        return {**pick, "note": note, "worst_attack": pick["attack_label"], "attack_label": WORST}
    if usable.empty:
        return None
    ranked = sorted(usable.itertuples(index=True),
                    key=lambda r: (r.acc_pooled, sort_key("attack_label", r.attack_label)))
    pick = usable.loc[ranked[0].Index].to_dict()
    return {**pick, "worst_attack": pick["attack_label"], "attack_label": WORST}


def worst_cells(cells: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """(the worst-case cells of every row at every (dataset, level) with two or more attacks, notes naming
    the attacks each column covers and the rows that ran fewer of them)."""
    rows, notes = [], []
    for (dataset, level), names in attacks_at(cells).items():
        where = setting_label(WORST, level)
        notes.append(f"{where} on {dataset}: over {', '.join(label('attack_label', a) for a in names)}.")
        at = (cells["dataset_label"] == dataset) & (cells["level"] == level)
        here = cells[at & cells["attack_label"].isin(names)]
        axes = [key for key in ("method_label", "privacy_label", "deployment_label") if key in here]
        for key, part in here.groupby(axes, sort=False):
            ran = [a for a in names if a in set(part["attack_label"])]
            if len(ran) >= 2 and (row := worst_row(part)) is not None:
                rows.append(row)
            if len(ran) < len(names):
                notes.append(coverage_note(where, dataset, row_text(dict(zip(axes, key, strict=True))), ran, names))
    if not rows:
        return cells.iloc[0:0].assign(worst_attack=pd.Series(dtype=str)), []
    return pd.DataFrame(rows, columns=[*cells.columns, "worst_attack"]), [EXPLAINED, *notes]


def row_text(labels: dict[str, str]) -> str:
    """A row as a note names it: the method, with its privacy and deployment labels where not the defaults."""
    others = [str(labels[k]) for k, default in (("privacy_label", "none"), ("deployment_label", "synchronous"))
              if labels.get(k, default) != default]
    return str(labels["method_label"]) + (f" ({', '.join(others)})" if others else "")


def coverage_note(where: str, dataset: str, method: str, ran: list[str], names: list[str]) -> str:
    """Which attacks a row's worst case covers when the row ran fewer than the column's."""
    shown = ", ".join(label("attack_label", a) for a in ran)
    missing = ", ".join(label("attack_label", a) for a in names if a not in ran)
    if len(ran) < 2:
        return f"{where} on {dataset}, {method}: only {shown} ran, no worst case (not run: {missing})."
    return f"{where} on {dataset}, {method}: over {shown} only (not run: {missing})."


def tag_worst(frame: pd.DataFrame) -> pd.DataFrame:
    """Display cells with the worst attack named after the worst-case text: ``.610±.020 (.10) [min_sum]``."""
    if "worst_attack" not in frame:
        return frame
    out = frame.copy()
    worst = out["attack_label"] == WORST
    tags = [f" [{label('attack_label', a)}]" for a in out.loc[worst, "worst_attack"]]
    out.loc[worst, "text"] = out.loc[worst, "text"] + tags
    return out
