"""``fedarena leaderboard SUITE``: the papers' tables from the store."""

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


def run(args) -> int:
    from fedarena.leaderboards.build import leaderboard, redacted_errors
    from fedarena.tracking.location import tracking_uri
    from fedarena.tracking.store import check_store_if_present

    uri = tracking_uri(args.tracking_uri)
    check_store_if_present(uri)
    with redacted_errors(uri):  # its messages name the store: never with its password
        paths = leaderboard(args.suite, args.format, args.out, tracking_uri=uri, ci=not args.no_ci,
                                scale=args.scale, figures=not args.no_figures)
    for path in paths:
        print(path)
    return 0
