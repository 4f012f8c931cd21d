"""``fedarena report SUITE``: one self-contained HTML page of a suite, from the store."""

from __future__ import annotations

from fedarena.config import SCALES


def add_parser(sub) -> None:
    p = sub.add_parser("report", help="one self-contained HTML page: every table, the figures, the provenance")
    p.add_argument("suite", help="suite (= MLflow experiment) name, e.g. robustness")
    p.add_argument("--out", default="report", help="folder of the page (written as SUITE.html; default: report)")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI or ./mlflow.db)")
    p.add_argument("--scale", choices=SCALES, help="only runs of this scale (default: the most thorough present)")
    p.add_argument("--no-ci", action="store_true", help="means only in the tables (no confidence intervals)")
    p.set_defaults(func=run_report)


def run_report(args) -> int:
    from fedarena.report.compose import writable_folder, write_report
    from fedarena.tracking.location import tracking_uri
    from fedarena.tracking.store import check_store_if_present

    uri = tracking_uri(args.tracking_uri)
    folder = writable_folder(args.out)  # before reading anything
    check_store_if_present(uri)
    print(write_report(args.suite, uri, folder, ci=not args.no_ci, scale=args.scale))
    return 0
