"""The ``fedarena`` command: run, bench, leaderboard, ui, data; a thin layer over ``fedarena.api``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tqdm import tqdm

from fedarena.bench.commands import add_include
from fedarena.config import ExperimentConfig, parse_value
from fedarena.errors import ConfigError
from fedarena.registry import UnknownNameError

# flag -> config key (top level or "section.key")
RUN_FLAGS = {
    "dataset": "dataset.name", "model": "model.name", "method": "method.name", "attack": "attack.name",
    "level": "attack.level", "aggregator": "aggregator.name", "privacy": "privacy.name", "system": "system.name",
    "sampling": "sampling",
    "rounds": "rounds",
    "clients_per_round": "clients_per_round", "local_steps": "local_steps", "local_epochs": "local_epochs",
    "batch_size": "batch_size", "lr": "lr", "seed": "seed", "eval_every": "eval_every", "backend": "backend",
    "device": "device",
}


def add_run_parser(sub) -> None:
    p = sub.add_parser("run", help="run one federated experiment and write its result as JSON")
    p.add_argument("--config", type=Path, help="YAML file with a config mapping (flags override it)")
    for flag, key in RUN_FLAGS.items():
        kind = {"rounds": int, "clients_per_round": int, "local_steps": int, "local_epochs": int,
                "batch_size": int, "seed": int, "eval_every": int, "lr": float, "level": float}.get(flag, str)
        p.add_argument("--" + flag.replace("_", "-"), type=kind, dest=flag, help=f"sets {key}")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any setting, e.g. lam=0.1, dataset.num_clients=50, aggregator.eps=0.5")
    p.add_argument("--out", type=_result_file, help="result JSON file (optional with --track)")
    p.add_argument("--track", action="store_true", help="also record the run in the tracking store, like a "
                                                        "benchmark trial (experiment --experiment)")
    p.add_argument("--experiment", default="adhoc", help="the store's experiment of a tracked run (default adhoc)")
    p.add_argument("--tracking-uri", help="MLflow store of --track (default: $MLFLOW_TRACKING_URI or ./mlflow.db)")
    add_include(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_run)





def _result_file(text: str) -> Path:
    """``--out``: a file name (its folder is created when the result is written), not an existing folder."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder; give a file name such as {path / 'result.json'}")
    return path


def config_from_args(args) -> ExperimentConfig:
    """The resolved config of ``fedarena run``'s file, flags and ``--set`` pairs (``api.make_config``: read and
    resolved once; ``api.run`` takes it as it is)."""
    from fedarena.api import make_config  # torch and the registries: not needed by `fedarena --help`

    flags = [(key, getattr(args, flag)) for flag, key in RUN_FLAGS.items() if getattr(args, flag) is not None]
    sets = []
    for item in args.set:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        sets.append((key.strip(), parse_value(text)))
    return make_config(args.config, [*flags, *sets])


def cmd_run(args) -> int:
    from fedarena import api
    from fedarena.simulation.experiment import write_result

    if args.out is None and not args.track:
        raise ConfigError("fedarena run needs --out FILE (the result JSON), --track (record it in the store), or both")
    api.load_plugins(args.include)  # before the config: its names may be a plugin's
    bars = []

    def start(trial):
        bars.append(tqdm(total=trial.cfg.rounds, disable=args.no_progress, unit="round",
                         desc=f"{trial.cfg.method['name']} on {trial.dataset.name}"))

    def on_round(state, metrics):
        bars[0].update(1)
        if metrics:
            bars[0].set_postfix(acc=f"{metrics['acc_pooled']:.3f}", std=f"{metrics['acc_std']:.3f}")

    result = api.run(config_from_args(args), include=args.include, track=args.track, experiment=args.experiment,
                     tracking_uri=args.tracking_uri, on_round=on_round, start=start)
    for bar in bars:
        bar.close()
    if args.out is not None:
        write_result(result.record, args.out)
    final = result.final
    where = " ".join(filter(None, [f"-> {args.out}" if args.out else "",
                                   f"(run {result.run_id} in experiment {args.experiment!r})" if result.run_id else ""]))
    print(f"round {final['round']}: acc_pooled={final['acc_pooled']:.4f} acc_std={final['acc_std']:.4f} "
          f"diverged={final['diverged']} {where}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from fedarena import commands  # the subcommands' modules load torch, Ray or MLflow

    parser = argparse.ArgumentParser(prog="fedarena", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    add_run_parser(sub)
    for module in commands.MODULES:  # subcommands defined next to the parts they drive (data, bench, ...)
        module.add_parser(sub)
    return parser


def check_store_early(argv: list[str]) -> None:
    """``bench run``'s, ``evaluate``'s, ``tune``'s and ``site``'s tracking store, checked before the subcommands load torch, Ray and MLflow:
    a store file that is not a database, or a read-only folder, is one line in milliseconds."""
    if argv[:2] != ["bench", "run"] and argv[:1] not in (["evaluate"], ["tune"], ["site"]):
        return
    from fedarena.tracking.location import check_local_store, tracking_uri

    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--tracking-uri")
    known, _ = early.parse_known_args(argv[1:])
    check_local_store(tracking_uri(known.tracking_uri))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        check_store_early(argv)
        args = build_parser().parse_args(argv)
        return args.func(args)
    except (ConfigError, UnknownNameError) as err:
        print(f"fedarena: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before a command's own handling (e.g. while loading): no traceback
        print("fedarena: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
