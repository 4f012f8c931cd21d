"""Runs -> table cells: seeds of one cell averaged, incomparable runs refused.

A *position* is where a number sits in a paper table: (dataset_label, method_label, attack_label,
level, privacy_label, deployment_label; the privacy label is ``none`` outside a suite with a privacy axis, the
deployment label ``synchronous`` outside one with a deployment axis). The runs at one position are the seeds of one
cell (one ``cell_hash``). They are averaged only when they share the data fingerprint, the component versions and the config; otherwise the cell is
marked ``mixed`` and its note says which values disagree (the leaderboard never averages
incomparable runs).

Input: one row per MLflow run with the tracking schema's params, tags and final metrics (see
``reader.runs_frame``). Output of :func:`aggregate`: one row per position with the mean over seeds
of every metric, its standard deviation over seeds and (by default) the half-width of a Student-t
confidence interval, the seed count and the provenance verdict.

A run's ``dataset_label`` names the dataset it ran: a run recorded under a label that names another
dataset (``fmnist`` on ``digits``, as older versions labelled the quick scale) is shown under the
dataset really run (``suites.dataset_labels``).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
from scipy import stats

from fedarena.config import SCALES
from fedarena.leaderboards.paper import paper_datasets
from fedarena.leaderboards.server_rules import RULE_FACTS, rule_facts
from fedarena.leaderboards.tables import sort_key
from fedarena.simulation.costs import COST_PREFIX
from fedarena.simulation.metrics import METRIC_DIRECTIONS
from fedarena.simulation.properties import RUN_PROPERTIES
from fedarena.suites.dataset_labels import shown_label
from fedarena.suites.spec import COSTS

POSITION = ("dataset_label", "method_label", "attack_label", "level", "privacy_label", "deployment_label")
DEFAULT_LABELS = {"privacy_label": "none", "deployment_label": "synchronous"}  # what a run without the tag reads as

# The engine's metric registry says which direction is better; ``diverged`` is a flag, not a table value.
HIGHER_IS_BETTER = {name: higher for name, higher in METRIC_DIRECTIONS.items() if name != "diverged"}
METRICS = tuple(HIGHER_IS_BETTER)
# Per-run differences averaged like metrics: Ditto's bold criterion "mean - std" (its spread over seeds
# is what a significance test of that criterion needs).
DERIVED = {"acc_pooled_minus_std": ("acc_pooled", "acc_std")}
# Metrics that only some runs have: the attack success rates, NaN for runs without a targeted attack. Their
# mean, spread and interval are over the seeds that have them, and ``<metric>_n`` counts those seeds (the
# significance test's n); the column exists only where some run has the metric (a suite without targeted
# attacks keeps its columns).
SPARSE = tuple(m for m in ("asr_pooled", "asr_mean", "asr_worst10") if m in HIGHER_IS_BETTER)
# What each side pays (``simulation.work``, logged as ``cost_<name>``; a suite's ``costs:`` names them): the cells
# carry each one's mean over the seeds that recorded it, only where some run has its column (older runs have none),
# for the ``costs`` table alone: the other tables' tidy numbers drop them (``without_costs``).
COST_COLUMNS = tuple(COST_PREFIX + name for name in COSTS)
# Tags of a selected method's variants (``suites.select``), carried to the cells.
SELECT_COLUMNS = ("select_group", "select_by", "variant")

# Provenance columns that must agree across the runs of one cell, with the words used in notes: the code's
# behaviour is its components' versions (``simulation.identity``), not its commit.
PROVENANCE = {
    "dataset_fingerprint": "dataset fingerprints",
    "component_versions": "component versions",
    "cell_hash": "configs (cell_hash)",
}

IN_PROGRESS = ("RUNNING", "SCHEDULED")
FAILED = ("FAILED", "KILLED")


def normalize(runs: pd.DataFrame) -> pd.DataFrame:
    """Position columns typed and filled: labels fall back to the params, ``level`` is a float."""
    out = runs.copy()
    fallbacks = {
        "dataset_label": "dataset.name",
        "method_label": "method.name",
        "attack_label": "attack.name",
    }
    for label, param in fallbacks.items():
        if label not in out:
            out[label] = out[param] if param in out else np.nan
        elif param in out:
            out[label] = out[label].fillna(out[param])
    out["attack_label"] = out["attack_label"].replace({"none": "clean"})
    for key, default in DEFAULT_LABELS.items():  # runs of a suite without the axis: its one default entry
        given = out[key] if key in out else pd.Series(np.nan, index=out.index, dtype=object)
        out[key] = given.fillna(default).astype(str)
    if "dataset.name" in out:
        names = out["dataset.name"].fillna(out["dataset_label"]).astype(str)
        known = paper_datasets()  # a label naming a published dataset must be the dataset run
        out["dataset_label"] = [shown_label(str(lb), n, known) for lb, n in zip(out["dataset_label"], names, strict=True)]
    level = out["level"] if "level" in out else pd.Series(np.nan, index=out.index)
    if "attack.level" in out:
        level = level.fillna(out["attack.level"])
    out["level"] = pd.to_numeric(level, errors="coerce").fillna(0.0).astype(float).round(6)
    if "seed" in out:
        out["seed"] = pd.to_numeric(out["seed"], errors="coerce")
    out["diverged"] = _diverged(out)
    for metric in (*METRICS, *RUN_PROPERTIES, *COST_COLUMNS):
        if metric in out:
            out[metric] = pd.to_numeric(out[metric], errors="coerce")
    return out


def with_default_labels(runs: pd.DataFrame) -> pd.DataFrame:
    """A frame of runs with the axes it lacks at their one default entry (a frame made before the axis existed)."""
    missing = {key: default for key, default in DEFAULT_LABELS.items() if key not in runs}
    return runs.assign(**missing) if missing else runs


def _diverged(runs: pd.DataFrame) -> pd.Series:
    if "diverged" not in runs:
        return pd.Series(False, index=runs.index)
    text = runs["diverged"].astype(str).str.strip().str.lower()
    return text.isin(("true", "1", "1.0"))


def current_only(runs: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """The runs of today's identity (the reader's ``current`` column; a frame without it is all current) and how
    many stale ones were left out."""
    if "current" not in runs:
        return runs, 0
    keep = runs["current"].fillna(False).astype(bool)
    return runs[keep], int((~keep).sum())


def split_status(runs: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, int]]:
    """Finished runs, and counts of the runs left out (in progress, failed)."""
    status = runs["status"] if "status" in runs else pd.Series("FINISHED", index=runs.index)
    counts = {"in_progress": int(status.isin(IN_PROGRESS).sum()), "failed": int(status.isin(FAILED).sum())}
    return runs[status == "FINISHED"], counts


def select_scale(runs: pd.DataFrame, scale: str | None = None) -> tuple[pd.DataFrame, str | None, int]:
    """Runs of one scale (given, or the most thorough one present) and how many runs were left out."""
    if "scale" not in runs or runs["scale"].isna().all():
        return runs, None, 0
    present = set(runs["scale"].dropna())
    if scale is None:
        ranked = sorted(present, key=lambda s: SCALES.index(s) if s in SCALES else -1)
        scale = ranked[-1]
    keep = runs["scale"] == scale
    return runs[keep], scale, int((~keep).sum())


def dedupe(runs: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """Keep the latest run of every (row, cell_hash, seed): a re-run supersedes the earlier trial (two rows may hold
    one trial: a tuned row whose values are the defaults)."""
    if "cell_hash" not in runs or "seed" not in runs:
        return runs, 0
    keyed = runs["cell_hash"].notna() & runs["seed"].notna()
    order = runs.sort_values("start_time", kind="stable") if "start_time" in runs else runs
    key = [c for c in ("method_label", "cell_hash", "seed") if c in runs]
    latest = order[keyed.loc[order.index]].drop_duplicates(key, keep="last")
    kept = pd.concat([latest, runs[~keyed]]).sort_index()
    return kept, len(runs) - len(kept)


def newest_cells(runs: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """Where a table position holds runs of several cells (the suite's entry for it changed: another config,
    or another component version), keep the cell run most recently; returns the runs and how many of an
    earlier cell were left out."""
    if "cell_hash" not in runs or "start_time" not in runs or runs.empty:
        return runs, 0
    keyed = with_default_labels(runs[runs["cell_hash"].notna()])
    newest = keyed.groupby([*POSITION, "cell_hash"], dropna=False, sort=False)["start_time"].max().reset_index()
    newest = newest.sort_values("start_time", kind="stable").drop_duplicates(list(POSITION), keep="last")
    current = set(newest["cell_hash"])
    keep = runs["cell_hash"].isna() | runs["cell_hash"].isin(current)
    return runs[keep], int((~keep).sum())


def canonical_order(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs sorted by cell (in the tables' order), variant and seed: a mean over seeds then sums in one order,
    ties are broken alike and the tidy CSVs list cells as the tables do, whatever order the store returns runs
    in (the benchmark records them as they finish)."""
    keys = [c for c in (*POSITION, "variant", "seed", "cell_hash", "run_id") if c in runs]
    return runs.sort_values(keys, key=_sortable, kind="stable") if keys else runs


