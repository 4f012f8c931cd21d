"""Parsing of suite YAML into ``Suite`` (structure, labels, levels, patches), with the file and the key in
every error (see ``fedarena.suites.spec`` for the format)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedarena.config import SECTIONS
from fedarena.contracts import load_checked
from fedarena.errors import ConfigError
from fedarena.suites import SUITES, suite_data
from fedarena.suites.deployment import parse_deployment
from fedarena.suites.published import published_tables
from fedarena.suites.select import all_variants, check_variant_labels, parse_select
from fedarena.suites.spec import (
    COSTS,
    LABEL,
    MATCH_KEYS,
    NO_PRIVACY_ENTRY,
    PATCH_KEYS,
    SCALE_KEYS,
    SCALES,
    SUITE_KEYS,
    SYNCHRONOUS_ENTRY,
    Entry,
    Rule,
    Scale,
    Suite,
    SuiteError,
)
from fedarena.suites.validate import check_suite_entries


def read_suite(path: Path, check_names: bool = True) -> Suite:
    """Load the YAML safely, parse it, and (``check_names``) check it against the registries."""
    try:
        data = suite_data(path)
    except ConfigError as err:
        raise SuiteError(str(err)) from None
    suite = parse_suite(data, path)
    load_checked(suite.include)  # its components may come from its plugins
    if check_names:
        check_suite_entries(suite)
    return suite


def suite_path(ref: str | Path) -> Path:
    """A shipped suite by name, or a YAML file by path."""
    text = str(ref)
    if text.endswith((".yaml", ".yml")) or Path(text).is_file():
        path = Path(text)
        if not path.is_file():
            raise SuiteError(f"{path}: suite file not found")
        return path
    return SUITES.get(text)


def load_suite(ref: str | Path, check_names: bool = True) -> Suite:
    """Read and parse a suite; ``check_names`` also checks every entry's registered names and
    hyperparameters (``fedarena.suites.validate``)."""
    return read_suite(suite_path(ref), check_names)


class _Reader:
    """Structural checks with the file and key path in every message."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, where: str, message: str):
        raise SuiteError(f"{self.path}: {where or 'top level'}: {message}")

    def mapping(self, value: Any, where: str, allowed: tuple[str, ...] | None = None, required=()) -> dict:
        if not isinstance(value, dict):
            self.fail(where, f"expected a mapping, got {type(value).__name__}")
        for key in value:
            if allowed is not None and key not in allowed:
                self.fail(f"{where}.{key}" if where else str(key), f"unknown key; allowed: {', '.join(allowed)}")
        for key in required:
            if key not in value:
                self.fail(where or "top level", f"missing key {key!r}")
        return value

    def items(self, value: Any, where: str, nonempty: bool = True) -> list:
        if not isinstance(value, list) or (nonempty and not value):
            self.fail(where, f"expected a non-empty list, got {value!r}")
        return value

    def text(self, value: Any, where: str) -> str:
        if value is None:
            return ""
        if not isinstance(value, str):
            self.fail(where, f"expected text, got {type(value).__name__}")
        return value.strip()

    def label(self, value: Any, where: str) -> str:
        if not isinstance(value, str) or not LABEL.match(value):
            self.fail(where, f"a label must be a non-empty word of letters, digits and _.+- ; got {value!r}")
        return value

    def levels(self, value: Any, where: str) -> tuple[float, ...]:
        items = self.items(value, where)
        for i, level in enumerate(items):
            if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 <= level < 1:
                self.fail(f"{where}[{i}]", f"a level is a fraction of the clients in [0, 1), got {level!r}")
        return tuple(float(v) for v in items)

    def patch(self, value: dict, where: str, skip: tuple[str, ...] = ()) -> dict:
        patch = {k: v for k, v in value.items() if k not in skip}
        for key, section in patch.items():
            if key == "seed":
                self.fail(f"{where}.seed", "seeds are an axis: list them under `seeds:` in a scale")
            if key == "device":
                self.fail(f"{where}.device", "the runner sets the device (fedarena bench run --gpus-per-trial)")
            if key not in PATCH_KEYS:
                self.fail(f"{where}.{key}", f"unknown config key; allowed: {', '.join(PATCH_KEYS)}")
            if key in SECTIONS and not isinstance(section, dict):
                self.fail(f"{where}.{key}", f"a config section is a mapping such as {{name: ...}}, got {section!r}")
            if key in SECTIONS and "name" in section and not isinstance(section["name"], str):
                self.fail(f"{where}.{key}.name", f"expected a name, got {section['name']!r}")
        return patch


