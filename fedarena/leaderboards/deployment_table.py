"""The deployment table: how each row's robustness moves from the synchronous lab to a real deployment.

Written for a suite with a deployment axis (``suites.deployment``): per dataset, a block ``worst@20%`` (each row's
lowest mean benign accuracy over the attacks at that level, clean not counted, the attack that reached it in
brackets: ``worst``; where one attack ran there, its accuracy) and a block ``clean`` (its accuracy without
attackers, the reference the worst case falls from), one column per deployment in the suite's order. The worst case leaves clean out because clean is no attack: a
deployment that hurts every run equally shows in both blocks, one that helps the attackers in the first only.

A grid point the suite excluded (``suites.grid.Excluded``, found by expanding the suite again) shows why: a cell the
deployment makes undefined reads ``undefined: <the rule's requirement>``; a cell that is the same trial as another
deployment's (a declared f equal to the trial's own: f = 0 without attackers) shows that deployment's numbers with
``(= synchronous)``. The facts of each deployment (its system section, its declared f) come from its runs
(``deployment_facts``) and are listed under the table.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fedarena.errors import ConfigError
from fedarena.leaderboards.cells import POSITION, select_scale, without_costs
from fedarena.leaderboards.tables import MISSING, WORST, Table, pivot, setting_label, sort_key
from fedarena.leaderboards.worst import worst_cells
from fedarena.registry import UnknownNameError
from fedarena.suites.deployment import F_DECLARED_TAG
from fedarena.suites.grid import expand_grid
from fedarena.suites.parse import load_suite
from fedarena.suites.spec import SYNCHRONOUS

NAME = "deployment"
UNDEFINED = "undefined"
FACTS = ("system_name", "failure_rate", "stragglers", "straggler_policy", "buffer", "f_declared")
EXCLUDED_COLUMNS = (*POSITION, "reason", "same_as")


def deployment_facts(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per deployment label: its system section's name, failure rate, stragglers and their policy, buffer
    (asynchronous) and declared f ('' for the trial's own), from its first run's params and tags."""
    rows = []
    for deployment, part in runs.groupby("deployment_label", sort=False) if "deployment_label" in runs else ():
        first = part.iloc[0]
        rows.append({"deployment_label": deployment,
                     "system_name": _text(first, "system.name", SYNCHRONOUS),
                     "failure_rate": _number(first, "system.failure_rate", 0.0),
                     "stragglers": _number(first, "system.stragglers", 0.0),
                     "straggler_policy": _text(first, "system.straggler_policy", "drop"),
                     "buffer": _number(first, "system.buffer", np.nan),
                     "f_declared": _text(first, F_DECLARED_TAG, "")})
    return pd.DataFrame(rows, columns=["deployment_label", *FACTS])


def _text(row: pd.Series, key: str, default: str) -> str:
    value = row.get(key)
    return default if value is None or (isinstance(value, float) and np.isnan(value)) else str(value)


def _number(row: pd.Series, key: str, default: float) -> float:
    value = pd.to_numeric(pd.Series([row.get(key)]), errors="coerce").iloc[0]
    return default if pd.isna(value) else float(value)


def grid_exclusions(suite: str, runs: pd.DataFrame, scale: str | None = None) -> pd.DataFrame:
    """The grid points the suite's deployment entries exclude at the scale tabulated, one row per position (seeds
    merged) with its reason and ``same_as``; empty where the runs have no deployment axis or the suite is not one
    this process can load (a file the store's runs do not point to)."""
    if "deployment_label" not in runs or runs["deployment_label"].dropna().eq(SYNCHRONOUS).all():
        return pd.DataFrame(columns=EXCLUDED_COLUMNS)
    chosen = select_scale(runs, scale)[1]
    try:
        loaded = load_suite(suite)
        points = expand_grid(loaded, chosen).excluded if chosen in loaded.scales else []
    except (ConfigError, UnknownNameError):
        return pd.DataFrame(columns=EXCLUDED_COLUMNS)
    return excluded_frame([vars(point) for point in points])


