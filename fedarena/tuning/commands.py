"""``fedarena tune``: every row of a suite (or one component's battery row) tuned with the same budget."""

from __future__ import annotations

from fedarena.bench.commands import STORAGE, _number, add_include
from fedarena.config import SCALES


def add_parser(sub) -> None:
    p = sub.add_parser("tune", help="tune every row with the same budget against the tuning battery's worst case")
    p.add_argument("suite", nargs="?", help="a shipped suite name or a YAML file (or --aggregator / --method)")
    p.add_argument("--aggregator", help="tune this aggregator's battery row (under FedAvg) instead of a suite")
    p.add_argument("--method", help="tune this method's battery row (with the plain mean) instead of a suite")
    p.add_argument("--scale", choices=SCALES, default="quick")
    p.add_argument("--budget", type=int, required=True, help="configurations every row gets (>= 1)")
    p.add_argument("--out", required=True, help="the frozen choice (YAML) for bench run / evaluate --tuned")
    p.add_argument("--rows", help="comma-separated row labels (default: every row of the scale)")
    p.add_argument("--searcher", default="random", help="random (default) or optuna (needs the optuna package)")
    p.add_argument("--seed", type=_number(int, 0), default=0, help="the searcher's seed")
    p.add_argument("--keys", default="lr", help="shared keys every row searches, comma-separated (lr, local_steps)")
    p.add_argument("--space", action="append", default=[], metavar="KEY=DOMAIN",
                   help="add or replace a domain, e.g. aggregator.lam='loguniform(0.0001, 0.01)' (repeatable)")
    add_include(p)
    p.add_argument("--tracking-uri", help="MLflow store (default: $MLFLOW_TRACKING_URI or sqlite ./mlflow.db)")
    p.add_argument("--storage", type=STORAGE, default="ray_results", help="Ray Tune storage path (its experiments)")
    p.add_argument("--num-cpus", type=_number(int, 1), help="CPUs of the local Ray instance (default: all)")
    p.set_defaults(func=cmd_tune)


def cmd_tune(args) -> int:
    from fedarena.tuning.search import parse_space_args, tune

    rows = tuple(r.strip() for r in args.rows.split(",") if r.strip()) if args.rows else None
    keys = tuple(k.strip() for k in args.keys.split(",") if k.strip())
    tune(args.suite, scale=args.scale, budget=args.budget, out=args.out, aggregator=args.aggregator,
         method=args.method, rows=rows, searcher=args.searcher, seed=args.seed, keys=keys,
         space=parse_space_args(args.space), include=args.include, tracking_uri=args.tracking_uri,
         storage=args.storage, num_cpus=args.num_cpus)
    return 0
