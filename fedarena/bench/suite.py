"""Benchmark suites: YAML files (``fedarena/bench/suites/*.yaml``, loaded with ``yaml.safe_load``).

A suite names the axes of a grid and its three scales. A *patch* is a partial experiment config (any
``ExperimentConfig`` key but ``seed`` and ``device``; a section with a ``name`` replaces that section,
one without a name sets keys inside it)::

    name: robustness                  # must equal the file name
    description: ...
    reference: Ditto Table 1, Figure 3
    fixed: {patch}                    # every trial, every scale
    methods:                          # axis: label (the table row) + patch
      - {label: ditto, method: {name: ditto, dynamic_lam: true}}
      - {label: krum, aggregator: {name: krum}}
    attacks:                          # axis: label (clean|a1|...) + patch with an ``attack`` section + levels
      - {label: a1, attack: {name: a1}, levels: [0.2, 0.5, 0.8]}
    exclude: [{method: krum, level: 0.8}]            # combinations left out (labels / levels)
    overrides: [{when: {method: ditto, dataset: femnist}, set: {patch}}]
    scales:                           # smoke, quick and paper are all required
      quick:
        fixed: {patch}
        datasets:                     # axis: label (the paper's dataset id) + patch with a ``dataset``
          - {label: fmnist, dataset: {name: digits}, levels: {a3: [0.1]}}   # levels: per-dataset override
        seeds: [0, 1]
        methods: [global, ditto]      # optional subset of the method labels
        attacks: {clean: null, a1: [0.5]}   # optional subset; a list of levels overrides the suite's
        exclude: [...]                # optional, added to the suite's
        overrides: [...]

This module holds the suite's data model and the shipped suites (``SUITES``); ``parse`` reads the YAML
(structure, labels, levels), ``validate`` checks every registered name and hyperparameter of every entry
(cheap, no data), ``grid`` expands a scale into trials. Errors are ``SuiteError`` messages that start
with the file and the key, e.g.
``robustness.yaml: scales.quick.datasets[0].dataset: unknown dataset 'digts' ...``.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedarena.config import ExperimentConfig
from fedarena.params import ConfigError
from fedarena.registry import Registry

SCALES = ("smoke", "quick", "paper")
SUITE_KEYS = ("name", "description", "reference", "fixed", "methods", "attacks", "exclude", "overrides", "scales")
SCALE_KEYS = ("description", "fixed", "datasets", "seeds", "methods", "attacks", "exclude", "overrides")
MATCH_KEYS = ("method", "attack", "dataset", "level")
PATCH_KEYS = tuple(f.name for f in dataclasses.fields(ExperimentConfig) if f.name not in ("seed", "device"))
LABEL = re.compile(r"^[A-Za-z0-9_.+\-]+$")
SUITE_DIR = Path(__file__).parent / "suites"


class SuiteError(ConfigError):
    """An invalid suite; the message starts with the suite file and the key at fault."""


@dataclass(frozen=True)
class Entry:
    """One value of an axis: its label, its config patch, where it is written, and (attacks) its levels;
    ``level_map`` (datasets) overrides attack levels for that dataset."""

    label: str
    patch: dict
    where: str
    levels: tuple[float, ...] = ()
    level_map: dict[str, tuple[float, ...]] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True)
class Rule:
    """An ``exclude`` (patch None) or ``overrides`` rule: applies when every key of ``match`` matches."""

    match: dict[str, tuple]
    patch: dict | None
    where: str

    def applies(self, labels: dict[str, Any]) -> bool:
        return all(_matches(labels[key], allowed) for key, allowed in self.match.items())


def _matches(value: Any, allowed: tuple) -> bool:
    if isinstance(value, float):
        return any(isinstance(a, (int, float)) and abs(float(a) - value) < 1e-9 for a in allowed)
    return value in allowed


@dataclass(frozen=True)
class Scale:
    name: str
    description: str
    fixed: dict
    datasets: tuple[Entry, ...]
    seeds: tuple[int, ...]
    methods: tuple[str, ...] | None  # subset of the suite's method labels (None: all)
    attacks: dict[str, tuple[float, ...] | None] | None  # label -> levels (None: the suite's)
    exclude: tuple[Rule, ...]
    overrides: tuple[Rule, ...]


@dataclass(frozen=True)
class Suite:
    name: str
    path: Path
    description: str
    reference: str
    fixed: dict
    methods: tuple[Entry, ...]
    attacks: tuple[Entry, ...]
    exclude: tuple[Rule, ...]
    overrides: tuple[Rule, ...]
    scales: dict[str, Scale]


def _shipped() -> Registry[Path]:
    registry: Registry[Path] = Registry("suite")
    for path in sorted(SUITE_DIR.glob("*.yaml")):
        registry.add(path.stem, path)
    return registry


SUITES = _shipped()


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
    hyperparameters (``fedarena.bench.validate``)."""
    from fedarena.bench.parse import read_suite

    return read_suite(suite_path(ref), check_names)