def excluded_frame(points: list[dict]) -> pd.DataFrame:
    """Excluded grid points (``Excluded`` as dicts) as one row per position: the first seed's reason."""
    frame = pd.DataFrame(points, columns=[*EXCLUDED_COLUMNS, "seed"])
    frame["level"] = pd.to_numeric(frame["level"]).astype(float).round(6)
    return frame.drop_duplicates(list(POSITION))[list(EXCLUDED_COLUMNS)].reset_index(drop=True)


def with_borrowed(cells: pd.DataFrame, excluded: pd.DataFrame) -> pd.DataFrame:
    """The cells plus, for every position excluded as the same trial as another deployment's, that cell under the
    excluded deployment's label with ``borrowed`` naming where it comes from."""
    out = cells.assign(borrowed="")
    copies = []
    for point in excluded[excluded["same_as"].astype(bool)].itertuples(index=False):
        at = np.ones(len(cells), dtype=bool)
        for key in POSITION:
            at &= (cells[key] == (point.same_as if key == "deployment_label" else getattr(point, key))).to_numpy()
        copies += [{**row, "deployment_label": point.deployment_label, "borrowed": point.same_as}
                   for row in out[at].to_dict("records")]
    return pd.concat([out, pd.DataFrame(copies, columns=out.columns)], ignore_index=True) if copies else out