def _sortable(column: pd.Series) -> pd.Series:
    return column.map(lambda value: sort_key(column.name, str(value)))  # strings: one comparable type


def t_halfwidth(values: np.ndarray, confidence: float = 0.95) -> float:
    """Half-width of the two-sided Student-t interval of the mean; NaN with fewer than two values."""
    values = np.asarray(values, dtype=float)
    values = values[~np.isnan(values)]
    n = len(values)
    if n < 2 or not np.isfinite(values).all():  # an infinite epsilon has no interval
        return float("nan")
    quantile = stats.t.ppf(0.5 + confidence / 2.0, df=n - 1)
    return float(quantile * values.std(ddof=1) / np.sqrt(n))


def data_groups(group: pd.DataFrame) -> pd.Series:
    """Which runs must have seen the same data: those with one fixed ``data_seed``, or, where the
    config leaves ``data_seed`` unset (the partition then follows ``seed``), those with one seed.
    A frame without a ``data_seed`` column puts every run in one group."""
    if "data_seed" not in group:
        return pd.Series("all", index=group.index)
    fixed = group["data_seed"].astype(str)
    unset = fixed.isin(("None", "nan", "null", ""))
    return fixed.where(~unset, "seed " + group["seed"].astype(str))


def conflicts(group: pd.DataFrame, keys: tuple[str, ...] = tuple(PROVENANCE)) -> str:
    """Empty when the runs are comparable, else which provenance values disagree.

    Component versions and configs must be equal across all runs of a cell; data fingerprints across the
    runs that should have seen the same data (:func:`data_groups`).
    """
    parts = []
    for key in keys:
        if key not in group:
            continue
        values = sorted(str(v) for v in group[key].dropna().unique())
        disagree = len(values) > 1
        if disagree and key == "dataset_fingerprint":
            disagree = bool((group.groupby(data_groups(group))[key].nunique() > 1).any())
        if disagree and key == "component_versions":
            parts.append(f"{PROVENANCE[key]} {differing_versions(values)}")
        elif disagree:
            parts.append(f"{PROVENANCE.get(key, key)} {', '.join(v[:12] for v in values)}")
    return "; ".join(parts)


