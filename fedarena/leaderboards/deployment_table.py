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
UNDERTRAINED = "undertrained"  # the mark of a cell whose rule aggregated fewer than half its rounds
FACTS = ("system_name", "failure_rate", "attackers_fail", "stragglers", "straggler_policy", "attackers_straggle",
         "buffer", "concurrency", "f_declared", "rounds", "clients_per_round", "clients")
EXCLUDED_COLUMNS = (*POSITION, "reason", "same_as")


def deployment_facts(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per deployment label and dataset: its system section's name, failure rate (and whether attackers fail
    too), stragglers, their policy (and whether attackers straggle too), buffer (asynchronous), declared f ('' for
    the trial's own), the rounds T a run of it has on the dataset, and the devices drawn a round (m) and in all (the
    trial's f is m x int(level x devices) // devices: ``f_notes``), from its first run's params and tags."""
    rows = []
    keys = [k for k in ("deployment_label", "dataset_label") if k in runs]
    for key, part in runs.groupby(keys, sort=False) if "deployment_label" in runs else ():
        first = part.iloc[0]
        rows.append({**dict(zip(keys, key if isinstance(key, tuple) else (key,), strict=True)),
                     "system_name": _text(first, "system.name", SYNCHRONOUS),
                     "failure_rate": _number(first, "system.failure_rate", 0.0),
                     "attackers_fail": _text(first, "system.attackers_fail", "False").lower() == "true",
                     "stragglers": _number(first, "system.stragglers", 0.0),
                     "straggler_policy": _text(first, "system.straggler_policy", "drop"),
                     "attackers_straggle": _text(first, "system.attackers_straggle", "False").lower() == "true",
                     "buffer": _number(first, "system.buffer", np.nan),
                     "concurrency": _number(first, "system.concurrency", np.nan),  # NaN: clients_per_round
                     "f_declared": _text(first, F_DECLARED_TAG, ""),
                     "rounds": _number(first, "rounds", np.nan),
                     "clients_per_round": _number(first, "clients_per_round", np.nan),
                     "clients": _number(first, "dataset.num_clients", np.nan)})
    return pd.DataFrame(rows, columns=["deployment_label", "dataset_label", *FACTS])


def with_rounds(cells: pd.DataFrame, facts: pd.DataFrame | None) -> pd.DataFrame:
    """The cells with ``rounds`` (T, the rounds a run has: its deployment's on its dataset; NaN where no run says)
    and ``rounds_aggregated`` (T less the mean rounds skipped; T where the runs record no skip: the lab's rounds, a
    declared f's, never skip)."""
    planned = pd.Series(np.nan, index=cells.index)
    if facts is not None and len(facts):
        lookup = facts.drop_duplicates(["deployment_label", "dataset_label"]).set_index(
            ["deployment_label", "dataset_label"])["rounds"]
        planned = pd.Series([lookup.get((d, s), np.nan) for d, s in zip(cells["deployment_label"],
                                                                        cells["dataset_label"], strict=True)],
                            index=cells.index, dtype=float)
    skipped = pd.to_numeric(cells.get("rounds_skipped", pd.Series(np.nan, index=cells.index)), errors="coerce")
    return cells.assign(rounds=planned, rounds_aggregated=planned - skipped.fillna(0.0))


def undertrained(row) -> bool:
    """Whether the cell's rule aggregated fewer than half its rounds (its model is nearly untrained: no robustness
    number)."""
    aggregated, planned = getattr(row, "rounds_aggregated", np.nan), getattr(row, "rounds", np.nan)
    return bool(np.isfinite(aggregated) and np.isfinite(planned) and aggregated < planned / 2)


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
    """(text, score) of one shown cell: mean ± CI, the worst case's attack, where it is borrowed from, and its
    confounders (``confounders``); an undertrained cell is marked and has no score (never bold)."""
    if row.mixed:
        return "mixed", np.nan
    ci = getattr(row, "acc_pooled_ci", np.nan)
    text = _fraction(row.acc_pooled) + (f"±{_fraction(ci)}" if np.isfinite(ci) else "")
    if row.attack_label == WORST:
        text += f" [{row.worst_attack}]"
    if row.borrowed:
        text += f" (= {row.borrowed})"
    text += ("†" if row.diverged else "") + f" ({confounders(row)})"
    if undertrained(row):
        return f"{text} {UNDERTRAINED}", np.nan
    return text, float(row.acc_pooled)


def confounders(row) -> str:
    """'agg a/T, att s': the rounds the rule aggregated of T (mean over seeds) and the attackers' share of the
    reports it aggregated; a run that records neither (every drawn device reports: the lab, a declared f) aggregated
    T of T, its attackers' share as drawn (none in a clean cell)."""
    planned, aggregated = getattr(row, "rounds", np.nan), getattr(row, "rounds_aggregated", np.nan)
    rounds = f"{_count(aggregated)}/{_count(planned)}" if np.isfinite(planned) else MISSING
    share = getattr(row, "attacker_share", np.nan)
    clean = row.attack_label == "clean"
    if np.isfinite(share):
        shown = f"{100 * share:.0f}%"
    elif clean:
        shown = "0%"
    else:
        recorded = np.isfinite(getattr(row, "rounds_skipped", np.nan))  # skipped all its rounds: no report shared
        shown = MISSING if recorded else "as drawn"
    return f"agg {rounds}, att {shown}"


def _count(x: float) -> str:
    """A mean count of rounds: whole where it is, else one decimal."""
    return f"{x:.0f}" if float(x).is_integer() else f"{x:.1f}"


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
    cells = with_rounds(with_borrowed(cells, excluded), facts)
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
    notes = (table_notes(frame, facts) + same_rows_notes([block for _, block in blocks])
             + same_columns_notes(blocks, facts) + few_reports_notes(frame) + few_honest_notes(frame)
             + f_notes(frame, facts) + worst_notes)
    tidy = without_costs(frame.drop(columns=["text", "score"])).assign(
        undertrained=[undertrained(row) for row in frame.itertuples(index=False)]).sort_values(
        list(blocks_by), key=lambda c: c.map(lambda v: sort_key(c.name, v)), kind="stable")
    return Table(NAME, "Deployment under attack: worst-case and clean benign accuracy per deployment",
                 [block for _, block in blocks], notes, tidy.reset_index(drop=True))


def table_notes(frame: pd.DataFrame, facts: pd.DataFrame | None) -> list[str]:
    """What a cell measures, the confounders beside it, and what each deployment is."""
    notes = ["Each cell: the mean benign test accuracy over seeds ± the half-width of its 95% confidence interval; "
             "worst@L: each row's lowest over the attacks at level L (in brackets: the attack), clean not counted; "
             "clean: without attackers. Bold: the highest in each column, among the cells that are not undertrained.",
             "Beside each accuracy, its confounders: (agg a/T, att s): the rule aggregated a of the T rounds (mean "
             "over seeds; a round whose reports are too few for the rule is skipped and the model stays) and the "
             "attackers' share s of the reports it aggregated (skipped rounds not counted). Where every drawn device "
             "reports (synchronous, a declared f) no round is skipped: T of T, the attackers' share as drawn. A "
             "share above the attack's level says the deployment let more attackers in (they stay online), not that "
             "the rule is weaker: compare the _all column, where attackers fail or straggle alike. There the rule "
             "also meets more attackers than its f, which follows the reports as if attackers dropped out like "
             "honest devices (next notes).",
             f"{UNDERTRAINED}: the rule aggregated fewer than half its rounds, so the accuracy is a nearly untrained "
             f"model's, not a robustness number (never bold).",
             "f follows the reports: a rule (and an attack that reads the server's f) that aggregates n reports of a "
             "round of m drawn devices gets floor(f n / m), f the trial's (declared) f; a round where even that "
             "rule is undefined is skipped. Rounded down, it is 0 in a round of n < m / f reports, attackers or not: "
             "there a rule that reads f runs as its f = 0 form (the trimmed mean is the mean; Krum and NNM assume no "
             "attacker). ALIE's z reads the round's reports and the attackers among them, not the server's f."]
    if frame["text"].str.contains(r"\(= ", regex=True).any():
        notes.append("(= d): the same trial as deployment d's (a declared f equal to the trial's own; without "
                     "attackers f is 0, and so are half and double of it): its numbers.")
    if frame["text"].str.startswith(f"{UNDEFINED}:").any():
        notes.append(f"{UNDEFINED}: the deployment makes the row's rule undefined there (its requirement on the "
                     f"devices that report and the f it assumes); no trial ran.")
    described = facts.drop_duplicates("deployment_label") if facts is not None else pd.DataFrame()
    for row in described.itertuples(index=False):
        notes.append(f"{row.deployment_label}: {describe(row)}.")
    return notes


def same_rows_notes(blocks: list) -> list[str]:
    """A note for every pair of rows whose cells are the same in every column of a block where both have one (two
    or more columns): the reader should not take them for two results."""
    notes = []
    for block in blocks:
        for i, one in enumerate(block.rows):
            for other in block.rows[i + 1:]:
                shared = [(a.text, b.text) for a, b in zip(one[1:], other[1:], strict=True)
                          if MISSING not in (a.text, b.text)]
                if len(shared) >= 2 and all(a == b for a, b in shared):
                    notes.append(f"{block.title}: {one[0].text}, {other[0].text} have the same cells in every column, "
                                 f"one computation under two names there (with f = 0, as without attackers, a rule "
                                 f"that trims or mixes f rows is the mean).")
    return notes


def same_columns_notes(blocks: list, facts: pd.DataFrame | None) -> list[str]:
    """A note for every pair of columns whose cells are the same in every row of a block where both have one (two or
    more rows): one computation shown twice, not two results (a control whose attackers fail or straggle alike, in
    a block without attackers, is its deployment itself)."""
    notes = []
    for key, block in blocks:
        columns = list(zip(*[[cell.text for cell in row[1:]] for row in block.rows], strict=True))
        names = block.header[1:]
        for i, one in enumerate(columns):
            for j in range(i + 1, len(columns)):
                # the accuracies, worst attacks and marks (their confounders aside: a run that records no share
                # reads "as drawn"); a borrowed cell already says whose trial it is
                shared = [(_measured(a), _measured(b)) for a, b in zip(one, columns[j], strict=True)
                          if MISSING not in (a, b) and "(= " not in a + b]
                if len(shared) >= 2 and all(a == b for a, b in shared):
                    why = ("without attackers, attackers failing or straggling alike changes nothing"
                           if key[2] == "clean" and _controls(facts, names[i], names[j]) else "the same numbers")
                    notes.append(f"{block.title}: {names[i]}, {names[j]} have the same cells in every row ({why}): "
                                 f"one computation shown twice, not two results that agree.")
    return notes


def _measured(text: str) -> str:
    """A cell's text without its confounders ``(agg a/T, att s)``: what it measured."""
    return text.split(" (agg ")[0]


def _controls(facts: pd.DataFrame | None, one: str, other: str) -> bool:
    """Whether deployments ``one`` and ``other`` differ only in whether attackers fail or straggle alike."""
    if facts is None or facts.empty:
        return False
    found = facts.drop_duplicates("deployment_label").set_index("deployment_label")
    if one not in found.index or other not in found.index:
        return False
    alike = [k for k in FACTS if k not in ("attackers_fail", "attackers_straggle")]
    a, b = found.loc[one, alike], found.loc[other, alike]
    return bool(all(x == y or (pd.isna(x) and pd.isna(y)) for x, y in zip(a, b, strict=True)))


FEW_REPORTS = 3  # fewer reports a round than this on average: the rules can hardly differ (one report: the same)


def few_reports_notes(frame: pd.DataFrame) -> list[str]:
    """A note for every deployment and setting whose cells aggregated fewer than ``FEW_REPORTS`` reports a round on
    average (``reports_mean``): there every rule returns (nearly) the reports as they are, so its rows agree."""
    if "reports_mean" not in frame:
        return []
    reports = pd.to_numeric(frame["reports_mean"], errors="coerce")
    few = frame[reports < FEW_REPORTS].assign(reports=reports)
    notes = []
    for (deployment, attack, level), part in few.groupby(["deployment_label", "attack_label", "level"], sort=False):
        notes.append(f"{deployment}, {setting_label(attack, level)}: the rules aggregated {part['reports'].min():.1f}"
                     f" to {part['reports'].max():.1f} reports a round on average; with one report every rule "
                     f"returns it, so rows agree there without one rule becoming another.")
    return notes


FEW_HONEST = 2  # fewer honest reports a round than this on average: their spread is (nearly) nothing to craft from


def few_honest_notes(frame: pd.DataFrame) -> list[str]:
    """A note for every deployment and worst case whose attacked cells met fewer than ``FEW_HONEST`` honest reports a
    round on average (``reports_mean`` x (1 - ``attacker_share``)): an attack that crafts its update from the honest
    updates' spread has no spread to measure with one honest update, and its update is the honest one."""
    if not {"reports_mean", "attacker_share"} <= set(frame):
        return []
    honest = (pd.to_numeric(frame["reports_mean"], errors="coerce")
              * (1 - pd.to_numeric(frame["attacker_share"], errors="coerce")))
    few = frame[(honest < FEW_HONEST) & (frame["attack_label"] != "clean")].assign(honest=honest)
    notes = []
    for (deployment, attack, level), part in few.groupby(["deployment_label", "attack_label", "level"], sort=False):
        notes.append(f"{deployment}, {setting_label(attack, level)}: the rounds the rules aggregated held "
                     f"{part['honest'].min():.1f} to {part['honest'].max():.1f} honest reports on average (an "
                     f"attacker's round: at most that); an attack that crafts its update "
                     f"from the honest updates' spread (ALIE, Min-Max) measures no spread in one and sends the honest "
                     f"update itself: a high accuracy there is the attack void, not beaten (and rows agree).")
    return notes


def trial_f(level: float, per_round: float, devices: float) -> float:
    """The f a trial assumes at a corruption level (``aggregators.builder.expected_malicious``): m x int(level x
    devices) // devices; NaN where the runs do not say m or the devices."""
    if not (np.isfinite(per_round) and np.isfinite(devices) and devices >= 1):
        return np.nan
    return float(int(per_round) * int(level * devices + 1e-9) // int(devices))


def f_notes(frame: pd.DataFrame, facts: pd.DataFrame | None) -> list[str]:
    """A note for every deployment and worst case (the trial's own f, attackers among the reports) whose mean round
    gives the rule f = floor(f n / m) = 0 (``Participation.rule_for``, n the mean reports): there a rule that reads f
    runs as its f = 0 form, not as the rule the trial declared, while attackers are among the reports."""
    if facts is None or facts.empty or not {"reports_mean", "attacker_share"} <= set(frame):
        return []
    found = facts.drop_duplicates(["deployment_label", "dataset_label"]).set_index(["deployment_label",
                                                                                     "dataset_label"])
    rows = []
    for row in frame[frame["attack_label"] != "clean"].itertuples(index=False):
        at = (row.deployment_label, row.dataset_label)
        n, share = float(pd.to_numeric(row.reports_mean, errors="coerce")), float(
            pd.to_numeric(row.attacker_share, errors="coerce"))
        if at not in found.index or found.loc[at, "f_declared"] or not (np.isfinite(n) and share > 0):
            continue
        m = found.loc[at, "clients_per_round"]
        f = trial_f(float(row.level), m, found.loc[at, "clients"])
        if np.isfinite(f) and f >= 1 and n < m and (f * n) // m == 0:
            rows.append({"deployment_label": row.deployment_label, "attack_label": row.attack_label,
                         "level": row.level, "n": n, "attackers": n * share, "f": f, "m": m})
    notes = []
    for (deployment, attack, level), part in pd.DataFrame(rows).groupby(["deployment_label", "attack_label", "level"],
                                                                        sort=False) if rows else ():
        notes.append(f"{deployment}, {setting_label(attack, level)}: the rules aggregated {part['n'].min():.1f} to "
                     f"{part['n'].max():.1f} reports a round on average, {part['attackers'].min():.1f} to "
                     f"{part['attackers'].max():.1f} of them the attackers'; f follows them to floor("
                     f"{part['f'].iloc[0]:g} n / {part['m'].iloc[0]:g}) = 0 in the mean round: a rule that reads f ran "
                     f"as its f = 0 form there (the trimmed mean as the mean, Krum and NNM assuming no attacker), not "
                     f"as the rule the trial declared.")
    return notes


def describe(row) -> str:
    """A deployment in words, from its facts."""
    if row.system_name == "asynchronous":
        flight = row.concurrency if np.isfinite(row.concurrency) else getattr(row, "clients_per_round", np.nan)
        arrivals = f" of the first {row.buffer:g} arrivals" if np.isfinite(row.buffer) else ""
        arrivals += f" of {flight:g} devices in flight" if np.isfinite(flight) and arrivals else ""
        what = f"asynchronous buffered aggregation (FedBuff){arrivals}"
        if np.isfinite(row.buffer) and row.buffer >= flight:  # FedBuff's buffer is far smaller than its concurrency
            what += (": the buffer takes every device in flight, each with staleness 0, so each step is a "
                     "synchronous round, not asynchrony (FedBuff's buffer is far below its devices in flight)")
    else:
        parts = []
        if row.failure_rate:
            who = "attackers fail alike (control)" if row.attackers_fail else "attackers stay online"
            parts.append(f"failure rate {row.failure_rate:g}, {who}")
        if row.stragglers:
            kept = "included" if row.straggler_policy == "include" else "dropped"
            who = "attackers straggle alike (control)" if row.attackers_straggle else "attackers never straggle"
            if row.attackers_straggle and row.straggler_policy == "include":  # every drawn device reports either way
                who += (" - every drawn device reports, so the attackers' share is as drawn in both columns: this "
                        "control moves only the attackers' own local work, which an attack that crafts its update "
                        "from the honest ones (ALIE, Min-Max) does not use, and which honest devices straggle")
            parts.append(f"{row.stragglers:g} stragglers (local steps or epochs uniform in {{1, ..., E - 1}}, "
                         f"FedProx's draw), their partial work {kept}, {who}")
        what = "synchronous, " + ", ".join(parts) if parts else "synchronous rounds, every drawn device reports"
    declared = {"half": "half the f the trial assumes", "double": "twice the f the trial assumes"}
    return what + (f"; the server declares {declared[row.f_declared]}" if row.f_declared in declared else "")