def parse_suite(data: Any, path: Path) -> Suite:
    r = _Reader(path)
    data = r.mapping(data, "", SUITE_KEYS, required=("name", "methods", "attacks", "scales"))
    name = r.label(data["name"], "name")
    if name != path.stem:
        r.fail("name", f"the suite name {name!r} must equal the file name {path.stem!r}")
    methods = _entries(r, data["methods"], "methods", kind="method")
    check_variant_labels(r, methods)
    attacks = _entries(r, data["attacks"], "attacks", kind="attack")
    privacy = _entries(r, data["privacy"], "privacy", kind="privacy") if "privacy" in data else (NO_PRIVACY_ENTRY,)
    deployment = parse_deployment(r, data["deployment"], "deployment") if "deployment" in data else (SYNCHRONOUS_ENTRY,)
    labels = {"method": {v.label for e in methods for v in all_variants(e)} | {e.label for e in methods},
              "attack": {e.label for e in attacks},  # a selected entry's variants may be named (grid.matches)
              "privacy": {e.label for e in privacy}, "deployment": {e.label for e in deployment}}
    scales_data = r.mapping(data["scales"], "scales", SCALES)
    if not scales_data:
        r.fail("scales", f"define at least one scale; allowed: {', '.join(SCALES)}")
    scales = {s: _scale(r, scales_data[s], f"scales.{s}", s, labels) for s in SCALES if s in scales_data}
    labels["dataset"] = {e.label for scale in scales.values() for e in scale.datasets}
    return Suite(
        name, path, r.text(data.get("description"), "description"), r.text(data.get("reference"), "reference"),
        r.patch(r.mapping(data.get("fixed") or {}, "fixed"), "fixed"), methods, attacks,
        _rules(r, data.get("exclude"), "exclude", labels, with_patch=False),
        _rules(r, data.get("overrides"), "overrides", labels, with_patch=True), scales,
        _reproduces(r, data.get("reproduces")), _include(r, data.get("include"), path), privacy=privacy,
        deployment=deployment, costs=_costs(r, data.get("costs")),
    )  # fmt: skip


def _costs(r: _Reader, value: Any) -> tuple[str, ...]:
    """``costs: [server_ms, bytes_sent]``: the costs the leaderboards' ``costs`` table shows, in this order."""
    if value is None:
        return ()
    items = r.items(value, "costs")
    for i, name in enumerate(items):
        if name not in COSTS:
            r.fail(f"costs[{i}]", f"unknown cost {name!r}; allowed: {', '.join(COSTS)}")
    if len(set(items)) != len(items):
        r.fail("costs", f"duplicate costs in {items}")
    return tuple(items)


def _include(r: _Reader, value: Any, path: Path) -> tuple[Path, ...]:
    """``include: [paths]``: plugin files or packages, relative to the suite file."""
    if value is None:
        return ()
    items = r.items(value, "include")
    for i, item in enumerate(items):
        if not isinstance(item, str) or not item.strip():
            r.fail(f"include[{i}]", f"a plugin is a path to a .py file or a package folder, got {item!r}")
    return tuple((path.parent / item).resolve() for item in items)


def _reproduces(r: _Reader, value: Any) -> dict[str, tuple[int, ...]]:
    """``reproduces: {paper: [table numbers]}``, each a table that ships (``leaderboards/paper_tables``)."""
    shipped = published_tables()
    data = r.mapping(value or {}, "reproduces", tuple(sorted(shipped)))
    out = {}
    for paper, tables in data.items():
        numbers = r.items(tables, f"reproduces.{paper}")
        unknown = [t for t in numbers if isinstance(t, bool) or not isinstance(t, int) or t not in shipped[paper]]
        if unknown:
            r.fail(f"reproduces.{paper}", f"no published {paper} table {unknown}; its tables: "
                   f"{', '.join(map(str, sorted(shipped[paper])))}")
        out[paper] = tuple(sorted(set(numbers)))
    return out


def _entries(r: _Reader, value: Any, where: str, kind: str) -> tuple[Entry, ...]:
    entries, seen = [], set()
    meta = {"method": ("label", "select"), "attack": ("label", "levels"), "dataset": ("label", "levels"),
            "privacy": ("label",)}[kind]
    for i, item in enumerate(r.items(value, where)):
        at = f"{where}[{i}]"
        item = r.mapping(item, at, required=("label",) + (("attack", "levels") if kind == "attack" else ()))
        label = r.label(item["label"], f"{at}.label")
        if label in seen:
            r.fail(f"{at}.label", f"duplicate label {label!r} in {where}")
        seen.add(label)
        if kind in ("dataset", "privacy") and kind not in item:
            r.fail(at, f"a {kind} entry needs a `{kind}: {{name: ...}}` section")
        patch = r.patch(item, at, skip=meta)
        if kind in ("dataset", "privacy") and "name" not in patch[kind]:
            r.fail(f"{at}.{kind}", f"a {kind} entry names its {kind}: `{kind}: {{name: ...}}`")
        if kind == "attack":
            entries.append(Entry(label, patch, at, levels=r.levels(item["levels"], f"{at}.levels")))
        elif kind == "dataset":
            entries.append(Entry(label, patch, at, level_map=_level_map(r, item.get("levels"), f"{at}.levels")))
        elif "select" in item:
            entries.append(Entry(label, patch, at, select=parse_select(r, item["select"], f"{at}.select")))
        else:
            entries.append(Entry(label, patch, at))
    return tuple(entries)


