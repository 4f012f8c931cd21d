"""``fedarena leaderboard SUITE`` (the papers' tables) and ``fedarena report SUITE`` (one HTML page), from the store."""

from __future__ import annotations

import argparse

from fedarena.config import SCALES, folder_arg

# ``fedarena leaderboard --out``: a folder (created if absent), not an existing file
OUT_FOLDER = folder_arg("give a folder for the tables and figures")


def add_parser(sub) -> None:
    p = sub.add_parser("leaderboard", help="build Table 1/2/3-style leaderboards from the MLflow store")
    p.add_argument("suite", help="suite (= MLflow experiment) name, e.g. robustness")
    p.add_argument("--format", default="markdown", choices=("latex", "markdown", "html", "csv"))
    p.add_argument("--out", type=OUT_FOLDER, default="leaderboards", help="output directory")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI or ./mlflow.db)")
    p.add_argument("--scale", choices=SCALES, help="only runs of this scale")
    p.add_argument("--no-ci", action="store_true",
                   help="means only (default: mean ± 95%% confidence interval over seeds where a cell has >= 2)")
    p.add_argument("--ci", action="store_true", help=argparse.SUPPRESS)  # the default now; kept for old scripts
    p.add_argument("--no-figures", action="store_true", help="tables only")
    p.set_defaults(func=run)
    _add_report_parser(sub)


def _add_report_parser(sub) -> None:
    p = sub.add_parser("report", help="one self-contained HTML page: every table, the figures, the provenance")
    p.add_argument("suite", help="suite (= MLflow experiment) name, e.g. robustness")
    p.add_argument("--out", default="report", help="folder of the page (written as SUITE.html; default: report)")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI or ./mlflow.db)")
    p.add_argument("--scale", choices=SCALES, help="only runs of this scale (default: the most thorough present)")
    p.add_argument("--no-ci", action="store_true", help="means only in the tables (no confidence intervals)")
    p.set_defaults(func=run_report)


def run(args) -> int:
    from fedarena.leaderboards import build_leaderboards
    from fedarena.leaderboards.build import redacted_errors
    from fedarena.tracking.location import tracking_uri

    uri = tracking_uri(args.tracking_uri)
    _check_store(uri)
    with redacted_errors(uri):  # its messages name the store: never with its password
        paths = build_leaderboards(args.suite, uri, args.out, args.format, ci=not args.no_ci, scale=args.scale,
                                   figures=not args.no_figures)
    for path in paths:
        print(path)
    return 0


def run_report(args) -> int:
    from fedarena.report.build import writable_folder, write_report
    from fedarena.tracking.location import tracking_uri

    uri = tracking_uri(args.tracking_uri)
    folder = writable_folder(args.out)  # before reading anything
    _check_store(uri)
    print(write_report(args.suite, uri, folder, ci=not args.no_ci, scale=args.scale))
    return 0


def _check_store(uri: str) -> None:
    """A driver missing, a corrupt file, a server that does not answer: one line. A missing local store is
    left to the reader, which says how to fill it (checking would create an empty one)."""
    from fedarena.tracking.location import local_store_path
    from fedarena.tracking.store import check_store

    local = local_store_path(uri)
    if local is None or local.exists():
        check_store(uri)