def differing_versions(recorded: list[str]) -> str:
    """The components whose version differs between recorded ``component_versions`` (JSON), e.g.
    ``aggregator/krum 1, 2``."""
    tables = [json.loads(text) for text in recorded]
    keys = sorted({key for table in tables for key in table})
    parts = []
    for key in keys:
        seen = sorted({str(table.get(key, "none")) for table in tables})
        if len(seen) > 1:
            parts.append(f"{key} {', '.join(seen)}")
    return "; ".join(parts)


def aggregate(
    runs: pd.DataFrame,
    *,
    ci: bool = True,
    confidence: float = 0.95,
    provenance: tuple[str, ...] = tuple(PROVENANCE),
) -> pd.DataFrame:
    """One row per position: mean over seeds of every metric (and of ``DERIVED``), ``<metric>_sd`` (sample
    std over seeds, NaN with one seed) and, when ``ci``, ``<metric>_ci``; a metric no run logged is NaN.

    Columns added: ``n_seeds``, ``diverged`` (any seed diverged), ``mixed`` (runs incomparable; metric
    values are then NaN), ``note`` (what disagrees), ``dataset_names`` (the datasets really run),
    ``SELECT_COLUMNS`` (empty for methods that are no variant), ``RULE_FACTS`` (``server_rules``) and, for each
    ``SPARSE`` metric some run has,
    ``<metric>_n`` (the seeds with a value; 0 in mixed cells) and, for each of ``COST_COLUMNS`` the runs have, its
    mean over the seeds that recorded it (no spread: the ``costs`` table shows means). ``runs`` must be normalized
    finished runs.
    """
    runs = _with_derived(with_default_labels(runs))
    values_of = (*METRICS, *recorded_metrics(runs), *DERIVED, *(p for p in RUN_PROPERTIES if p in runs))
    counted = tuple(m for m in SPARSE if m in runs and np.isfinite(runs[m].to_numpy(dtype=float)).any())
    costs = tuple(c for c in COST_COLUMNS if c in runs)
    rows = []
    for key, group in runs.groupby(list(POSITION), sort=False, dropna=False):
        row = dict(zip(POSITION, key, strict=True))
        note = conflicts(group, provenance)
        row.update(n_seeds=len(group), diverged=bool(group["diverged"].any()), mixed=bool(note), note=note,
                   dataset_names=_names(group), **_select_tags(group), **rule_facts(group))
        for metric in values_of:
            values = group[metric].to_numpy(dtype=float) if metric in group else np.full(len(group), np.nan)
            row[metric] = np.nan if note else _mean(values)
            row[f"{metric}_sd"] = np.nan if note else _sd(values)
            if ci:
                row[f"{metric}_ci"] = np.nan if note else t_halfwidth(values, confidence)
            if metric in counted:
                row[f"{metric}_n"] = 0 if note else int(np.isfinite(values).sum())
        for column in costs:  # the mean over the seeds that recorded it (NaN where none did)
            row[column] = np.nan if note else _mean(group[column].to_numpy(dtype=float))
        rows.append(row)
    columns = [*POSITION, "n_seeds", "diverged", "mixed", "note", "dataset_names", *SELECT_COLUMNS, *RULE_FACTS,
               *values_of]
    columns += [f"{m}_sd" for m in values_of] + ([f"{m}_ci" for m in values_of] if ci else [])
    columns += [f"{m}_n" for m in counted]
    columns += list(costs)
    return pd.DataFrame(rows, columns=columns)


