"""``fedarena report SUITE`` / ``make report``: one self-contained HTML page with a suite's results.

The page holds every leaderboard table (``build.leaderboard_tables``, as ``fedarena leaderboard`` writes
them; the ``worst_case`` table in a section of its own: each row against the attack that hurt it most at
every level where several attacks ran; where a targeted attack ran, the ``backdoor`` table in one too: clean
accuracy / attack success rate (std) per row and attack; where the suite asks for them, the ``costs`` table in
one too: what each side pays), the reproduction view where a paper's dataset was
run, the figures (Ditto Figure 3 and 5, the learning curves, and the fairness view: accuracy across benign
devices per main method), and the runs' provenance (code versions, dataset fingerprints, seeds, scale). It is
written to ``OUT/<suite>.html``.

Errors are one line (``ReportError`` or ``LeaderboardError``, both ConfigErrors): a folder that cannot be
written (checked first, before any reading), a missing or empty store, an unknown suite, a suite without
finished runs.
"""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from fedarena import __version__
from fedarena.battery.definition import NAME as BATTERY
from fedarena.battery.harness import cards_table, report_cards
from fedarena.errors import ConfigError
from fedarena.leaderboards.build import figure_files, redacted_errors, suite_tables
from fedarena.leaderboards.costs_table import NAME as COSTS
from fedarena.leaderboards.deployment_table import NAME as DEPLOYMENT
from fedarena.leaderboards.figures import file_stem, in_the_lab, without_privacy
from fedarena.leaderboards.selection import chosen_runs
from fedarena.leaderboards.specs import BACKDOOR, PRIVACY, PRIVACY_AUDIT, WORST_CASE
from fedarena.leaderboards.tables import Table
from fedarena.report.devices import write_device_figures
from fedarena.report.page import Section, figure_lines, render_page, table_lines
from fedarena.report.provenance import provenance_tables
from fedarena.tracking.location import redact
from fedarena.tracking.reading import read_client_tables
from fedarena.tuning.curves import tuning_curves, write_tuning_figures

REPRODUCTION = "reproduction"


class ReportError(ConfigError):
    """The report cannot be written (the message names the folder and what to do)."""


def writable_folder(out: str | Path) -> Path:
    """``out``, created if absent, after checking a file can be written there (before any work is done)."""
    folder = Path(out)
    if folder.exists() and not folder.is_dir():
        raise ReportError(f"report folder {folder} is a file; give a folder with --out (the page is written "
                          f"there as SUITE.html)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        raise ReportError(f"cannot write the report into {folder}: {err.strerror or err}; give a writable "
                          f"folder with --out") from None
    return folder


def figures(uri: str, cells: pd.DataFrame, prepared: pd.DataFrame, folder: Path) -> tuple[list[Path], int]:
    """The figure files (Figure 3, 5, curves, device accuracies) in ``folder``; and runs without a client table."""
    shown = chosen_runs(prepared, cells)
    paths = figure_files(uri, cells, shown, folder)
    clients, missing = read_client_tables(uri, list(shown["run_id"]))
    lab_cells, lab_runs = in_the_lab(without_privacy(cells)), in_the_lab(without_privacy(shown))
    return paths + write_device_figures(lab_cells, lab_runs, clients, folder), missing


def ordered_figures(paths: list[Path]) -> list[Path]:
    """Per dataset: Figure 3, Figure 5, learning curves, device accuracies, privacy against accuracy, the
    deployments' worst case."""
    kinds = ("figure3", "figure5", "curves", "devices", "privacy", "deployment")
    return sorted(paths, key=lambda p: (p.stem.split("_", 1)[1], kinds.index(p.stem.split("_", 1)[0])))


