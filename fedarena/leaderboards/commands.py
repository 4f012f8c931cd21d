"""``fedarena leaderboard SUITE`` (the papers' tables) and ``fedarena report SUITE`` (one HTML page), from the store."""

from __future__ import annotations

import argparse
from pathlib import Path

from fedarena.config import SCALES


def add_parser(sub) -> None:
    p = sub.add_parser("leaderboard", help="build Table 1/2/3-style leaderboards from the MLflow store")
    p.add_argument("suite", help="suite (= MLflow experiment) name, e.g. robustness")
    p.add_argument("--format", default="markdown", choices=("latex", "markdown", "html", "csv"))
    p.add_argument("--out", type=_out_folder, default="leaderboards", help="output directory")
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


def _out_folder(text: str) -> str:
    """``--out``: a folder (created if absent), not an existing file."""
    if Path(text).exists() and not Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file; give a folder for the tables and figures")
    return text


def run(args) -> int:
    from fedarena.leaderboards import build_leaderboards
    from fedarena.leaderboards.reader import LeaderboardError, local_store_path
    from fedarena.tracking.location import redact, tracking_uri
    from fedarena.tracking.store import check_store

    uri = tracking_uri(args.tracking_uri)
    local = local_store_path(uri)
    if local is None or local.exists():  # a missing local store: the reader says how to fill it, creating none
        check_store(uri)  # a missing driver, a corrupt file, a server that does not answer: one line
    try:
        paths = build_leaderboards(args.suite, uri, args.out, args.format, ci=not args.no_ci, scale=args.scale,
                                   figures=not args.no_figures)
    except LeaderboardError as err:  # its messages name the store: never with its password
        raise LeaderboardError(str(err).replace(uri, redact(uri))) from None
    for path in paths:
        print(path)
    return 0


def run_report(args) -> int:
    from fedarena.leaderboards.reader import local_store_path
    from fedarena.leaderboards.report import build_report, writable_folder
    from fedarena.tracking.location import tracking_uri
    from fedarena.tracking.store import check_store

    uri = tracking_uri(args.tracking_uri)
    writable_folder(args.out)  # before reading anything
    local = local_store_path(uri)
    if local is None or local.exists():  # a missing local store: the reader says how to fill it, creating none
        check_store(uri)
    print(build_report(args.suite, uri, args.out, ci=not args.no_ci, scale=args.scale))
    return 0
