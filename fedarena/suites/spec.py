"""Benchmark suites: YAML files (``fedarena/suites/*.yaml``, loaded with ``config.load_yaml``: YAML's safe loader, ``1e-5`` a number).

A suite names the axes of a grid and its three scales. A *patch* is a partial experiment config (any
``ExperimentConfig`` key but ``seed`` and ``device``; a section with a ``name`` replaces that section,
one without a name sets keys inside it)::

    name: robustness                  # must equal the file name
    description: ...
    reference: Ditto Table 1, Figure 3   # prose, for people (bench list prints it)
    include: [my_rules.py, ../plugins/mypkg]   # plugins (fedarena.plugins), paths relative to this file
    reproduces: {ditto: [1]}          # the published tables whose cells the paper scale makes (bench list counts them)
    fixed: {patch}                    # every trial, every scale
    methods:                          # axis: label (the table row) + patch
      - {label: ditto, method: {name: ditto, dynamic_lam: true}}
      - {label: krum, aggregator: {name: krum}}
      - label: fedmgda_plus             # one row, chosen per table column among variants (suites.select)
        aggregator: {name: fedmgda_plus}
        select: {by: val_acc_pooled, over: {aggregator.eps: [0.0, 0.1, 0.5, 1.0]}, scales: [paper]}
    attacks:                          # axis: label (clean|a1|...) + patch with an ``attack`` section + levels
      - {label: a1, attack: {name: a1}, levels: [0.2, 0.5, 0.8]}
    privacy:                          # optional axis: label + patch with a ``privacy`` section (default: none)
      - {label: eps10, privacy: {name: central, target_epsilon: 10, clip: 0.5}}
    deployment:                       # optional axis: label + a ``system`` section and/or ``f_declared``
      - {label: synchronous}                                  # (default: one entry, synchronous, no patch)
      - {label: fail0.3, system: {name: synchronous, failure_rate: 0.3}}
      - {label: f_double, f_declared: double}                 # the server's aggregator.f: half|exact|double
    costs: [server_ms, attack_ms, bytes_sent]   # optional: the leaderboards' ``costs`` table shows these (COSTS)
    exclude: [{method: krum, level: 0.8}]            # combinations left out (labels / levels)
    overrides: [{when: {method: ditto, dataset: femnist}, set: {patch}}]
    scales:                           # any of smoke, quick, paper (at least one)
      quick:
        fixed: {patch}
        datasets:                     # axis: label (the dataset run) + patch with a ``dataset``
          - {label: digits, dataset: {name: digits}, levels: {a3: [0.1]}}   # levels: per-dataset override
        seeds: [0, 1, 2]
        checkpoint_every: 0           # optional: rounds between checkpoints (0: none; default ~10 per trial)
        methods: [global, ditto]      # optional subset of the method labels
        attacks: {clean: null, a1: [0.5]}   # optional subset; a list of levels overrides the suite's
        privacy: [none, eps10]        # optional subset of the privacy labels
        deployment: [synchronous]     # optional subset of the deployment labels
        exclude: [...]                # optional, added to the suite's
        overrides: [...]

A deployment entry (``fedarena.suites.deployment``) patches only the ``system`` section (how the devices
behave: failures, stragglers, asynchronous aggregation) and may declare the server's f relative to the trial's:
``f_declared: exact`` is the f the trial assumes (its ``aggregator.f``, or the expected number of malicious
devices drawn), ``half`` that f // 2, ``double`` 2 f. A trial a deployment entry makes undefined (its rule's
requirement on n and f fails) is excluded with its reason, as is one that is the same trial as another
deployment's (a declared f equal to the trial's own, or a method without global aggregation, where no rule reads
f); the plan prints them and the tables show their reason (``grid.Excluded``).

``costs:`` lists what each side pays that the leaderboards tabulate in a ``costs`` table (``leaderboards.
costs_table``): any of ``COSTS``, each the mean over a cell's seeds of its runs' ``cost_<name>`` (docs/semantics.md,
"Deployment", "Costs"); a suite without it has no such table. It changes no trial.

A dataset label is the dataset run (``digits``), or a paper's dataset id for a paper's partition of that
data (``fmnist`` for ``fmnist_fedtilt``); a label that names another dataset is an error
(``fedarena.suites.dataset_labels``).

This module holds the suite's data model (the shipped files and their registry ``SUITES`` are in
``fedarena.suites``, below the leaderboards, which show labels in the order the suites list them); ``parse`` reads the YAML
(structure, labels, levels), ``validate`` checks every registered name and hyperparameter of every entry
(cheap, no data), ``grid`` expands a scale into trials. Errors are ``SuiteError`` messages that start
with the file and the key, e.g.
``robustness.yaml: scales.quick.datasets[0].dataset: unknown dataset 'digts' ...``.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedarena.config import SCALES as SCALES  # noqa: F401  (re-exported: a suite's scales)
from fedarena.config import ExperimentConfig
from fedarena.errors import ConfigError

SUITE_KEYS = ("name", "description", "reference", "reproduces", "include", "fixed", "methods", "attacks", "privacy",
              "deployment", "costs", "exclude", "overrides", "scales")
SCALE_KEYS = ("description", "fixed", "datasets", "seeds", "methods", "attacks", "privacy", "deployment", "exclude",
              "overrides", "checkpoint_every")
SELECT_KEYS = ("by", "over", "scales")
MATCH_KEYS = ("method", "attack", "dataset", "level", "privacy", "deployment")
NO_PRIVACY = "none"  # the label of the privacy axis's one entry in a suite that lists none
SYNCHRONOUS = "synchronous"  # the label of the deployment axis's one entry in a suite that lists none
F_DECLARED = ("half", "exact", "double")  # a deployment entry's f relative to the trial's (``suites.deployment``)
# what a suite's ``costs:`` may ask the leaderboards to tabulate: every run's ``cost_<name>`` (``simulation.work``)
COSTS = ("server_ms", "attack_ms", "attack_forward", "attack_backward", "bytes_sent", "bytes_received")
PATCH_KEYS = tuple(f.name for f in dataclasses.fields(ExperimentConfig) if f.name not in ("seed", "device"))
LABEL = re.compile(r"^[A-Za-z0-9_.+\-]+$")


class SuiteError(ConfigError):
    """An invalid suite; the message starts with the suite file and the key at fault."""


@dataclass(frozen=True)
class Selection:
    """A method entry's ``select``: at the ``scales`` listed, run one variant per combination of the ``over``
    values (dotted config keys, e.g. ``aggregator.eps``); the leaderboards show, per table column, the
    variant with the best mean ``by`` metric (e.g. ``val_acc_pooled``, benign validation accuracy)."""

    by: str
    over: tuple[tuple[str, tuple], ...]
    scales: tuple[str, ...]


@dataclass(frozen=True)
class Entry:
    """One value of an axis: its label, its config patch, where it is written, and (attacks) its levels;
    ``level_map`` (datasets) overrides attack levels for that dataset. A method entry may carry a
    ``select``; each of its variants is an Entry whose ``group`` is the entry's label (the table row) and
    whose ``variant`` says its values (``eps=0.5``)."""

    label: str
    patch: dict
    where: str
    levels: tuple[float, ...] = ()
    level_map: dict[str, tuple[float, ...]] = dataclasses.field(default_factory=dict)
    select: Selection | None = None
    group: str = ""
    variant: str = ""
    f_declared: str = ""  # a deployment entry's declared f (one of F_DECLARED; "": the trial's own)

    @property
    def row(self) -> str:
        """The label rules and scale subsets name: the entry's own, or its group's for a variant."""
        return self.group or self.label


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
    checkpoint_every: int | None = None  # None: the runner's default
    privacy: tuple[str, ...] | None = None  # subset of the suite's privacy labels (None: all)
    deployment: tuple[str, ...] | None = None  # subset of the suite's deployment labels (None: all)


NO_PRIVACY_ENTRY = Entry(NO_PRIVACY, {}, "privacy (none listed: no differential privacy)")
SYNCHRONOUS_ENTRY = Entry(SYNCHRONOUS, {}, "deployment (none listed: synchronous rounds, the trial's own f)")


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
    reproduces: dict[str, tuple[int, ...]] = field(default_factory=dict)  # paper id -> its tables the paper scale makes
    include: tuple[Path, ...] = ()  # plugin files or packages the suite's components come from
    tags: dict[str, str] = field(default_factory=dict)  # recorded on every run (e.g. the battery's version)
    privacy: tuple[Entry, ...] = (NO_PRIVACY_ENTRY,)  # the privacy axis (one entry, none, where a suite lists none)
    deployment: tuple[Entry, ...] = (SYNCHRONOUS_ENTRY,)  # the deployment axis (one entry where a suite lists none)
    costs: tuple[str, ...] = ()  # the costs the ``costs`` table shows, in this order (none: no such table)