def sections(tables: list[Table], figure_paths: list[Path], prepared: pd.DataFrame, missing: int,
             cards: list[Table] | None = None, tuning: list[Path] | None = None) -> list[Section]:
    boards = [t for t in tables if t.name not in (REPRODUCTION, WORST_CASE, BACKDOOR, PRIVACY, PRIVACY_AUDIT,
                                                  DEPLOYMENT, COSTS)]
    deployment = [t for t in tables if t.name == DEPLOYMENT]  # a suite with a deployment axis
    costs = [t for t in tables if t.name == COSTS]  # a suite that asks for its costs (``costs:``)
    privacy = [t for t in tables if t.name in (PRIVACY, PRIVACY_AUDIT)]  # a suite with a privacy axis; its audit
    view = [t for t in tables if t.name == REPRODUCTION]
    worst = [t for t in tables if t.name == WORST_CASE]
    backdoor = [t for t in tables if t.name == BACKDOOR]  # only where a targeted attack ran: no empty section
    no_view = ["<p>No paper dataset was run (only stand-in datasets): nothing to compare with the papers' "
               "numbers.</p>"]
    no_clients = [f"<p>{missing} run(s) have no per-client table (clients.csv): left out of the device "
                  f"accuracies.</p>"] if missing else []
    no_worst = ["<p>No dataset ran two or more attacks at one level: no worst case over attacks.</p>"]
    return [
        *([Section("robustness-cards", "Robustness cards", table_lines(cards))] if cards else []),
        Section("leaderboards", "Leaderboards", table_lines(boards)),
        Section("worst-case", "Worst case over attacks", table_lines(worst) if worst else no_worst),
        *([Section("backdoor", "Backdoor attacks", table_lines(backdoor))] if backdoor else []),
        *([Section("privacy", "Privacy", table_lines(privacy))] if privacy else []),
        *([Section("deployment", "Deployment", table_lines(deployment))] if deployment else []),
        *([Section("costs", "Costs", table_lines(costs))] if costs else []),
        Section("reproduction", "Reproduction of the papers", table_lines(view) if view else no_view),
        Section("figures", "Figures", figure_lines(ordered_figures(figure_paths)) + no_clients),
        *([Section("tuning", "Tuning", figure_lines(tuning))] if tuning else []),
        Section("provenance", "Provenance", table_lines(provenance_tables(prepared))),
    ]


def meta(suite: str, uri: str, prepared: pd.DataFrame, now: datetime) -> list[tuple[str, str]]:
    scales = ", ".join(sorted(set(prepared["scale"].dropna().astype(str)))) if "scale" in prepared else "unknown"
    return [("suite", suite), ("tracking store", redact(uri)), ("scale", scales),
            ("finished runs shown", str(len(prepared))),
            ("generated", f"{now:%Y-%m-%d %H:%M} UTC by fedarena {__version__}")]


def build_report(suite: str, tracking_uri: str, out_dir: str | Path, *, ci: bool = True, scale: str | None = None,
                 now: datetime | None = None) -> Path:
    """Write ``out_dir/<suite>.html`` (see the module docstring); returns its path."""
    return write_report(suite, tracking_uri, writable_folder(out_dir), ci=ci, scale=scale, now=now)


def write_report(suite: str, tracking_uri: str, folder: Path, *, ci: bool = True, scale: str | None = None,
                 now: datetime | None = None) -> Path:
    """:func:`build_report` into a folder :func:`writable_folder` returned (the CLI checks it before the store)."""
    with redacted_errors(tracking_uri):
        tables, cells, prepared = suite_tables(suite, tracking_uri, ci=ci, scale=scale)
    facts = meta(suite, tracking_uri, prepared, now or datetime.now(UTC))
    cards = [cards_table(report_cards(prepared))] if suite == BATTERY else None  # one card per component
    with tempfile.TemporaryDirectory() as tmp:
        paths, missing = figures(tracking_uri, cells, prepared, Path(tmp))
        tuning = write_tuning_figures(tuning_curves(tracking_uri, suite), Path(tmp))  # best-so-far per tuned row
        page = render_page(f"fedarena report: {suite}", facts,
                           sections(tables, paths, prepared, missing, cards, tuning))
    path = folder / f"{file_stem(suite)}.html"
    try:
        path.write_text(page, encoding="utf-8")
    except OSError as err:
        raise ReportError(f"cannot write {path}: {err.strerror or err}; give a writable folder with --out") from None
    return path
