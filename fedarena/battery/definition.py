"""The standard threat battery (``battery.yaml``) as a suite whose rows are the components under test.

A row is an aggregator under FedAvg (``aggregator.median``) or a method with the plain mean (``method.ditto``),
with the user's settings in its label where given (``aggregator.trimmed_mean+beta0.1``). ``battery_suite``
turns the battery and its rows into a ``suites.spec.Suite`` that ``fedarena bench run`` machinery runs as any
suite (Ray Tune, MLflow, resume, skip finished, reuse of other suites' trials); its experiment is
``battery``. A (row, attack, level) the row cannot run (its rule is undefined there, or the trial cannot be
built) is left out and reported as undefined (``Battery.undefined``), never ranked.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from fedarena.bench.preflight import preflight
from fedarena.config import SCALES, load_yaml
from fedarena.errors import ConfigError
from fedarena.methods.aggregators.base import AGGREGATORS
from fedarena.methods.base import METHODS
from fedarena.suites.grid import combinations, expand
from fedarena.suites.parse import parse_suite
from fedarena.suites.spec import Suite, SuiteError
from fedarena.suites.validate import check_suite_entries

NAME = "battery"  # the suite (and MLflow experiment) the battery's runs belong to
KINDS = ("aggregator", "method")


class BatteryError(ConfigError):
    """An evaluation that cannot start: an unknown component, a scale the battery lacks, a bad claim file."""


def battery_file() -> Path:
    return Path(str(resources.files("fedarena.battery") / "battery.yaml"))


def load_battery() -> dict:
    return load_yaml(battery_file().read_text(encoding="utf-8"))


def version() -> int:
    return int(load_battery()["version"])


@dataclass(frozen=True)
class Row:
    """A component under test: its kind, registered name and settings (its hyperparameters)."""

    kind: str
    name: str
    settings: tuple[tuple[str, Any], ...] = ()

    @property
    def label(self) -> str:
        text = "".join(f"+{k}{_compact(v)}" for k, v in self.settings)
        return f"{self.kind}.{self.name}{text}"

    def patch(self) -> dict:
        section = {"name": self.name, **dict(self.settings)}
        if self.kind == "aggregator":
            return {"method": {"name": "global"}, "aggregator": section}
        return {"method": section, "aggregator": {"name": "mean"}}


def _compact(value: Any) -> str:
    """A setting's value in a label (``suite.LABEL``'s characters), one text per value: a plain scalar as YAML
    writes it (``0.1``, ``true``, ``reference``); a list of them with ``_`` around and between its items
    (``[1, 23]``: ``_1_23_``, ``[12, 3]``: ``_12_3_``); anything else (a mapping, a nested list, a string YAML
    quotes or that has other characters) as its YAML text with ``_`` for its punctuation, then ``_`` and a
    digest of the value. A plain scalar never starts with ``_``, a list ends with ``_``, a digest with a hex
    digit: two values never share a text."""
    plain = _plain(value)
    if plain is not None:
        return plain
    if isinstance(value, (list, tuple)):
        items = [_plain(v) for v in value]
        if all(i is not None and "_" not in i for i in items):
            return "_" + "".join(f"{i}_" for i in items)
    text = yaml.safe_dump(_listed(value), default_flow_style=True, width=2**16).strip().removesuffix("...").strip()
    readable = "".join(c if _label_char(c) and c != "_" else "_" for c in text if c not in " '\"")
    blob = json.dumps(value, sort_keys=True, default=str)
    return f"_{readable}_{hashlib.sha256(blob.encode()).hexdigest()[:8]}"


def _plain(value: Any) -> str | None:
    """A scalar's text where YAML writes it plainly with label characters only (a number's exponent sign
    dropped: ``1.0e+20`` is ``1.0e20``) and it does not start with ``_``; else None."""
    if isinstance(value, (list, tuple, dict)):
        return None
    text = yaml.safe_dump(value, default_flow_style=True, width=2**16).strip().removesuffix("...").strip()
    if not isinstance(value, str):
        text = text.replace("e+", "e")
    if not text or text.startswith("_") or not all(map(_label_char, text)):
        return None
    return text


def _label_char(c: str) -> bool:
    return (c.isascii() and c.isalnum()) or c in "._-"


def _listed(value: Any) -> Any:
    """The value with tuples as lists (YAML's safe writer refuses tuples)."""
    if isinstance(value, (list, tuple)):
        return [_listed(v) for v in value]
    if isinstance(value, dict):
        return {k: _listed(v) for k, v in value.items()}
    return value


def row_of(kind: str, name: str, settings: dict | None = None) -> Row:
    """A row, checked: a registered component of its kind (a one-line error listing what exists)."""
    if kind not in KINDS:
        raise BatteryError(f"a component under test is an aggregator or a method, not {kind!r}")
    registry = AGGREGATORS if kind == "aggregator" else METHODS
    if name not in registry:
        raise BatteryError(registry.unknown_message(name))
    return Row(kind, name, tuple(sorted((settings or {}).items())))


FEDAVG = "aggregator.mean"  # FedAvg: the mean under the global method, a row of both kinds (method.global is it)


def builtin_rows() -> list[Row]:
    """Every built-in aggregator and method (a plugin's excluded) as a row; FedAvg once, as ``aggregator.mean``
    (``method.global`` with the mean is the same trial), which ranks among the methods too."""
    rows = [Row("aggregator", n) for n in AGGREGATORS.built_in()]
    return rows + [Row("method", n) for n in METHODS.built_in() if n != "global"]


@dataclass
class Battery:
    """The battery as a suite for some rows at one scale, with what it leaves out and why."""

    suite: Suite
    scale: str
    rows: list[Row]
    undefined: dict[str, dict[tuple[str, float], str]] = field(default_factory=dict)  # label -> setting -> why


def battery_data(rows: list[Row], scale: str) -> dict:
    """The suite mapping of the battery for ``rows`` at ``scale`` (the tailored attacks' overrides included)."""
    data = load_battery()
    if scale not in data["scales"]:
        raise BatteryError(f"the battery (version {data['version']}) has no scale {scale!r}; its scales: "
                           f"{', '.join(s for s in SCALES if s in data['scales'])}")
    overrides = []
    for rule, (attack, options) in data["tailored"].items():
        labels = [r.label for r in rows if r.kind == "aggregator" and r.name == rule]
        if labels:
            overrides.append({"when": {"method": labels, "attack": attack}, "set": {"attack": options}})
    suite = {"name": NAME, "description": f"the standard threat battery, version {data['version']}",
             "methods": [{"label": r.label, **r.patch()} for r in rows], "attacks": copy.deepcopy(data["attacks"]),
             "scales": {scale: copy.deepcopy(data["scales"][scale])}}
    if overrides:
        suite["overrides"] = overrides
    return suite


def battery_suite(rows: list[Row], scale: str) -> Battery:
    """The battery for ``rows`` at ``scale``, without the (row, attack, level) the row cannot run."""
    data = battery_data(rows, scale)
    path = Path(f"{NAME}.yaml")
    probe = parse_suite(copy.deepcopy(data), path)
    try:
        check_suite_entries(probe)  # a component's unknown setting is an error, not an undefined level
    except SuiteError as err:
        raise BatteryError(str(err).replace(f"{path}: ", "the battery's row ", 1)) from None
    undefined = _undefined(probe, scale)
    excluded = [{"method": label, "attack": attack, "level": level}
                for label, settings in undefined.items() for attack, level in settings]
    if excluded:
        data["exclude"] = excluded
    try:
        suite = parse_suite(data, path)
    except SuiteError as err:
        raise BatteryError(str(err)) from None
    suite = replace(suite, tags={"battery_version": str(load_battery()["version"])})
    return Battery(suite, scale, rows, undefined)


def _undefined(suite: Suite, scale: str) -> dict[str, dict[tuple[str, float], str]]:
    """label -> (attack, level) -> why, for the settings of one seed whose trial cannot be built."""
    chosen = suite.scales[scale]
    seed = chosen.seeds[0]
    out: dict[str, dict[tuple[str, float], str]] = {}
    buildable = []
    for combo in combinations(suite, chosen, seeds=(seed,)):
        single = _single(suite, combo)
        try:
            buildable += expand(single, scale, dataset=combo.dataset.label, seeds=(seed,))
        except (ConfigError, KeyError) as err:
            out.setdefault(combo.method.label, {})[(combo.attack.label, combo.level)] = _why(err)
    for spec, error in preflight(buildable).problems:
        out.setdefault(spec.method_label, {})[(spec.attack_label, spec.level)] = error
    return out


def _single(suite: Suite, combo) -> Suite:
    """The suite reduced to one combination's row, attack and level (to probe it alone)."""
    attack = [a for a in suite.attacks if a.label == combo.attack.label][0]
    attack = type(attack)(attack.label, attack.patch, attack.where, levels=(combo.level,))
    method = [m for m in suite.methods if m.label == combo.method.label]
    return type(suite)(suite.name, suite.path, suite.description, suite.reference, suite.fixed, tuple(method),
                       (attack,), suite.exclude, suite.overrides, suite.scales, suite.reproduces, suite.include)


def _why(err: Exception) -> str:
    text = " ".join(str(err).split())
    return text.split("): ", 1)[-1] if "): " in text else text
