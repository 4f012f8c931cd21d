"""The costs table: what each side pays, per row and setting, where a suite asks for it (its ``costs:`` key).

Every run logs what the defense and the attacker pay (``simulation.work``, ``cost_*``; docs/semantics.md,
"Deployment" -> "Costs"); the cells carry the mean over a cell's seeds of each (``cells.COST_COLUMNS``, over the
seeds that recorded it). A suite that lists ``costs: [server_ms, attack_ms, bytes_sent]`` gets the table ``costs``:
one row per method (in the suite's order), one column group per attack@level (clean first) with one sub-column per
cost asked, in the order the suite lists them; one block per dataset, and per privacy label and deployment where the
suite has several (a suite's deployment axis: one block per deployment, so that a block reads as the synchronous one
does and the blocks compare down the page). A cell whose runs did not record a cost (runs made before fedarena
logged it) shows the table's missing mark, never 0; a cell the suite excluded shows why, as the ``deployment``
table does (``undefined``, or another deployment's numbers with ``(= d)`` where it is the same trial).

A suite without ``costs:`` has no costs table, and the other tables' outputs never show the cost columns (their
tidy CSVs drop them: ``cells.without_costs``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fedarena.leaderboards.cells import POSITION, cost_column
from fedarena.leaderboards.deployment_table import EXCLUDED_COLUMNS, UNDEFINED, with_borrowed
from fedarena.leaderboards.tables import MISSING, Table, pivot, sort_key
from fedarena.suites.spec import COSTS

NAME = "costs"
# cost -> (its column heading, what it is: a note under the table)
HEADINGS = {
    "server_ms": ("server ms/round", "the method's server step with its rule and the rule's round inputs, ms per "
                                     "round the rule ran (a round skipped for too few reports is not counted: it costs "
                                     "the server nothing; – where the rule never ran)"),
    "attack_ms": ("attacker ms/round", "the attacker's work beyond honest training (its tampering, adaptation and "
                                       "per-round corruption), ms per round run, skipped ones included (the attacker "
                                       "adapts and corrupts before the server knows the round will be skipped)"),
    "attack_forward": ("attacker forward passes", "the model's forward passes in that work, per run"),
    "attack_backward": ("attacker backward passes", "the model's backward passes in that work, per run"),
    "bytes_sent": ("bytes sent/round", "what one drawn device sends per round"),
    "bytes_received": ("bytes received/round", "what one drawn device receives per round"),
}
assert set(HEADINGS) == set(COSTS)  # one heading per cost a suite may ask for


def cost_text(name: str, value: float) -> str:
    """One cost as shown: ms with two decimals (two significant digits below 0.1 ms), bytes in B/KiB/MiB, passes
    whole; the missing mark where not recorded."""
    if not np.isfinite(value):
        return MISSING
    if name.endswith("_ms"):
        return f"{value:.2f}" if value == 0 or value >= 0.1 else f"{value:.2g}"
    if name.startswith("bytes_"):
        for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
            if value >= scale:
                return f"{value / scale:.1f} {unit}"
        return f"{value:,.0f} B"
    return f"{value:,.0f}"


def costs_table(cells: pd.DataFrame, costs: tuple[str, ...], excluded: pd.DataFrame | None = None) -> Table | None:
    """The costs table of aggregated cells (``cells.aggregate``) for the costs a suite asks for; None where it asks
    for none (or there are no cells)."""
    if not costs or cells.empty:
        return None
    excluded = excluded if excluded is not None else pd.DataFrame(columns=EXCLUDED_COLUMNS)
    cells = with_borrowed(cells, excluded)
    headings = {name: HEADINGS[name][0] for name in costs}
    frame = pd.concat([_shown(cells, costs, headings), _undefined(excluded, costs, headings)], ignore_index=True)
    block_by = ("dataset_label", *(key for key in ("privacy_label", "deployment_label") if frame[key].nunique() >= 2))
    blocks = pivot(frame, row_key="method_label", column_by=("attack_label", "level", "cost"), block_by=block_by,
                   column_order={heading: i for i, heading in enumerate(headings.values())})
    for key, block in blocks:
        block.title = " ".join(str(v) for k, v in zip(block_by, key, strict=True) if k == "dataset_label" or v != "none")
    tidy = frame.drop(columns=["text", "score"]).assign(rank=frame["name"].map(costs.index))
    tidy = tidy.sort_values([*POSITION, "rank"], key=lambda c: c.map(lambda v: sort_key(c.name, v)), kind="stable")
    tidy = tidy.drop(columns="rank").rename(columns={"cost": "heading", "name": "cost"})  # cost: server_ms, ...
    if (tidy["deployment_label"] == "synchronous").all():
        tidy = tidy.drop(columns="deployment_label")
    return Table(NAME, "Costs: what the defense and the attacker pay, per row and setting (means over seeds)",
                 [block for _, block in blocks], table_notes(frame, costs), tidy.reset_index(drop=True))


def _shown(cells: pd.DataFrame, costs: tuple[str, ...], headings: dict[str, str]) -> pd.DataFrame:
    """One display row per cell and cost: its mean over the seeds, or the missing mark where not recorded."""
    rows = []
    for row in cells.to_dict("records"):
        for name in costs:
            value = float(pd.to_numeric(pd.Series([row.get(cost_column(name))]), errors="coerce").iloc[0])
            text = "mixed" if row["mixed"] else cost_text(name, value)
            if row.get("borrowed") and text != MISSING:
                text += f" (= {row['borrowed']})"
            rows.append({**{k: row[k] for k in POSITION}, "cost": headings[name], "name": name,
                         "value": np.nan if row["mixed"] else value, "n_seeds": row["n_seeds"],
                         "borrowed": row.get("borrowed", ""), "reason": "", "text": text, "score": np.nan})
    return pd.DataFrame(rows, columns=[*POSITION, "cost", "name", "value", "n_seeds", "borrowed", "reason", "text",
                                       "score"])


def _undefined(excluded: pd.DataFrame, costs: tuple[str, ...], headings: dict[str, str]) -> pd.DataFrame:
    """Display rows of the positions a deployment makes undefined (no trial ran): ``undefined`` in every cost."""
    undefined = excluded[~excluded["same_as"].astype(bool)]
    rows = [{**{k: getattr(point, k) for k in POSITION}, "cost": headings[name], "name": name, "value": np.nan,
             "n_seeds": 0, "borrowed": "", "reason": point.reason, "text": UNDEFINED, "score": np.nan}
            for point in undefined.itertuples(index=False) for name in costs]
    return pd.DataFrame(rows, columns=[*POSITION, "cost", "name", "value", "n_seeds", "borrowed", "reason", "text",
                                       "score"])


NOISY = ("server_ms",)  # a time whose spread over a row's attacked settings measures the timer's noise (not the
# attacker's: two attacks are two computations)


def noise_notes(frame: pd.DataFrame, costs: tuple[str, ...]) -> list[str]:
    """How far one row's time moves across the attacked settings of a block (the same rule on as many reports, of
    the same seeds' draws: the attack changes their values, hardly the work): the largest and the median ratio of
    its highest to its lowest mean, per time asked for. That spread is the timer's noise floor in this store (other
    processes' work in the same seconds, one slow round in a run's mean), not the rule's or the attack's cost."""
    notes = []
    shown = frame[(frame["attack_label"] != "clean") & ~frame["borrowed"].astype(bool)]
    keys = ["dataset_label", "privacy_label", "deployment_label", "method_label"]
    for name in (n for n in NOISY if n in costs):
        values = shown[shown["name"] == name].assign(value=lambda d: pd.to_numeric(d["value"], errors="coerce"))
        values = values[np.isfinite(values["value"]) & (values["value"] > 0)]
        spread = values.groupby(keys)["value"].agg(lambda v: v.max() / v.min() if len(v) >= 2 else np.nan).dropna()
        if len(spread):
            notes.append(f"Noise in {HEADINGS[name][0]}: one row's cells across the attacked settings of a block "
                         f"(the same rule on as many reports: the attack changes their values, hardly the work) "
                         f"differ by up to {spread.max():.1f}x, {spread.median():.1f}x in the median row: the timer "
                         f"reads other processes' work in the same seconds, and one slow round moves a run's mean. "
                         f"A difference smaller than that, between rows or deployments, is not the rule's cost; the "
                         f"attacker's times carry the same noise.")
    return notes


def table_notes(frame: pd.DataFrame, costs: tuple[str, ...]) -> list[str]:
    """What each column and mark means."""
    notes = ["Each cell: the mean over the cell's seeds that recorded it (cost_* of every run: docs/semantics.md, "
             "\"Deployment\", \"Costs\"); times are wall-clock on the machine that ran the trial (on a GPU, read "
             "after its queued kernels finish), so they compare within one store, not across machines."]
    notes += [f"{HEADINGS[name][0]}: {HEADINGS[name][1]}." for name in costs]
    if frame["deployment_label"].nunique() >= 2:
        notes.append("Confounders beside the costs of a deployment: a rule's time grows with the reports a round "
                     "aggregates (fewer under failures and dropped stragglers, K under a buffer) and with the f that "
                     "follows them (floor(f n / m)); how many rounds it ran of T is the deployment table's agg a/T.")
    notes += noise_notes(frame, costs)
    if frame["text"].eq(MISSING).any():
        notes.append(f"{MISSING}: not recorded by the cell's runs (made before fedarena logged what each side pays; "
                     f"server ms: a rule that skipped every round never ran).")
    if frame["text"].str.contains(r"\(= ", regex=True).any():
        notes.append("(= d): the same trial as deployment d's (a declared f equal to the trial's own): its numbers.")
    reasons = frame.loc[frame["text"] == UNDEFINED, ["method_label", "deployment_label", "reason"]].drop_duplicates()
    for row in reasons.itertuples(index=False):
        notes.append(f"{UNDEFINED} ({row.method_label}, {row.deployment_label}): {row.reason}; no trial ran.")
    return notes
