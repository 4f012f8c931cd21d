"""The leaderboards of one suite: every applicable table, the reproduction view and the figures.

``build_leaderboards`` is what ``fedarena leaderboard`` / ``make leaderboards`` call. The pipeline
is pure up to the writing (:func:`leaderboard_tables` takes the runs frame), so it is tested on
hand-made frames; only :func:`build_leaderboards` talks to MLflow.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from fedarena.leaderboards.cells import aggregate, dedupe, normalize, select_scale, split_status
from fedarena.leaderboards.figures import write_figures
from fedarena.leaderboards.paper import is_paper_dataset, reproduction_table
from fedarena.leaderboards.reader import LeaderboardError, fill_hint, read_histories, read_runs
from fedarena.leaderboards.render import FORMATS, render
from fedarena.leaderboards.specs import SPECS, TableSpec, build_table
from fedarena.leaderboards.tables import Table
from fedarena.params import ConfigError


def prepare_runs(runs: pd.DataFrame, scale: str | None = None) -> tuple[pd.DataFrame, list[str]]:
    """Finished runs of one scale, normalized and de-duplicated, with footnotes on what was left out."""
    finished, counts = split_status(runs)
    finished, chosen, other_scales = select_scale(normalize(finished), scale)
    finished, superseded = dedupe(finished)
    notes = [f"Scale: {chosen}."] if chosen else []
    if counts["in_progress"]:
        notes.append(f"{counts['in_progress']} run(s) still in progress are left out.")
    if counts["failed"]:
        notes.append(f"{counts['failed']} failed or interrupted run(s) are left out.")
    if other_scales:
        notes.append(f"{other_scales} run(s) at other scales than {chosen!r} are left out.")
    if superseded:
        notes.append(f"{superseded} earlier run(s) of a cell and seed were superseded by a re-run.")
    notes += stand_in_notes(finished)
    return finished, notes


def stand_in_notes(runs: pd.DataFrame) -> list[str]:
    """Say where a paper's dataset label was run on another dataset (e.g. digits for fmnist at the quick scale)."""
    if "dataset.name" not in runs:
        return []
    notes = []
    for label, names in runs.groupby("dataset_label")["dataset.name"]:
        others = sorted(n for n in set(names.dropna().astype(str)) if not is_paper_dataset(label, n))
        if others:
            notes.append(f"Rows under {label} were run on {', '.join(others)}, a stand-in at this scale: "
                         "not the paper's experiment, and left out of the reproduction view.")
    return notes


def leaderboard_tables(
    runs: pd.DataFrame,
    *,
    ci: bool = False,
    scale: str | None = None,
    specs: tuple[TableSpec, ...] = SPECS,
    paper: pd.DataFrame | None = None,
) -> tuple[list[Table], pd.DataFrame, pd.DataFrame]:
    """(tables, aggregated cells, prepared runs) from a frame of runs; tables without data are skipped."""
    prepared, notes = prepare_runs(runs, scale)
    if prepared.empty:
        raise LeaderboardError(f"no finished runs to tabulate ({'; '.join(notes) or 'no runs'})")
    cells = aggregate(prepared, ci=ci)
    tables = [t for spec in specs if (t := build_table(cells, spec, notes)) is not None]
    view = reproduction_table(cells, notes, paper)
    return tables + ([view] if view is not None else []), cells, prepared


def write_tables(tables: list[Table], out_dir: Path, fmt: str) -> list[Path]:
    paths = []
    for table in tables:
        path = out_dir / f"{table.name}.{FORMATS[fmt]}"
        path.write_text(render(table, fmt), encoding="utf-8")
        paths.append(path)
    return paths


def build_leaderboards(
    suite: str,
    tracking_uri: str,
    out_dir: str,
    fmt: str,
    ci: bool = False,
    *,
    scale: str | None = None,
    figures: bool = True,
) -> list[Path]:
    """Write every applicable table of ``suite`` in ``fmt``, the reproduction view and the figures.

    ``scale``: which scale's runs to tabulate (default: the most thorough one present). Raises
    LeaderboardError (a ConfigError) for a missing store, an unknown suite or a suite without
    finished runs; the message lists the experiments that exist and how to fill one.
    """
    if fmt not in FORMATS:
        raise ConfigError(f"unknown leaderboard format {fmt!r}; allowed: {', '.join(FORMATS)}")
    runs = read_runs(tracking_uri, suite)
    try:
        tables, cells, prepared = leaderboard_tables(runs, ci=ci, scale=scale)
    except LeaderboardError as err:
        raise LeaderboardError(f"suite {suite!r} in {tracking_uri}: {err}; {fill_hint(suite)}") from None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = write_tables(tables, out, fmt)
    if figures:
        history = read_histories(tracking_uri, list(prepared["run_id"]))
        paths += write_figures(cells, prepared, history, out)
    return paths