def under_attack(cells: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Each row's worst case over the attacks at each level (``worst.worst_cells``; a level where one attack ran:
    that attack's cells), as cells whose ``attack_label`` is ``WORST`` and ``worst_attack`` the attack; and the
    notes naming the attacks each worst case covers."""
    worst, notes = worst_cells(cells)
    attacked = cells[(cells["attack_label"] != "clean") & (cells["attack_label"] != WORST)]
    attacks = attacked.groupby(["dataset_label", "level"])["attack_label"].transform("nunique")
    single = attacked[attacks == 1]
    single = single.assign(worst_attack=single["attack_label"], attack_label=WORST)
    return pd.concat([worst, single], ignore_index=True) if len(single) else worst, notes


def cell_text(row) -> tuple[str, float]:
    """(text, score) of one shown cell: mean ± CI, the worst case's attack, where it is borrowed from."""
    if row.mixed:
        return "mixed", np.nan
    ci = getattr(row, "acc_pooled_ci", np.nan)
    text = _fraction(row.acc_pooled) + (f"±{_fraction(ci)}" if np.isfinite(ci) else "")
    if row.attack_label == WORST:
        text += f" [{row.worst_attack}]"
    if row.borrowed:
        text += f" (= {row.borrowed})"
    return text + ("†" if row.diverged else ""), float(row.acc_pooled)


def _fraction(x: float) -> str:
    if not np.isfinite(x):
        return MISSING
    text = f"{x:.3f}"
    return text[1:] if text.startswith("0.") else text


def undefined_rows(excluded: pd.DataFrame, shown: pd.DataFrame) -> pd.DataFrame:
    """Display rows of the positions a deployment makes undefined: under attack (a worst-case column where every
    attack there is undefined) and clean."""
    undefined = excluded[~excluded["same_as"].astype(bool)]
    rows = []
    keys = ["dataset_label", "method_label", "privacy_label", "deployment_label", "level"]
    for key, part in undefined.groupby(keys, sort=False):
        base = dict(zip(keys, key, strict=True))
        attacked = part[part["attack_label"] != "clean"]
        ran = shown[(shown["attack_label"] == WORST) & _at(shown, base)]
        if len(attacked) and ran.empty:
            rows.append({**base, "attack_label": WORST, "reason": attacked["reason"].iloc[0]})
        for reason in part.loc[part["attack_label"] == "clean", "reason"]:
            rows.append({**base, "attack_label": "clean", "level": 0.0, "reason": reason})
    frame = pd.DataFrame(rows, columns=[*keys, "attack_label", "reason"])
    return frame.assign(text=[f"{UNDEFINED}: {r}" for r in frame["reason"]], score=np.nan)


def _at(frame: pd.DataFrame, labels: dict) -> np.ndarray:
    inside = np.ones(len(frame), dtype=bool)
    for key, value in labels.items():
        inside &= (frame[key] == value).to_numpy()
    return inside


def deployment_table(cells: pd.DataFrame, excluded: pd.DataFrame | None = None,
                     facts: pd.DataFrame | None = None) -> Table | None:
    """The deployment table of aggregated cells (``cells.aggregate``), or None without a deployment axis."""
    excluded = excluded if excluded is not None else pd.DataFrame(columns=EXCLUDED_COLUMNS)
    if "deployment_label" not in cells or (cells["deployment_label"].nunique() < 2 and excluded.empty):
        return None
    cells = with_borrowed(cells, excluded)
    worst, worst_notes = under_attack(cells)
    shown = pd.concat([worst.assign(borrowed=worst["borrowed"].fillna("")),
                       cells[cells["attack_label"] == "clean"].assign(worst_attack="")], ignore_index=True)
    texts = [cell_text(row) for row in shown.itertuples(index=False)]
    shown = shown.assign(text=[t for t, _ in texts], score=[s for _, s in texts])
    frame = pd.concat([shown, undefined_rows(excluded, shown)], ignore_index=True)
    blocks_by = ("dataset_label", "privacy_label", "attack_label", "level")
    blocks = pivot(frame, row_key="method_label", column_by=("deployment_label",), block_by=blocks_by)
    for (dataset, privacy, attack, level), block in blocks:
        private = f" {privacy}" if privacy != "none" else ""
        block.title = f"{dataset}{private} {setting_label(attack, level)}"
    notes = table_notes(frame, facts) + worst_notes
    tidy = without_costs(frame.drop(columns=["text", "score"])).sort_values(
        list(blocks_by), key=lambda c: c.map(lambda v: sort_key(c.name, v)), kind="stable")
    return Table(NAME, "Deployment under attack: worst-case and clean benign accuracy per deployment",
                 [block for _, block in blocks], notes, tidy.reset_index(drop=True))


def table_notes(frame: pd.DataFrame, facts: pd.DataFrame | None) -> list[str]:
    """What a cell says and what each deployment is."""
    notes = ["Each cell: the mean benign test accuracy over seeds ± the half-width of its 95% confidence interval; "
             "worst@L: each row's lowest over the attacks at level L (in brackets: the attack), clean not counted; "
             "clean: without attackers. Bold: the highest in each column."]
    if frame["text"].str.contains(r"\(= ", regex=True).any():
        notes.append("(= d): the same trial as deployment d's (a declared f equal to the trial's own; without "
                     "attackers f is 0, and so are half and double of it): its numbers.")
    if frame["text"].str.startswith(f"{UNDEFINED}:").any():
        notes.append(f"{UNDEFINED}: the deployment makes the row's rule undefined there (its requirement on the "
                     f"devices that report and the f it assumes); no trial ran.")
    for row in (facts.itertuples(index=False) if facts is not None else ()):
        notes.append(f"{row.deployment_label}: {describe(row)}.")
    return notes


def describe(row) -> str:
    """A deployment in words, from its facts."""
    if row.system_name == "asynchronous":
        arrivals = f" of the first {row.buffer:g} arrivals" if np.isfinite(row.buffer) else ""
        what = f"asynchronous buffered aggregation (FedBuff){arrivals}"
    else:
        parts = [f"failure rate {row.failure_rate:g}"] if row.failure_rate else []
        if row.stragglers:
            kept = "included" if row.straggler_policy == "include" else "dropped"
            parts.append(f"{row.stragglers:g} stragglers, their partial work {kept}")
        what = "synchronous, " + ", ".join(parts) if parts else "synchronous rounds, every drawn device reports"
    declared = {"half": "half the f the trial assumes", "double": "twice the f the trial assumes"}
    return what + (f"; the server declares {declared[row.f_declared]}" if row.f_declared in declared else "")
