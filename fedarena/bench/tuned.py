"""The frozen choice of ``fedarena tune``: a YAML file per suite and scale, and how a suite run uses it.

    fedarena_tuned: 1
    suite: robustness
    scale: quick
    budget: 8                       # configurations every row got
    searcher: random
    seed: 0
    battery_version: 2
    objective: worst val_acc_pooled over a1, a2, alie, min_max at 0.2
    rows:
      krum:
        digits: {values: {lr: 0.31}, trials: 8, objective: 0.71, curve: [0.5, 0.6, 0.71, ...], key: 3f...}

``bench run --tuned FILE`` and ``fedarena evaluate --tuned FILE`` set each tuned row's values on its dataset
(an override of the suite; a tuned row's ``select`` is dropped) and tag every run with the budget
(``tuned_budget``), the tuned rows (``tuned_rows``) and the file's digest (``tuned_file``); the tables say which
rows are tuned, with what budget.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from fedarena.bench.select import with_setting
from fedarena.bench.suite import Rule, Suite
from fedarena.config import load_yaml
from fedarena.errors import ConfigError


class TuneError(ConfigError):
    """A tuning request or frozen choice that cannot be used: a bad budget, space, row or file."""


FORMAT = 1
TOP_KEYS = ("fedarena_tuned", "suite", "scale", "budget", "searcher", "seed", "battery_version", "objective", "rows",
            "skipped")


def write_frozen(data: dict, path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"fedarena_tuned": FORMAT, **data}, sort_keys=False), encoding="utf-8")


def read_frozen(path: str | Path) -> dict:
    """The file, checked (one line naming the file on any problem)."""
    path = Path(path)
    if not path.is_file():
        raise TuneError(f"--tuned {path}: no such file; write one with `fedarena tune SUITE --out {path}`")
    try:
        data = load_yaml(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise TuneError(f"--tuned {path}: not YAML ({' '.join(str(err).split())})") from None
    if not isinstance(data, dict) or data.get("fedarena_tuned") != FORMAT:
        raise TuneError(f"--tuned {path}: not a file `fedarena tune` wrote (no fedarena_tuned: {FORMAT})")
    unknown = sorted(set(data) - set(TOP_KEYS))
    missing = [k for k in ("suite", "scale", "budget", "rows") if k not in data]
    if unknown or missing or not isinstance(data["rows"], dict):
        raise TuneError(f"--tuned {path}: unknown keys {unknown} or missing {missing} (keys: {', '.join(TOP_KEYS)})")
    return data


def digest(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]


def values_patch(values: dict[str, Any]) -> dict:
    """A suite patch setting the values (``aggregator.lam`` -> ``{aggregator: {lam: ...}}``)."""
    patch: dict = {}
    for key, value in values.items():
        patch = with_setting(patch, key, value)
    return patch


def with_tuned(suite: Suite, scale: str, path: str | Path) -> Suite:
    """``suite`` with the frozen values of ``path`` set on its tuned rows (see the module docstring)."""
    data = read_frozen(path)
    if data["suite"] != suite.name or data["scale"] != scale:
        raise TuneError(f"--tuned {path}: tuned for suite {data['suite']!r} at scale {data['scale']!r}, not "
                        f"{suite.name!r} at {scale!r}; tune this one with `fedarena tune {suite.name} --scale {scale}`")
    labels = {m.label for m in suite.methods}
    datasets = {d.label for d in suite.scales[scale].datasets}
    rules = []
    for row, per_dataset in data["rows"].items():
        if row not in labels:
            raise TuneError(f"--tuned {path}: row {row!r} is not in {suite.name}; its rows: {', '.join(sorted(labels))}")
        for dataset, choice in per_dataset.items():
            if dataset not in datasets:
                raise TuneError(f"--tuned {path}: dataset {dataset!r} of row {row!r} is not in {suite.name} at "
                                f"{scale}; its datasets: {', '.join(sorted(datasets))}")
            rules.append(Rule({"method": (row,), "dataset": (dataset,)}, values_patch(choice["values"]),
                              f"tuned {Path(path).name}: {row} {dataset}"))
    methods = tuple(replace(m, select=None) if m.label in data["rows"] else m for m in suite.methods)
    tags = {**suite.tags, "tuned_budget": str(data["budget"]), "tuned_file": digest(path),
            "tuned_rows": ",".join(sorted(data["rows"]))}
    return replace(suite, methods=methods, overrides=suite.overrides + tuple(rules), tags=tags)
