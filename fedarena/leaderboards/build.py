"""The leaderboards of one suite: every applicable table, the reproduction view and the figures.

``build_leaderboards`` is what ``fedarena leaderboard`` / ``make leaderboards`` call. The pipeline
is pure up to the writing (:func:`leaderboard_tables` takes the runs frame), so it is tested on
hand-made frames; only :func:`build_leaderboards` talks to MLflow.

Cells over several seeds show a 95% confidence interval by default (``ci=False``: means only), and the
variants of a selected method (``suites.select``) become one row chosen per column (``selection``).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pandas as pd

from fedarena.errors import ConfigError
from fedarena.leaderboards.cells import (
    aggregate,
    canonical_order,
    current_only,
    dedupe,
    newest_cells,
    normalize,
    select_scale,
    split_status,
)
from fedarena.leaderboards.costs_table import costs_table
from fedarena.leaderboards.deployment_figure import write_deployment_figures
from fedarena.leaderboards.deployment_table import deployment_facts, deployment_table, grid_exclusions
from fedarena.leaderboards.figures import in_the_lab, write_figures
from fedarena.leaderboards.paper import paper_datasets, reproduction_table
from fedarena.leaderboards.privacy_figure import write_privacy_figures
from fedarena.leaderboards.render import FORMATS, render
from fedarena.leaderboards.selection import chosen_runs, select_variants, selection_tables
from fedarena.leaderboards.specs import SPECS, TableSpec, build_table
from fedarena.leaderboards.tables import Table
from fedarena.registry import UnknownNameError
from fedarena.suites.dataset_labels import misnamed
from fedarena.suites.parse import load_suite
from fedarena.suites.tuned_labels import with_tuned_labels
from fedarena.tracking.location import redact
from fedarena.tracking.location import tracking_uri as resolve_uri
from fedarena.tracking.reading import NoRunsError, fill_hint, read_histories, read_runs

LeaderboardError = NoRunsError  # no runs to build leaderboards from: the message says what exists and how to fill a suite


@contextlib.contextmanager
def redacted_errors(tracking_uri: str):
    """LeaderboardErrors raised in the block name the store: re-raised with its password replaced by ``***``."""
    try:
        yield
    except LeaderboardError as err:
        raise LeaderboardError(str(err).replace(tracking_uri, redact(tracking_uri))) from None


def prepare_runs(runs: pd.DataFrame, scale: str | None = None) -> tuple[pd.DataFrame, list[str]]:
    """Finished runs of today's identity at one scale, normalized and de-duplicated, with footnotes on what
    was left out (stale runs: computed at other component versions)."""
    runs, stale = current_only(runs)
    finished, counts = split_status(runs)
    relabelled = relabel_notes(finished)
    finished, chosen, other_scales = select_scale(normalize(with_tuned_labels(finished)), scale)
    finished, superseded = dedupe(finished)
    finished, earlier_cells = newest_cells(finished)
    finished = canonical_order(finished)
    notes = [f"Scale: {chosen}."] if chosen else []
    if counts["in_progress"]:
        notes.append(f"{counts['in_progress']} run(s) still in progress are left out.")
    if counts["failed"]:
        notes.append(f"{counts['failed']} failed or interrupted run(s) are left out.")
    if other_scales:
        notes.append(f"{other_scales} run(s) at other scales than {chosen!r} are left out.")
    if superseded:
        notes.append(f"{superseded} earlier run(s) of a cell and seed were superseded by a re-run.")
    if earlier_cells:
        notes.append(f"{earlier_cells} run(s) of an earlier configuration of a table position were superseded by "
                     f"the suite's later one.")
    if stale:
        notes.append(f"{stale} stale run(s), computed at other component versions than today's, are left out.")
    return finished, notes + relabelled + tuned_notes(finished)


def tuned_notes(runs: pd.DataFrame) -> list[str]:
    """Say which rows run with values ``fedarena tune`` chose (rows of their own, ``<label>+tuned<budget>``), with
    what budget and on which seed (``suites.tuned``)."""
    if "tuned_budget" not in runs or "method_label" not in runs:
        return []
    notes = []
    tuned = runs.dropna(subset=["tuned_budget"])
    seeds = tuned["tuned_seeds"] if "tuned_seeds" in tuned else pd.Series(None, index=tuned.index, dtype=object)
    tuned = tuned.assign(tuned_on=seeds.fillna("").astype(str))  # no tag: a file from before tuning_seeds
    for (budget, rows, on), part in tuned.groupby(["tuned_budget", "tuned_rows", "tuned_on"], sort=True):
        shown = sorted(set(part["method_label"]) & set(str(rows).split(",")))
        reported = {str(v) for v in part["seed"].dropna()} if "seed" in part else set()
        also = sorted(set(on.split(",")) & {r.split(".")[0] for r in reported}) if on else []
        seed = (f"on seed(s) {on}, also reported here ({', '.join(also)})" if also else
                f"on seed {on}, none of the reported seeds" if "," not in on else f"on seeds {on}, none of them reported"
                ) if on else "on the scale's first seed, one of the reported seeds"
        if shown:
            notes.append(f"Tuned rows (fedarena tune, {budget} configurations each, chosen on the tuning battery's "
                         f"worst benign validation accuracy {seed}): {', '.join(shown)}; the others run at their "
                         f"defaults.")
    return notes


def relabel_notes(runs: pd.DataFrame) -> list[str]:
    """Say where runs were recorded under a label naming another dataset than the one they ran (older
    versions labelled digits runs ``fmnist``): they are shown under the dataset really run."""
    if "dataset.name" not in runs or "dataset_label" not in runs:
        return []
    notes = []
    pairs = runs[["dataset_label", "dataset.name"]].dropna().astype(str)
    for (label, name), part in pairs.groupby(["dataset_label", "dataset.name"], sort=True):
        if misnamed(label, name, paper_datasets()):
            notes.append(f"{len(part)} run(s) recorded under the label {label} ran {name}: shown as {name}.")
    return notes


def leaderboard_tables(
    runs: pd.DataFrame,
    *,
    ci: bool = True,
    scale: str | None = None,
    specs: tuple[TableSpec, ...] = SPECS,
    paper: pd.DataFrame | None = None,
    excluded: pd.DataFrame | None = None,
    costs: tuple[str, ...] = (),
) -> tuple[list[Table], pd.DataFrame, pd.DataFrame]:
    """(tables, aggregated cells, prepared runs) from a frame of runs; tables without data are skipped.
    The cells are those the tables show: a selected method's chosen variant under its group's label. ``excluded``:
    the grid points a deployment axis excludes, with their reasons (``deployment_table.grid_exclusions``);
    ``costs``: the costs the suite asks to tabulate (its ``costs:``; none: no ``costs`` table)."""
    prepared, notes = prepare_runs(runs, scale)
    if prepared.empty:
        raise LeaderboardError(f"no finished runs to tabulate ({'; '.join(notes) or 'no runs'})")
    cells, variants, choices = select_variants(aggregate(prepared, ci=ci))
    tables = [t for spec in specs if (t := build_table(cells, spec, notes)) is not None]
    for table in tables:  # where a selected row is shown, say which variant each column holds
        table.footnotes += [note for group, note in choices if group in set(table.tidy["method_label"])]
    view = reproduction_table(in_the_lab(cells), notes, paper)  # the papers ran the synchronous lab
    deployed = deployment_table(cells, excluded, deployment_facts(prepared))
    costed = costs_table(cells, costs, excluded)
    for table in (deployed, costed):
        if table is not None:
            table.footnotes += notes
    extra = [t for t in (deployed, costed, view) if t is not None]
    return tables + selection_tables(variants) + extra, cells, prepared


def suite_tables(suite: str, tracking_uri: str, *, ci: bool = True, scale: str | None = None
                 ) -> tuple[list[Table], pd.DataFrame, pd.DataFrame]:
    """:func:`leaderboard_tables` of the suite's runs in the store (what ``fedarena leaderboard`` and
    ``fedarena report`` show); a suite without finished runs is a LeaderboardError naming it, the store and
    how to fill it (the reader's own errors already do)."""
    runs = read_runs(tracking_uri, suite)
    try:
        return leaderboard_tables(runs, ci=ci, scale=scale, excluded=grid_exclusions(suite, runs, scale),
                                  costs=suite_costs(suite))
    except LeaderboardError as err:  # leaderboard_tables' only error: no finished runs
        raise LeaderboardError(f"suite {suite!r} in {tracking_uri}: {err}; {fill_hint(suite)}") from None


def suite_costs(suite: str) -> tuple[str, ...]:
    """The costs the suite asks to tabulate (its ``costs:``); none where it asks for none or is not one this process
    can load (a file the store's runs do not point to)."""
    try:
        return load_suite(suite, check_names=False).costs
    except (ConfigError, UnknownNameError):
        return ()


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
    ci: bool = True,
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
    tables, cells, prepared = suite_tables(suite, tracking_uri, ci=ci, scale=scale)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = write_tables(tables, out, fmt)
    if figures:
        paths += figure_files(tracking_uri, cells, chosen_runs(prepared, cells), out)
    return paths


def figure_files(tracking_uri: str, cells: pd.DataFrame, shown: pd.DataFrame, out: Path) -> list[Path]:
    """Figure 3, Figure 5 and the learning curves of the runs the tables show (``chosen_runs``), the
    privacy-utility figure of a suite with a privacy axis and the deployment figure of one with a deployment axis,
    as PNG files in ``out``."""
    history = read_histories(tracking_uri, list(shown["run_id"]))
    return (write_figures(cells, shown, history, out) + write_privacy_figures(cells, out)
            + write_deployment_figures(cells, deployment_facts(shown), out))


def leaderboard(suite: str, format: str = "markdown", out: str | Path = "leaderboards", *,
                tracking_uri: str | None = None, ci: bool = True, scale: str | None = None,
                figures: bool = True) -> list[Path]:
    """``fedarena leaderboard`` (``fedarena.leaderboard``): every applicable table of the suite (and its figures)
    written to ``out``."""
    return build_leaderboards(suite, resolve_uri(tracking_uri), str(out), format, ci, scale=scale, figures=figures)
