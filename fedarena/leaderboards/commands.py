"""``fedarena leaderboard SUITE``: the papers' tables from the tracking store."""

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
