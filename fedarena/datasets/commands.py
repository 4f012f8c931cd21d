"""``fedarena data fetch NAME`` and ``fedarena data info NAME``."""

from __future__ import annotations

import json
import os

from fedarena.config import folder_arg
from fedarena.errors import ConfigError

# ``--data-dir``: a folder (created by ``fetch`` if absent), not an existing file
DATA_DIR = folder_arg("give the data folder (default: $FEDARENA_DATA_DIR or ~/.cache/fedarena)")


def add_parser(sub) -> None:
    p = sub.add_parser("data", help="download, verify and inspect datasets")
    p.add_argument("action", choices=("fetch", "info", "list"), help="fetch: download + verify; info: what is present")
    p.add_argument("name", nargs="?", help="dataset name (see `fedarena data list`)")
    p.add_argument("--data-dir", type=DATA_DIR, help="data cache directory (default: $FEDARENA_DATA_DIR or ~/.cache/fedarena)")
    p.add_argument("--json", action="store_true", help="info as JSON")
    p.add_argument("--no-verify", action="store_true", help="info: skip checksums")
    p.add_argument("--include", action="append", default=[], metavar="PATH",
                   help="a plugin (a .py file or a package folder) whose datasets to list (repeatable)")
    p.set_defaults(func=run)


def run(args) -> int:
    from fedarena.datasets.catalog import DATASETS
    from fedarena.datasets.files.fetch import fetch, info, info_text  # torch: not needed by `fedarena --help`
    from fedarena.plugins import load_plugins

    load_plugins(args.include)
    if args.data_dir:  # an environment setting, not a config key: the data location is not part of a trial's identity
        os.environ["FEDARENA_DATA_DIR"] = args.data_dir
    if args.action == "list":
        print("\n".join(f"{n:18s} model={DATASETS.get(n).model}" for n in DATASETS.names()))
        return 0
    if not args.name:
        raise ConfigError(f"`fedarena data {args.action}` needs a dataset name; available: {', '.join(DATASETS.names())}")
    if args.action == "fetch":
        print(fetch(args.name, args.data_dir))
    elif args.json:
        print(json.dumps(info(args.name, args.data_dir, verify=not args.no_verify), indent=2))
    else:
        print(info_text(args.name, args.data_dir, verify=not args.no_verify))
    return 0
