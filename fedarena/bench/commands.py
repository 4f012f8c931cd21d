"""Subcommands ``fedarena bench list``, ``fedarena bench run SUITE`` and ``fedarena ui``."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import subprocess
import sys

from fedarena.config import SCALES, folder_arg
from fedarena.errors import ConfigError
from fedarena.registry import UnknownNameError

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
# ``--storage``: a local folder (created if absent) or a remote URI such as s3://bucket/path
STORAGE = folder_arg("give a folder for the checkpoints (or a URI such as s3://bucket/path)", uri=True)


def add_parser(sub) -> None:
    bench = sub.add_parser("bench", help="benchmark suites: a grid on Ray Tune, every trial an MLflow run")
    bench_sub = bench.add_subparsers(dest="bench_command", required=True)
    listing = bench_sub.add_parser("list", help="the shipped suites with their trial counts per scale")
    listing.add_argument("--no-check", action="store_true", help="counts only; skip validating the trials")
    add_include(listing)
    listing.set_defaults(func=cmd_list)
    _add_run_parser(bench_sub)
    ui = sub.add_parser("ui", help="start the MLflow UI on the benchmark's tracking store")
    ui.add_argument("--host", default="127.0.0.1", help="address to bind (default: localhost only)")
    ui.add_argument("--port", type=_number(int, 1, 65535), default=5000)
    ui.add_argument("--tracking-uri", help="store to show (default: $MLFLOW_TRACKING_URI or ./mlflow.db)")
    ui.add_argument("--suite", help="suite whose runs table to open (default: the suite run most recently)")
    ui.set_defaults(func=cmd_ui)


def _add_run_parser(bench_sub) -> None:
    p = bench_sub.add_parser("run", help="run a suite (finished trials are skipped, interrupted ones resumed)")
    p.add_argument("suite", help="a shipped suite name (see `fedarena bench list`) or a YAML file")
    p.add_argument("--scale", choices=SCALES, default="quick")
    p.add_argument("--dataset", help="only this dataset of the scale (label or name), or run the grid on "
                                     "another registered dataset")
    p.add_argument("--seeds", type=_seeds, help="comma-separated seeds replacing the scale's, e.g. 0,1,2")
    p.add_argument("--cpus-per-trial", type=_number(float, 0, above=True), default=1.0)
    p.add_argument("--gpus-per-trial", type=_number(float, 0), default=0.0,
                   help="GPUs per trial; fractions share a GPU (e.g. 0.25: four trials per GPU); >0 runs on CUDA")
    p.add_argument("--max-concurrent", type=_number(int, 1), help="most trials at once (default: as resources allow)")
    p.add_argument("--max-failures", type=_number(int, 0), default=2, help="retries of a failed trial from its checkpoint")
    p.add_argument("--checkpoint-every", type=_number(int, 0), help="rounds between checkpoints (default: ~10 per trial)")
    p.add_argument("--storage", type=STORAGE, default="ray_results", help="Ray Tune storage path (checkpoints)")
    p.add_argument("--tracking-uri", help="MLflow store (default: $MLFLOW_TRACKING_URI or sqlite ./mlflow.db)")
    p.add_argument("--num-cpus", type=_number(int, 1), help="CPUs of the local Ray instance (default: all)")
    p.add_argument("--dry-run", action="store_true",
                   help="validate, build every trial's plan without training, and show it; run nothing")
    p.add_argument("--retry-failed", action="store_true",
                   help="also run trials that failed before with an error a retry cannot fix (skipped by default)")
    p.add_argument("--tuned", help="a frozen choice of `fedarena tune` for this suite and scale: its rows' values")
    add_include(p)
    p.set_defaults(func=cmd_bench_run)


def add_include(parser) -> None:
    """``--include PATH`` (repeatable): a plugin file or package (``fedarena.plugins``)."""
    parser.add_argument("--include", action="append", default=[], metavar="PATH",
                        help="a plugin: a .py file or a package folder registering components (repeatable; "
                             "also $FEDARENA_INCLUDE and installed fedarena.plugins entry points)")


def _number(kind: type, low: float, high: float | None = None, above: bool = False):
    """An argparse type: a number of ``kind`` >= ``low`` (> with ``above``), <= ``high`` if given."""
    bounds = f"{'>' if above else '>='} {low:g}" + (f" and <= {high:g}" if high is not None else "")
    noun = "an integer" if kind is int else "a number"

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {noun} {bounds}, got {text!r}") from None
        if value != value or value < low or (above and value == low) or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"expected {noun} {bounds}, got {text!r}")
        return value

    return parse


def _seeds(text: str) -> tuple[int, ...]:
    try:
        seeds = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"seeds are comma-separated integers, got {text!r}") from None
    if not seeds or any(s < 0 for s in seeds):
        raise argparse.ArgumentTypeError(f"give at least one seed >= 0, got {text!r}")
    return seeds


def cmd_bench_run(args) -> int:
    from fedarena.bench.guard import SIGTERM_EXIT  # the store was checked first (``cli.check_store_early``)
    from fedarena.bench.runner import benchmark

    logging.getLogger("mlflow").setLevel(logging.WARNING)  # store creation and migrations log at INFO
    logging.getLogger("alembic").setLevel(logging.WARNING)

    summary = benchmark(
        args.suite, args.scale, include=args.include, tracking_uri=args.tracking_uri, dataset=args.dataset,
        seeds=args.seeds, cpus_per_trial=args.cpus_per_trial, gpus_per_trial=args.gpus_per_trial,
        max_concurrent=args.max_concurrent, max_failures=args.max_failures, checkpoint_every=args.checkpoint_every,
        storage=args.storage, num_cpus=args.num_cpus, dry_run=args.dry_run, retry_failed=args.retry_failed,
        tuned=args.tuned,
    )  # fmt: skip
    code = SIGTERM_EXIT if summary.terminated else 0 if summary.ok else 2 if summary.unbuildable else 1
    if summary.ray_stuck:  # Ray's processes are gone and its exit handlers would wait for them: leave now
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def suite_rows(check: bool = True) -> list[tuple[str, dict[str, int], str, list[str]]]:
    """(name, trials per scale, reference, problems) for every shipped suite."""
    from fedarena.suites import SUITES
    from fedarena.suites.grid import count_trials, expand
    from fedarena.suites.parse import load_suite

    rows = []
    for name in SUITES.names():
        try:
            suite = load_suite(name, check_names=False)
        except ConfigError as err:
            rows.append((name, {}, "", [str(err)]))
            continue
        counts = {scale: count_trials(suite, scale) for scale in suite.scales}  # a suite defines some scales
        problems = [p for scale in suite.scales if check and (p := _problem(suite, scale, expand))]
        rows.append((name, counts, suite.reference or suite.description, problems))
    return rows


def _problem(suite, scale: str, expand) -> str | None:
    try:
        expand(suite, scale)
    except (ConfigError, UnknownNameError) as err:
        return f"{scale}: {err}"
    return None


def cmd_list(args) -> int:
    from fedarena.bench.coverage import coverage, coverage_lines, shipped_suites
    from fedarena.contracts import load_checked

    load_checked(args.include)
    rows = suite_rows(check=not args.no_check)
    print(f"{'suite':<16}{'smoke':>7}{'quick':>7}{'paper':>7}  reference")
    for name, counts, reference, _ in rows:
        cells = "".join(f"{counts.get(s, '-'):>7}" for s in SCALES)
        print(f"{name:<16}{cells}  {reference.splitlines()[0] if reference else ''}")
    invalid = [(name, p) for name, _, _, problems in rows for p in problems]
    for name, problem in invalid:
        print(f"  ! {name} {problem}")
    print("\n" + "\n".join(coverage_lines(coverage(shipped_suites()))))
    return 1 if invalid else 0


def ui_command(uri: str, host: str, port: int) -> list[str]:
    """The MLflow UI command line on the benchmark's store (artifacts beside a local SQLite store)."""
    from fedarena.tracking.location import artifact_root

    cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", host, "--port", str(port)]
    root = artifact_root(uri)
    if root is not None:
        cmd += ["--default-artifact-root", root.resolve().as_uri()]
    return cmd


