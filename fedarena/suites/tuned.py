"""The frozen choice of ``fedarena tune``: a YAML file per suite and scale, and how a suite run uses it.

    fedarena_tuned: 1
    suite: robustness
    scale: quick
    budget: 8                       # configurations every row got
    searcher: random
    seed: 0
    battery_version: 2
    tuning_seeds: [3]               # the run seeds the search ran on: none of the suite's reported seeds
    objective: worst val_acc_pooled over a1, a2, alie, min_max at 0.2 on seed 3 (no reported seed)
    rows:
      krum:
        digits: {values: {lr: 0.31}, trials: 8, objective: 0.71, curve: [0.5, 0.6, 0.71, ...], key: 3f...}
    skipped:                        # (row dataset) not tuned, and why
      bulyan digits: every tuning attack is left out at level 0.2

``bench run --tuned FILE`` and ``fedarena evaluate --tuned FILE`` run each tuned row as a row of its own, labelled
``<label>+tuned<budget>`` (``krum+tuned8``, ``aggregator.flame+tuned8``), so its cells and card never replace the
default row's: on the datasets it was tuned on it runs with the chosen values (set after every suite override;
its ``select`` is dropped there, the values were searched over it). On a dataset it was not tuned on (the file's
``skipped``) the row runs as written, under its own label, with its ``select``: the default row's trials. Rules
and scale subsets naming the row name its tuned row too. Every run is tagged with the budget
(``tuned_budget``), the tuned rows' labels (``tuned_rows``), the tuning seeds (``tuned_seeds``, where the file
records them) and the file's digest (``tuned_file``); the tables say which rows are tuned, with what budget and on
which seeds (``leaderboards.build.tuned_notes``). A file written before ``tuning_seeds`` existed was tuned on the
scale's first seed, a reported one.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from fedarena.config import load_yaml
from fedarena.errors import ConfigError
from fedarena.suites.select import with_setting
from fedarena.suites.spec import Rule, Suite
from fedarena.suites.tuned_labels import tuned_label


class TuneError(ConfigError):
    """A tuning request or frozen choice that cannot be used: a bad budget, space, row or file."""


FORMAT = 1
TOP_KEYS = ("fedarena_tuned", "suite", "scale", "budget", "searcher", "seed", "battery_version", "tuning_seeds",
            "objective", "rows", "skipped")


def tuned_label_of(suite: Suite, label: str) -> str:
    """The label ``label``'s row runs under in a suite made by ``with_tuned`` (itself where it is not tuned)."""
    tuned = tuned_label(label, suite.tags.get("tuned_budget"))
    return tuned if tuned in suite.tags.get("tuned_rows", "").split(",") else label


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
    seeds = data.get("tuning_seeds", [])
    if not isinstance(seeds, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise TuneError(f"--tuned {path}: tuning_seeds is a list of whole numbers, got {seeds!r}")
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
    """``suite`` with the frozen values of ``path`` set on its tuned rows, each a row of its own (see the module
    docstring)."""
    data = read_frozen(path)
    if data["suite"] != suite.name or data["scale"] != scale:
        raise TuneError(f"--tuned {path}: tuned for suite {data['suite']!r} at scale {data['scale']!r}, not "
                        f"{suite.name!r} at {scale!r}; tune this one with `fedarena tune {suite.name} --scale {scale}`")
    labels = {m.label for m in suite.methods}
    chosen = suite.scales[scale]
    datasets = [d.label for d in chosen.datasets]
    name = Path(path).name
    renamed: dict[str, str] = {}  # row -> its tuned row's label
    values: list[Rule] = []
    for row, per_dataset in data["rows"].items():
        if row not in labels:
            raise TuneError(f"--tuned {path}: row {row!r} is not in {suite.name}; its rows: {', '.join(sorted(labels))}")
        label = tuned_label(row, data["budget"])
        if label in labels:
            raise TuneError(f"--tuned {path}: the tuned row's label {label!r} is already a row of {suite.name}")
        for dataset, choice in per_dataset.items():
            if dataset not in datasets:
                raise TuneError(f"--tuned {path}: dataset {dataset!r} of row {row!r} is not in {suite.name} at "
                                f"{scale}; its datasets: {', '.join(sorted(datasets))}")
            values.append(Rule({"method": (label,), "dataset": (dataset,)}, values_patch(choice["values"]),
                               f"tuned {name}: {row} {dataset}"))
        if per_dataset:
            renamed[row] = label
    methods, split = [], []
    for entry in suite.methods:
        if entry.label not in renamed:
            methods.append(entry)
            continue
        label = renamed[entry.label]
        tuned = tuple(d for d in datasets if d in data["rows"][entry.label])
        untuned = tuple(d for d in datasets if d not in tuned)
        # the tuned values apply on ``tuned`` only: there the row is its tuned row, with no select (its values
        # were searched over it); elsewhere it runs as written, under its own label, select and all
        methods.append(replace(entry, label=label, select=None, where=f"{entry.where} (tuned {name})"))
        if untuned:
            methods.append(entry)
            split += [Rule({"method": (label,), "dataset": untuned}, None, f"tuned {name}: {entry.label} not tuned there"),
                      Rule({"method": (entry.label,), "dataset": tuned}, None, f"tuned {name}: {label} runs there")]
    scales = {key: replace(s, methods=_with_renamed(s.methods, renamed), exclude=_rules_renamed(s.exclude, renamed),
                           overrides=_rules_renamed(s.overrides, renamed) + (tuple(values) if key == scale else ()))
              for key, s in suite.scales.items()}  # the chosen values after every override, the scale's last
    tags = {**suite.tags, "tuned_budget": str(data["budget"]), "tuned_file": digest(path),
            "tuned_rows": ",".join(sorted(renamed.values())),
            **({"tuned_seeds": ",".join(map(str, data["tuning_seeds"]))} if data.get("tuning_seeds") else {})}
    return replace(suite, methods=tuple(methods), exclude=_rules_renamed(suite.exclude, renamed) + tuple(split),
                   overrides=_rules_renamed(suite.overrides, renamed), scales=scales, tags=tags)


def _with_renamed(labels: tuple[str, ...] | None, renamed: dict[str, str]) -> tuple[str, ...] | None:
    """A scale's method subset naming the tuned rows of the rows it names (None: every row)."""
    if labels is None:
        return None
    return tuple(labels) + tuple(renamed[label] for label in labels if label in renamed)


def _rules_renamed(rules: tuple[Rule, ...], renamed: dict[str, str]) -> tuple[Rule, ...]:
    """Rules naming a tuned row's row name its tuned row too."""
    out = []
    for rule in rules:
        methods = rule.match.get("method")
        if methods is not None and any(m in renamed for m in methods):
            rule = replace(rule, match={**rule.match, "method": tuple(_with_renamed(tuple(methods), renamed))})
        out.append(rule)
    return tuple(out)