def cost_column(name: str) -> str:
    """The runs' and the cells' column of one cost (``server_ms`` -> ``cost_server_ms``)."""
    return COST_PREFIX + name


def without_costs(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` without the cells' cost columns: the tables other than ``costs`` keep their tidy numbers."""
    return frame.drop(columns=[c for c in COST_COLUMNS if c in frame])


def recorded_metrics(runs: pd.DataFrame) -> tuple[str, ...]:
    """Metrics a plugin registered, as the runs recorded them (``metric_directions``), whether or not this
    process loaded the plugin: the cells average them like the built-in ones."""
    if "metric_directions" not in runs:
        return ()
    names = set()
    for text in runs["metric_directions"].dropna():
        names |= set(json.loads(text))
    return tuple(sorted(name for name in names - set(METRICS) if name in runs))



def _with_derived(runs: pd.DataFrame) -> pd.DataFrame:
    out = runs.copy()
    for name, (left, right) in DERIVED.items():
        out[name] = (out[left] - out[right]) if left in out and right in out else np.nan
    return out


def _select_tags(group: pd.DataFrame) -> dict[str, str]:
    """The variant tags of a cell's runs ('' where absent; one method label has one variant)."""
    tags = {}
    for column in SELECT_COLUMNS:
        values = group[column].dropna().astype(str) if column in group else pd.Series(dtype=str)
        tags[column] = values.iloc[0] if len(values) else ""
    return tags


def _names(group: pd.DataFrame) -> str:
    """The datasets the cell's runs actually used (``dataset.name``), comma-separated; '' if unknown."""
    if "dataset.name" not in group:
        return ""
    return ",".join(sorted(set(group["dataset.name"].dropna().astype(str))))


def _mean(values: np.ndarray) -> float:
    values = values[~np.isnan(values)]
    return float(values.mean()) if len(values) else float("nan")


def _sd(values: np.ndarray) -> float:
    values = values[~np.isnan(values)]
    if len(values) < 2 or not np.isfinite(values).all():  # an infinite epsilon has no spread
        return float("nan")
    return float(values.std(ddof=1))
