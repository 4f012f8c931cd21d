"""The papers' tables as small data (:class:`TableSpec`) over the one generic pivot.

Ditto (Li et al., ICML 2021): Table 1 (global / local / fair / Ditto under A1-A3, "mean (std)" of
benign test accuracy, bold = highest mean - std per column), Table 2 (personalization baselines,
datasets x {clean, A1 50%}), Table 3 (Ditto + robust aggregators, means only), Table 5 (fixed and
dynamic lambda) and the appendix layout of Tables 7-12 (every method present: ``full``).
FedTilt (Zhang et al.): Tables II / III / VII (test accuracy, client fairness sigma, client-data
fairness mu_sigma and sigma_sigma, in percent) for clean data, persistent random corruptions and
persistent Gaussian noise.

"mean" is ``acc_pooled`` (benign pooled test accuracy) and "std" is ``acc_std`` (std of the
per-device accuracies over benign devices), each averaged over the seeds of a cell.

Uncertainty over seeds: a cell with several seeds shows ``mean±h`` where h is the half-width of the 95%
Student-t confidence interval of the mean over seeds (``.842±.012 (.05)``: mean ± h, then the std across
devices); a cell without ± has one seed, a cell over fewer seeds than the table's most says ``[n=2]``.
Each column's bold entry is tested against the runner-up (Welch's t-test on the per-seed scores,
``significance``); ``‡`` marks a bold entry that is not significantly better, and a note names the
runner-up.

Worst case (``worst``): where two or more attacks ran at one level on a dataset, a ``worst@20%`` column
holds each row's lowest accuracy over the attacks the table shows at that level, naming the attack
(``worst``); the ``worst_case`` table holds only those columns, over every attack.

Backdoors (``backdoor``, written only where some run has an attack success rate, i.e. ran a targeted attack):
Ditto Table 1's layout over the clean column and the targeted attacks, each cell ``acc / ASR (std)``:
``.912±.010 / .031±.004 (.08)`` is the benign clean accuracy, the attack success rate (``asr_pooled``) and the
std of the accuracy across benign devices; the clean column has no ASR (``–``). Bold and the significance
test follow the ASR in its registered direction (lower is better).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from fedarena.leaderboards.audit_table import audit_cell, audit_notes
from fedarena.leaderboards.cells import HIGHER_IS_BETTER, POSITION, SPARSE, without_costs
from fedarena.leaderboards.declared import TABLES
from fedarena.leaderboards.server_rules import EXPLAINED as SECURE_EXPLAINED
from fedarena.leaderboards.server_rules import MARK, marked_rows
from fedarena.leaderboards.significance import ALPHA, NOT_SIGNIFICANT
from fedarena.leaderboards.tables import (
    MISSING,
    Block,
    Cell,
    Table,
    delta_text,
    label,
    pivot,
    privacy_deltas,
    privacy_text,
    setting_label,
)
from fedarena.leaderboards.worst import tag_worst, worst_cells
from fedarena.simulation.properties import RUN_PROPERTIES

WORST_MODES = ("", "column", "only")
WORST_CASE = "worst_case"
BACKDOOR = "backdoor"
PRIVACY = "privacy"
PRIVACY_AUDIT = "privacy_audit"  # claimed against measured epsilon (``privacy.audit``)
ASR = "asr_pooled"  # the attack success rate the backdoor table shows, bolds and tests
EPSILON = "epsilon"  # a run property: shown with the delta it is at


@dataclass(frozen=True)
class TableSpec:
    """Which cells a table shows and how.

    ``methods``: ordered method labels, or None for every method present.
    ``attacks`` / ``settings``: attack labels, or exact (attack, level) pairs, to keep (None: all).
    ``requires``: method labels; the table is written only if one of them ran.
    ``requires_metric``: a ``SPARSE`` metric (e.g. the ASR); the table is written only if some cell has it, and
    shows the attacks where some cell has it plus the clean cells of the rows (dataset, method) that ran them.
    ``value``: "mean_std", "mean", "metrics" (one column per entry of ``metrics``, in percent) or
    "acc_asr_std" (accuracy / ``ASR`` (std across devices)).
    ``bold``: "mean_minus_std", "mean", "direction" (best per metric direction), "asr" (the best ``ASR`` in
    its registered direction) or None.
    ``worst``: "column" adds the worst case over the shown attacks per level (``worst``), "only" shows only
    those columns, "" none; it needs attack x level columns and accuracy cells.
    ``only_measured``: keep only the cells that have ``requires_metric`` (not the clean cells of their rows, nor the
    other privacy labels of a run property's rows).
    """

    name: str
    title: str
    methods: tuple[str, ...] | None = None
    attacks: tuple[str, ...] | None = None
    settings: tuple[tuple[str, float], ...] | None = None
    requires: tuple[str, ...] | None = None
    requires_metric: str | None = None
    column_by: tuple[str, ...] = ("attack_label", "level")
    block_by: tuple[str, ...] = ("dataset_label",)
    value: str = "mean_std"
    bold: str | None = "mean_minus_std"
    metrics: tuple[tuple[str, str], ...] = ()
    worst: str = ""
    only_measured: bool = False  # only the cells that have ``requires_metric`` themselves (an audit's)

    def __post_init__(self) -> None:
        if self.worst not in WORST_MODES:
            raise ValueError(f"table {self.name}: worst must be one of {WORST_MODES}, got {self.worst!r}")
        if self.worst and (self.column_by != ("attack_label", "level") or self.value == "metrics"):
            raise ValueError(f"table {self.name}: a worst-case column needs columns ('attack_label', 'level') "
                             f"and accuracy cells, not columns {self.column_by} of {self.value!r}")
        if self.requires_metric is not None and self.requires_metric not in (*SPARSE, *RUN_PROPERTIES):
            raise ValueError(f"table {self.name}: requires_metric must be one of {(*SPARSE, *RUN_PROPERTIES)}, got "
                             f"{self.requires_metric!r}")


def spec_of(declared: dict) -> TableSpec:
    """A table's spec from its declaration (``paper_tables/tables.yaml``): lists become tuples."""
    data = dict(declared)
    for key in ("methods", "attacks", "requires", "column_by", "block_by"):
        if data.get(key) is not None:
            data[key] = tuple(data[key])
    if "settings" in data:
        data["settings"] = tuple((str(a), float(lv)) for a, lv in data["settings"])
    if "metrics" in data:
        data["metrics"] = tuple((str(m), str(h)) for m, h in data["metrics"])
    return TableSpec(**data)


SPECS = tuple(spec_of(table) for table in TABLES)


def select(cells: pd.DataFrame, spec: TableSpec) -> pd.DataFrame:
    """The aggregated cells a spec shows (empty when its ``requires`` is not met)."""
    methods = cells["method_label"].astype(str)
    if spec.requires and not methods.isin(spec.requires).any():
        return cells.iloc[0:0]
    keep = pd.Series(True, index=cells.index)
    if spec.requires_metric is not None:
        keep &= measured(cells, spec.requires_metric)
        if spec.only_measured and spec.requires_metric in cells:
            keep &= pd.to_numeric(cells[spec.requires_metric], errors="coerce").notna()
        if not keep.any():
            return cells.iloc[0:0]
    if spec.methods is not None:
        keep &= methods.isin(spec.methods)
    if spec.attacks is not None:
        keep &= cells["attack_label"].isin(spec.attacks)
    if spec.settings is not None:
        pairs = {(a, round(float(lv), 6)) for a, lv in spec.settings}
        pos = zip(cells["attack_label"], cells["level"], strict=True)
        keep &= pd.Series([(a, lv) in pairs for a, lv in pos], index=cells.index, dtype=bool)
    return cells[keep]


def measured(cells: pd.DataFrame, metric: str) -> pd.Series:
    """The cells under an attack where some cell has ``metric`` (the targeted attacks, for the ASR), and the
    clean cells of the (dataset, method) rows that ran such an attack; all False when no cell has it."""
    values = pd.to_numeric(cells[metric], errors="coerce") if metric in cells else pd.Series(np.nan, cells.index)
    attacks = set(cells.loc[np.isfinite(values), "attack_label"])
    under = cells["attack_label"].isin(attacks)
    row = pd.MultiIndex.from_frame(cells[["dataset_label", "method_label"]])
    ran = pd.Series(row.isin(row[under.to_numpy()]), index=cells.index)
    return under | ((cells["attack_label"] == "clean") & ran)


def fraction(x: float, digits: int) -> str:
    """A fraction in the papers' style: 0.855 -> '.855'."""
    if not np.isfinite(x):
        return MISSING
    text = f"{x:.{digits}f}"
    return text[1:] if text.startswith("0.") else text


def _plus_minus(ci: float, scale: float, digits: int, fraction_style: bool) -> str:
    if not np.isfinite(ci):
        return ""
    return "±" + (fraction(ci, digits) if fraction_style else f"{scale * ci:.{digits}f}")


def _seed_mark(n: int, most: int) -> str:
    """``[n=k]`` for a cell over several seeds but fewer than the table's most (one seed: no ±)."""
    return f" [n={n}]" if 2 <= n < most else ""


def _mean_std(row, value: str, most: int) -> tuple[str, float, float]:
    """(text, score, std of the score over seeds) of one cell."""
    if row.mixed:
        return "mixed", np.nan, np.nan
    ci = getattr(row, "acc_pooled_ci", np.nan)
    text = fraction(row.acc_pooled, 3) + _plus_minus(ci, 1.0, 3, True)
    score, spread = row.acc_pooled, getattr(row, "acc_pooled_sd", np.nan)
    if value == "mean_std":
        text += f" ({fraction(row.acc_std, 2)})"
        score, spread = row.acc_pooled - row.acc_std, getattr(row, "acc_pooled_minus_std_sd", np.nan)
    if np.isfinite(ci):
        text += _seed_mark(row.n_seeds, most)
    return text + ("†" if row.diverged else ""), score, spread


def _acc_asr_std(row, most: int) -> tuple[str, float, float, int]:
    """(text, score, its std over seeds, its seed count) of a backdoor cell: ``acc / ASR (std)``, scored by the
    ASR in its registered direction over the seeds that have one (a clean cell: ``–`` and no score)."""
    if row.mixed:
        return "mixed", np.nan, np.nan, 0
    acc_ci, asr_ci = getattr(row, "acc_pooled_ci", np.nan), getattr(row, f"{ASR}_ci", np.nan)
    asr = getattr(row, ASR, np.nan)
    asr_text = fraction(asr, 3) + _plus_minus(asr_ci, 1.0, 3, True) if np.isfinite(asr) else MISSING
    text = f"{fraction(row.acc_pooled, 3)}{_plus_minus(acc_ci, 1.0, 3, True)} / {asr_text} ({fraction(row.acc_std, 2)})"
    if np.isfinite(acc_ci) or np.isfinite(asr_ci):
        text += _seed_mark(row.n_seeds, most)
    score = asr if HIGHER_IS_BETTER[ASR] else -asr
    seeds = getattr(row, f"{ASR}_n", 0)
    return text + ("†" if row.diverged else ""), score, getattr(row, f"{ASR}_sd", np.nan), seeds


def _metric_cell(row, metric: str, most: int) -> tuple[str, float, float]:
    value = getattr(row, metric, np.nan)
    if row.mixed:
        return "mixed", np.nan, np.nan
    audit = None if np.isnan(value) else audit_cell(row, metric)  # a privacy audit's claim, estimate or evidence:
    if not np.isfinite(value) and audit is None:  # its cell says what it rests on (an infinite one: a leak, shown ∞)
        return MISSING, np.nan, np.nan
    ci = getattr(row, f"{metric}_ci", np.nan)
    if audit is not None:
        text = audit
    elif metric in RUN_PROPERTIES:  # a run's property (a certified radius, an epsilon) is no share: printed as it is
        text = f"{value:.4g}" + (f"±{ci:.2g}" if np.isfinite(ci) else "")
        if metric == EPSILON and delta_text([getattr(row, "delta", np.nan)]):  # an epsilon is at a delta
            text += f" ({delta_text([row.delta])})"
    else:
        text = f"{100 * value:.2f}" + _plus_minus(ci, 100.0, 2, False)
    text += (_seed_mark(row.n_seeds, most) if np.isfinite(ci) else "") + ("†" if row.diverged else "")
    higher = HIGHER_IS_BETTER[metric] if metric in HIGHER_IS_BETTER else RUN_PROPERTIES[metric] is not False
    return text, (value if higher else -value), getattr(row, f"{metric}_sd", np.nan)


def _metric_rows(selected: pd.DataFrame, spec: TableSpec, most: int) -> pd.DataFrame:
    rows = []
    for row in selected.itertuples(index=False):
        for metric, head in spec.metrics:
            text, score, spread = _metric_cell(row, metric, most)
            rows.append({**{k: getattr(row, k) for k in POSITION}, "metric": head, "text": text, "score": score,
                         "score_sd": spread, "n_seeds": row.n_seeds, "delta": getattr(row, "delta", np.nan)})
    return pd.DataFrame(rows)


def _most_seeds(selected: pd.DataFrame) -> int:
    seeds = selected.loc[~selected["mixed"], "n_seeds"]
    return int(seeds.max()) if len(seeds) else 0


def display_frame(selected: pd.DataFrame, spec: TableSpec) -> pd.DataFrame:
    """The selected cells with the ``text``, bold ``score`` and ``score_sd`` (its std over seeds) the pivot
    needs."""
    most = _most_seeds(selected)
    if spec.value == "metrics":
        frame = _metric_rows(selected, spec, most)
    elif spec.value == "acc_asr_std":  # scored by the ASR: the test's n is the seeds that have one
        frame = selected.copy()
        cells = [_acc_asr_std(r, most) for r in selected.itertuples(index=False)]
        frame["text"], frame["score"], frame["score_sd"], frame["n_seeds"] = (
            list(part) for part in zip(*cells, strict=True))
    else:
        frame = selected.copy()
        cells = [_mean_std(r, spec.value, most) for r in selected.itertuples(index=False)]
        frame["text"], frame["score"], frame["score_sd"] = (list(part) for part in zip(*cells, strict=True))
    if spec.bold is None:
        frame["score"] = np.nan
    return frame


def block_title(keys: tuple[str, ...], values: tuple, deltas: dict[str, str] | None = None) -> str:
    """The block's title; a privacy label carries its delta (``deltas``: ``tables.privacy_deltas``)."""
    texts = {k: privacy_text(v, deltas or {}) if k == "privacy_label" else label(k, v)
             for k, v in zip(keys, values, strict=True)}
    if texts.get("attack_label") == "clean":
        texts.pop("level", None)
    return " ".join(t for t in texts.values() if t)


def build_table(cells: pd.DataFrame, spec: TableSpec, footnotes: list[str] | None = None) -> Table | None:
    """The table of ``spec`` from aggregated cells, or None when none of its cells has runs."""
    selected = select(cells, spec)
    spec = with_axis_blocks(spec, selected)
    shown, described, worst_notes = with_worst(selected, spec)
    if shown.empty:
        return None
    frame = tag_worst(display_frame(shown, spec))
    order = spec.methods
    metric_order = {head: i for i, (_, head) in enumerate(spec.metrics)}
    blocks = pivot(frame, row_key="method_label", column_by=spec.column_by, block_by=spec.block_by,
                   row_order=order, column_order=metric_order)  # fmt: skip
    for key, block in blocks:
        block.title = block_title(spec.block_by, key, block_deltas(frame, spec.block_by, key))
    shown_blocks = [b for _, b in blocks]
    secure_notes = mark_rows(shown_blocks, marked_rows(shown))
    notes = table_notes(described, spec) + worst_notes + significance_notes(shown_blocks, spec)
    notes += privacy_notes(described) if "privacy_label" in (*spec.column_by, *spec.block_by) else []
    notes += secure_notes + list(footnotes or [])
    return Table(spec.name, spec.title, shown_blocks, notes, tidy_frame(shown))


def tidy_frame(shown: pd.DataFrame) -> pd.DataFrame:
    """The numbers behind a table (its CSV); the deployment label only where a suite has the axis, so that the
    CSVs of suites without one stay as they were; never the cells' costs (the ``costs`` table's)."""
    tidy = without_costs(shown).reset_index(drop=True)
    if "deployment_label" in tidy and (tidy["deployment_label"] == "synchronous").all():
        tidy = tidy.drop(columns="deployment_label")
    return tidy


def block_deltas(frame: pd.DataFrame, keys: tuple[str, ...], values: tuple) -> dict[str, str]:
    """The delta texts of the privacy labels in one block's cells (none where the block is not by privacy)."""
    if "privacy_label" not in keys:
        return {}
    inside = np.ones(len(frame), dtype=bool)
    for k, v in zip(keys, values, strict=True):
        inside &= (frame[k] == v).to_numpy()
    return privacy_deltas(frame[inside])


def mark_rows(blocks: list[Block], marked: set[str]) -> list[str]:
    """Append ``MARK`` to the row labels of ``marked`` methods (their rule cannot run under secure aggregation);
    the note that explains it where a row was marked."""
    texts = {label("method_label", m) for m in marked}
    hit = False
    for block in blocks:
        for row in block.rows:
            if row and row[0].text in texts:
                row[0] = Cell(row[0].text + MARK, row[0].bold)
                hit = True
    return [SECURE_EXPLAINED] if hit else []


def with_axis_blocks(spec: TableSpec, selected: pd.DataFrame) -> TableSpec:
    """A table that does not lay out the privacy (or deployment) axis, over cells of several privacy (deployment)
    labels (a suite with that axis): one block per label, so that no two are shown as one cell."""
    for key in ("privacy_label", "deployment_label"):
        laid_out = key in (*spec.column_by, *spec.block_by)
        if not laid_out and key in selected and selected[key].nunique() >= 2:
            spec = replace(spec, block_by=(*spec.block_by, key))
    return spec


def with_worst(selected: pd.DataFrame, spec: TableSpec) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(the cells a table shows: the selected ones with or without the worst-case cells, or only those; the
    cells its cell notes describe; the worst-case notes)."""
    if not spec.worst:
        return selected, selected, []
    worst, notes = worst_cells(selected)
    if spec.worst == "only":
        return worst, worst, notes
    if worst.empty:
        return selected, selected, []
    return pd.concat([selected, worst], ignore_index=True), selected, notes


def table_notes(selected: pd.DataFrame, spec: TableSpec) -> list[str]:
    """Footnotes that explain this table's cells."""
    bold = {
        "mean_minus_std": "Bold: the highest mean - std in each column.",
        "mean": "Bold: the highest mean in each column.",
        "direction": "Bold: the best value in each column (higher accuracy, lower σ).",
        "asr": f"Bold: the {'highest' if HIGHER_IS_BETTER[ASR] else 'lowest'} ASR in each column (the clean "
               f"column has no ASR, hence no bold).",
    }
    notes = [bold[spec.bold]] if spec.bold else []
    if spec.value == "acc_asr_std":
        better = "higher" if HIGHER_IS_BETTER[ASR] else "lower"
        notes.append("Each cell: acc / ASR (std): the accuracy on the benign devices' clean test data, the attack "
                     "success rate (ASR: the share of the benign devices' triggered test samples predicted as the "
                     f"attacker's target; {better} is better; – without a targeted attack) and the std of the "
                     "accuracy across benign devices.")
    seeds = selected.loc[~selected["mixed"], "n_seeds"]
    if len(seeds):
        span = f"{seeds.min()}" if seeds.min() == seeds.max() else f"{seeds.min()}-{seeds.max()}"
        notes.append(f"Each cell is the mean over {span} seed(s).")
    if "acc_pooled_ci" in selected:
        device_std = (" Parentheses: the std of the accuracy across benign devices."
                      if spec.value in ("mean_std", "acc_asr_std") else "")
        notes.append("±: half-width of the 95% Student-t confidence interval of the mean over seeds (a cell "
                     "without ± has one seed)." + device_std)
        if len(seeds) and seeds.min() != seeds.max() and seeds.max() > 2:
            notes.append("[n=k]: a cell over k seeds, fewer than the table's most.")
    if selected["diverged"].any():
        notes.append("†: at least one seed diverged.")
    for row in selected[selected["mixed"]].itertuples(index=False):
        where = f"{row.dataset_label} / {row.method_label} / {setting_label(row.attack_label, row.level)}"
        notes.append(f"mixed at {where}: runs not averaged, they differ in {row.note}.")
    return notes


def privacy_notes(cells: pd.DataFrame) -> list[str]:
    """What each privacy label spent: epsilon at delta and the noise multiplier (mean over its runs), per dataset;
    ``none`` runs without differential privacy, and a method that shares nothing spends no privacy."""
    notes = ["Privacy: user-level DP (replace-one adjacency, dp-accounting's RDP unless a run says otherwise); ε "
             "is the budget the runs spent by their last round at the δ beside it (a label's δ in parentheses; "
             "by default 1e-5, or N^-1.1 for N devices where smaller). none: no differential privacy (ε = ∞); ε = ∞ "
             "with a noise multiplier of 0: clipping without noise. Beside each cell sit the clip bound (the runs' "
             "privacy.clip, one for every label), the noise multiplier calibrated to the label's ε (below) and the "
             "seeds; an audited label (privacy.audit) trains its canaries beside the devices in every round, so "
             "its cells are the audited model's, not the unaudited label's."]
    if "epsilon" not in cells:
        return notes
    private = cells[pd.to_numeric(cells["epsilon"], errors="coerce").notna()]
    for (dataset, privacy), part in private.groupby(["dataset_label", "privacy_label"], sort=False):
        eps, z = (float(np.nanmean(part[k])) if k in part else np.nan for k in ("epsilon", "noise_multiplier"))
        shown = "∞" if np.isinf(eps) else f"{eps:.3g}"
        at = delta_text(part["delta"]) if "delta" in part else ""
        notes.append(f"{dataset}, {privacy}: ε = {shown} at {at or 'an unrecorded δ'}, noise multiplier {z:.3g}.")
    notes += audit_notes(private)
    if "uses_aggregator" in cells:
        local = cells.loc[cells["uses_aggregator"] == False, "method_label"]  # noqa: E712
        if len(local):
            notes.append(f"{', '.join(sorted(set(local)))}: nothing leaves a device (ε = 0).")
    return notes


def significance_notes(blocks: list[Block], spec: TableSpec) -> list[str]:
    """How bold entries were tested, and each column where the bold entry is not significantly better."""
    verdicts = [(block.title, column, v) for block in blocks for column, v in block.verdicts]
    if spec.bold is None or not verdicts:
        return []
    scores = "ASRs" if spec.bold == "asr" else "scores"
    notes = [f"Significance: each column's bold entry against the runner-up, Welch's t-test on the per-seed "
             f"{scores} (p < {ALPHA:g}); {NOT_SIGNIFICANT}: not significantly better."]
    if any(not v.tested for _, _, v in verdicts):
        notes.append("Columns where the best or the runner-up has a single seed are not tested.")
    for title, column, v in verdicts:
        if v.tested and not v.significant:
            where = " ".join(t for t in (title, column) if t)
            notes.append(f"{NOT_SIGNIFICANT} {where}: {v.best} is not significantly better than {v.runner_up} "
                         f"(p = {v.p:.2f}).")
    return notes