def check_listen(host: str, port: int) -> None:
    """The UI can listen on host:port (the MLflow server would log the failure and exit 0)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as err:
        raise ConfigError(f"the UI cannot listen on {host}:{port} ({err.strerror or err}); choose another --port, "
                          f"or --host 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)") from None


def cmd_ui(args) -> int:
    from fedarena.tracking.location import redact, sqlite_path, tracking_uri
    from fedarena.tracking.store import check_store
    from fedarena.tracking.view import pick_suite, prepare_view, runs_url

    uri = tracking_uri(args.tracking_uri)
    db = sqlite_path(uri)
    if db is not None and not db.exists():
        raise ConfigError(f"no tracking store at {db}; fill it with `make benchmark` (fedarena bench run SUITE) "
                          f"or point --tracking-uri / $MLFLOW_TRACKING_URI at an existing one")
    client = check_store(uri)  # a missing driver, a corrupt file or a server that does not answer: one line, now
    check_listen(args.host, args.port)
    view = prepare_view(client, pick_suite(client, redact(uri), args.suite))  # runs table, metric columns
    print(f"MLflow UI: http://{args.host}:{args.port}  (store: {redact(uri)}; Ctrl+C stops it)", flush=True)
    described = f"; {view.described} run descriptions written" if view.described else ""
    print(f"suite {view.name!r} ({view.runs} runs{described}), accuracy and fairness columns: "
          f"{runs_url(args.host, args.port, view.experiment_id)}", flush=True)
    if args.host not in LOCAL_HOSTS:
        print(f"warning: listening on {args.host}: other machines can reach this UI", flush=True)
    server = subprocess.Popen(ui_command(uri, args.host, args.port))
    try:
        return server.wait()
    except KeyboardInterrupt:  # stop the server and its workers (SIGTERM), not just the wrapper
        server.terminate()
        server.wait(timeout=30)
        return 0
