"""``fedarena evaluate``: the standard threat battery against one component, and its robustness card."""

from __future__ import annotations

from fedarena.bench.commands import STORAGE, _number, add_include
from fedarena.config import SCALES, folder_arg, parse_value
from fedarena.errors import ConfigError

OUT = folder_arg("give a folder for the card (card.md, card.json)")


def add_parser(sub) -> None:
    p = sub.add_parser("evaluate", help="run the standard threat battery against a component: its robustness card")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--aggregator", help="a registered aggregator (defense), under FedAvg")
    which.add_argument("--method", help="a registered method, with the plain mean")
    which.add_argument("--builtin", action="store_true", help="every built-in aggregator and method (the ranks' rows)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a hyperparameter of the component, e.g. beta=0.1 (repeatable)")
    add_include(p)
    p.add_argument("--isolate", action="store_true",
                   help="run the --include'd aggregator in a bubblewrap sandbox, never in a trial's process (the site's "
                        "rerun of a submission)")
    p.add_argument("--scale", choices=SCALES, default="quick")
    p.add_argument("--out", type=OUT, help="folder of card.md and card.json (--builtin: one pair per component)")
    p.add_argument("--claim", help="a JSON file of what a paper claims: clean_acc and robust_acc {\"attack@level\": acc}")
    p.add_argument("--tuned", help="a frozen choice of `fedarena tune --aggregator/--method` at this scale")
    p.add_argument("--tracking-uri", help="MLflow store (default: $MLFLOW_TRACKING_URI or sqlite ./mlflow.db)")
    p.add_argument("--storage", type=STORAGE, default="ray_results", help="Ray Tune storage path (checkpoints)")
    p.add_argument("--num-cpus", type=_number(int, 1), help="CPUs of the local Ray instance (default: all)")
    p.set_defaults(func=cmd_evaluate)


def cmd_evaluate(args) -> int:
    import logging

    from fedarena.battery.harness import evaluate

    logging.getLogger("mlflow").setLevel(logging.WARNING)  # store creation and migrations log at INFO
    logging.getLogger("alembic").setLevel(logging.WARNING)
    settings = {}
    for item in args.set:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        settings[key.strip()] = parse_value(text)
    evaluate(args.aggregator, args.method, builtin=args.builtin, settings=settings, include=args.include,
             scale=args.scale, out=args.out, claim=args.claim, tracking_uri=args.tracking_uri, storage=args.storage,
             num_cpus=args.num_cpus, tuned=args.tuned, isolate=args.isolate)
    return 0