def _level_map(r: _Reader, value: Any, where: str) -> dict[str, tuple[float, ...]]:
    if value is None:
        return {}
    return {k: r.levels(v, f"{where}.{k}") for k, v in r.mapping(value, where).items()}


def _scale(r: _Reader, value: Any, where: str, name: str, labels: dict[str, set]) -> Scale:
    data = r.mapping(value, where, SCALE_KEYS, required=("datasets", "seeds"))
    datasets = _entries(r, data["datasets"], f"{where}.datasets", kind="dataset")
    seeds = r.items(data["seeds"], f"{where}.seeds")
    for i, seed in enumerate(seeds):
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            r.fail(f"{where}.seeds[{i}]", f"a seed is an integer >= 0, got {seed!r}")
    if len(set(seeds)) != len(seeds):
        r.fail(f"{where}.seeds", f"duplicate seeds in {seeds}")
    for entry in datasets:
        for attack in entry.level_map:
            _known(r, attack, labels["attack"], f"{entry.where}.levels.{attack}", "attack")
    labels = {**labels, "dataset": {e.label for e in datasets}}
    return Scale(
        name, r.text(data.get("description"), f"{where}.description"),
        r.patch(r.mapping(data.get("fixed") or {}, f"{where}.fixed"), f"{where}.fixed"), datasets, tuple(seeds),
        _subset(r, data.get("methods"), f"{where}.methods", labels["method"], "method"),
        _attack_subset(r, data.get("attacks"), f"{where}.attacks", labels["attack"]),
        _rules(r, data.get("exclude"), f"{where}.exclude", labels, with_patch=False),
        _rules(r, data.get("overrides"), f"{where}.overrides", labels, with_patch=True),
        _checkpoint_every(r, data.get("checkpoint_every"), f"{where}.checkpoint_every"),
        _subset(r, data.get("privacy"), f"{where}.privacy", labels["privacy"], "privacy"),
        _subset(r, data.get("deployment"), f"{where}.deployment", labels["deployment"], "deployment"),
    )  # fmt: skip


def _checkpoint_every(r: _Reader, value: Any, where: str) -> int | None:
    """Rounds between checkpoints of the scale's trials (0: only the final one); None: the runner's default."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        r.fail(where, f"expected a number of rounds >= 0 (0: no checkpoint before the end), got {value!r}")
    return value


def _known(r: _Reader, label: Any, known: set, where: str, kind: str) -> None:
    if label not in known:
        r.fail(where, f"unknown {kind} label {label!r}; the suite defines: {', '.join(sorted(known))}")


def _subset(r: _Reader, value: Any, where: str, known: set, kind: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    items = r.items(value, where)
    for i, label in enumerate(items):
        _known(r, label, known, f"{where}[{i}]", kind)
    return tuple(items)


def _attack_subset(r: _Reader, value: Any, where: str, known: set) -> dict | None:
    if value is None:
        return None
    if isinstance(value, list):
        value = {label: None for label in r.items(value, where)}
    chosen = r.mapping(value, where)
    if not chosen:
        r.fail(where, "empty: list at least one attack label")
    for label in chosen:
        _known(r, label, known, f"{where}.{label}", "attack")
    return {k: (None if v is None else r.levels(v, f"{where}.{k}")) for k, v in chosen.items()}


def _rules(r: _Reader, value: Any, where: str, labels: dict[str, set], with_patch: bool) -> tuple[Rule, ...]:
    if value is None:
        return ()
    rules = []
    for i, item in enumerate(r.items(value, where)):
        at = f"{where}[{i}]"
        if with_patch:
            item = r.mapping(item, at, ("when", "set"), required=("when", "set"))
            match, patch = item["when"], r.patch(r.mapping(item["set"], f"{at}.set"), f"{at}.set")
            match_at = f"{at}.when"
        else:
            match, patch, match_at = item, None, at
        match = r.mapping(match, match_at, MATCH_KEYS)
        if not match:
            r.fail(match_at, f"empty rule: give at least one of {', '.join(MATCH_KEYS)}")
        rules.append(Rule(_match(r, match, match_at, labels), patch, at))
    return tuple(rules)


def _match(r: _Reader, match: dict, where: str, labels: dict[str, set]) -> dict[str, tuple]:
    out = {}
    for key, value in match.items():
        values = tuple(value) if isinstance(value, list) else (value,)
        if key == "level":
            r.levels(list(values), f"{where}.level")
        elif key in labels:
            for v in values:
                _known(r, v, labels[key], f"{where}.{key}", key)
        out[key] = values
    return out
