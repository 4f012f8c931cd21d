"""Grid expansion: a suite at one scale -> the list of trials (one federated run each).

The grid is datasets x methods (a method entry with ``select`` contributes its variants at the scales it
selects at, ``suites.select``) x privacy (one entry, none, unless the suite lists some) x deployment (one entry,
synchronous, unless the suite lists some: ``suites.deployment``) x attacks (each with its levels) x seeds, minus
``exclude`` rules. A trial's config is the merge, in this order, of: the config
defaults, the suite's ``fixed``, the scale's ``fixed``, the dataset entry, the method entry, the attack
entry (and its level), the privacy entry, the deployment entry's ``system``, the seed, the device
chosen by the runner, then every matching ``overrides`` rule, and last the deployment entry's declared f
(``aggregator.f``, from the config so built). It is resolved (every component's defaults
filled in) and identified (``simulation.identity``): ``config_hash`` is the trial's identity in the tracking
store (the values it uses and the versions of its components), ``config_key`` the values alone (a run with
the key but another hash is stale), ``cell_hash`` (the identity without the seed) groups the seeds of one
table cell.

Rules and a scale's ``methods`` subset name a method entry (every variant of a selected entry) or one
variant by its own label (``ditto_best_lam_lam0.01``): e.g. a dataset that leaves out one candidate value.

A grid point that a deployment entry makes undefined, or the same trial as another deployment's, is no trial: it
is an ``Excluded`` with its reason (``expand_grid``; the plan prints them, the tables show them).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from fedarena.config import SECTIONS, ExperimentConfig
from fedarena.datasets import DATASETS
from fedarena.errors import ConfigError
from fedarena.registry import UnknownNameError
from fedarena.sections import check_planned_server_rule, resolve_config
from fedarena.simulation.identity import trial_identity
from fedarena.suites.deployment import declared_f, declared_f_tag, is_default, same_trial_reason
from fedarena.suites.select import variants
from fedarena.suites.spec import (
    NO_PRIVACY,
    NO_PRIVACY_ENTRY,
    SYNCHRONOUS,
    SYNCHRONOUS_ENTRY,
    Entry,
    Rule,
    Scale,
    Suite,
    SuiteError,
)
from fedarena.system.base import system_from
from fedarena.tracking.runs import run_name


@dataclass(frozen=True)
class Combo:
    """One point of the grid, before its config is built."""

    dataset: Entry
    method: Entry
    attack: Entry
    level: float
    seed: int
    privacy: Entry = NO_PRIVACY_ENTRY
    deployment: Entry = SYNCHRONOUS_ENTRY

    def labels(self) -> dict:
        """What rules match: a method variant matches as its entry (``row``)."""
        return {"dataset": self.dataset.label, "method": self.method.row, "attack": self.attack.label,
                "level": self.level, "privacy": self.privacy.label, "deployment": self.deployment.label}

    def matches(self, rule: Rule) -> bool:
        """Whether ``rule`` applies: naming the method entry or, for a variant, the variant itself."""
        labels = self.labels()
        return rule.applies(labels) or rule.applies({**labels, "method": self.method.label})

    @property
    def name(self) -> str:
        return run_name(self.method.label, self.dataset.label, self.attack.label, self.level, self.seed,
                        self.privacy.label, self.deployment.label)


@dataclass(frozen=True)
class TrialSpec:
    """A fully resolved trial with its table labels and identity; a variant of a selected method also has
    its group (the table row), the metric that selects and its values (``suites.select``)."""

    config: ExperimentConfig
    suite: str
    scale: str
    method_label: str
    dataset_label: str
    attack_label: str
    level: float
    seed: int
    config_hash: str
    cell_hash: str
    name: str
    select_group: str = ""
    select_by: str = ""
    variant: str = ""
    config_key: str = ""
    versions: dict = field(default_factory=dict)  # "kind/name" -> version of every component it uses
    legacy_hash: str = ""  # what a previous release recorded as this trial's config_hash (its runs, checkpoints)
    tags: dict = field(default_factory=dict)  # the suite's own tags for every run (``Suite.tags``)
    privacy_label: str = NO_PRIVACY  # the privacy axis's entry (``none`` in suites without one)
    deployment_label: str = SYNCHRONOUS  # the deployment axis's entry (``synchronous`` in suites without one)


@dataclass(frozen=True)
class Excluded:
    """A grid point that is no trial: undefined under its deployment entry, or the same trial as the one of
    deployment ``same_as`` (whose cell the tables show in its place); ``reason`` says which."""

    name: str
    method_label: str
    dataset_label: str
    attack_label: str
    level: float
    seed: int
    privacy_label: str
    deployment_label: str
    reason: str
    same_as: str = ""


@dataclass(frozen=True)
class Grid:
    """A scale's trials and the grid points excluded with their reasons (``expand_grid``)."""

    trials: list[TrialSpec]
    excluded: list[Excluded]


def merge(data: dict, patch: dict) -> None:
    """Apply a patch in place: a section with a ``name`` replaces the section, one without updates it."""
    for key, value in patch.items():
        if key in SECTIONS:
            value = copy.deepcopy(value)
            data[key] = value if "name" in value else {**data.get(key, {}), **value}
        else:
            data[key] = copy.deepcopy(value)


def attack_levels(suite: Suite, scale: Scale, dataset: Entry, attack: Entry) -> tuple[float, ...]:
    """Levels of an attack for one dataset: the dataset's override > the scale's > the suite's."""
    if attack.label in dataset.level_map:
        return dataset.level_map[attack.label]
    chosen = (scale.attacks or {}).get(attack.label)
    return chosen if chosen is not None else attack.levels


def combinations(suite: Suite, scale: Scale, datasets: tuple[Entry, ...] | None = None,
                 seeds: tuple[int, ...] | None = None) -> Iterator[Combo]:
    """The grid points in a stable order (datasets, methods, privacy, deployment, attacks, levels, seeds), minus
    exclusions."""
    methods = [variant for m in suite.methods for variant in variants(m, scale.name)
               if scale.methods is None or {m.label, variant.label} & set(scale.methods)]
    attacks = [a for a in suite.attacks if scale.attacks is None or a.label in scale.attacks]
    privacy = [p for p in suite.privacy if scale.privacy is None or p.label in scale.privacy]
    deployment = [d for d in suite.deployment if scale.deployment is None or d.label in scale.deployment]
    rules = suite.exclude + scale.exclude
    for dataset in datasets or scale.datasets:
        for method in methods:
            for private, deployed in ((p, d) for p in privacy for d in deployment):
                for attack in attacks:
                    for level in attack_levels(suite, scale, dataset, attack):
                        for seed in seeds or scale.seeds:
                            combo = Combo(dataset, method, attack, level, seed, private, deployed)
                            if not any(combo.matches(rule) for rule in rules):
                                yield combo


def count_trials(suite: Suite, scale: str) -> int:
    """Number of trials of a scale (structure only: no registry, no data)."""
    return sum(1 for _ in combinations(suite, suite.scales[scale]))


def build_config(suite: Suite, scale: Scale, combo: Combo, device: str) -> ExperimentConfig:
    data = ExperimentConfig().to_dict()
    for patch in (suite.fixed, scale.fixed, combo.dataset.patch, combo.method.patch, combo.attack.patch,
                  combo.privacy.patch, combo.deployment.patch):
        merge(data, patch)
    data["attack"]["level"] = combo.level
    data["seed"] = combo.seed
    data["device"] = device
    for rule in suite.overrides + scale.overrides:
        if combo.matches(rule):
            merge(data, rule.patch)
    if combo.deployment.f_declared:  # relative to the f of the config built so far (``suites.deployment``)
        f = declared_f(data, combo.deployment.f_declared)
        if f is not None:
            data["aggregator"] = {**data["aggregator"], "f": f}
    return ExperimentConfig.from_dict(data)


def select_datasets(scale: Scale, wanted: str | None) -> tuple[Entry, ...]:
    """``--dataset``: the scale's entries with that label or dataset name; else, if ``wanted`` is a
    registered dataset, the scale's first entry re-pointed at it (its label becomes the dataset name and
    the model is the dataset's default)."""
    if not wanted:
        return scale.datasets
    chosen = tuple(e for e in scale.datasets if wanted in (e.label, e.patch["dataset"]["name"]))
    if chosen:
        return chosen
    if wanted not in DATASETS:
        listing = ", ".join(sorted({e.label for e in scale.datasets} | set(DATASETS.names())))
        raise ConfigError(f"--dataset {wanted!r} is neither a dataset of scale {scale.name!r} nor a registered "
                          f"dataset; choose one of {listing}")
    first = scale.datasets[0]
    patch = {**first.patch, "dataset": {"name": wanted}, "model": {"name": "auto"}}
    return (Entry(wanted, patch, f"--dataset {wanted}"),)


def expand(suite: Suite, scale: str, *, dataset: str | None = None, seeds: tuple[int, ...] | None = None,
           device: str = "cpu") -> list[TrialSpec]:
    """Every trial of the suite at ``scale``, validated (names, hyperparameters, server rules); the grid points
    excluded with their reasons are ``expand_grid``'s."""
    return expand_grid(suite, scale, dataset=dataset, seeds=seeds, device=device).trials


def expand_grid(suite: Suite, scale: str, *, dataset: str | None = None, seeds: tuple[int, ...] | None = None,
                device: str = "cpu") -> Grid:
    """``expand``'s trials and the grid points its deployment entries exclude (``suites.deployment``)."""
    if scale not in suite.scales:
        raise SuiteError(f"{suite.path}: unknown scale {scale!r}; choose one of {', '.join(suite.scales)}")
    chosen = suite.scales[scale]
    trials: dict[str, tuple[TrialSpec, Combo]] = {}  # config hash -> the trial and its grid point, in grid order
    excluded: list[Excluded] = []
    for combo in combinations(suite, chosen, select_datasets(chosen, dataset), seeds):
        entries = (combo.dataset, combo.method, combo.attack) + ((combo.deployment,) if combo.deployment.patch
                                                                 or combo.deployment.f_declared else ())
        where = f"scales.{scale}: trial '{combo.name}' ({', '.join(e.where for e in entries)})"
        cfg, undefined = _built(suite, chosen, combo, device, where)
        if undefined:
            excluded.append(_excluded(combo, undefined))
            continue
        spec = _spec(suite, scale, combo, cfg)
        earlier = trials.get(spec.config_hash)
        if earlier is None:
            trials[spec.config_hash] = (spec, combo)
            continue
        kept, dropped = _one_of_same(suite, where, earlier, (spec, combo))
        trials[spec.config_hash] = kept
        excluded.append(_excluded(dropped[1], f"{same_trial_reason(dropped[1].deployment, dropped[0].config)}: the "
                                              f"same trial as '{kept[0].name}'", kept[1].deployment.label))
    if not trials:
        raise SuiteError(f"{suite.path}: scales.{scale}: empty grid (every combination is excluded)")
    return Grid([spec for spec, _ in trials.values()], excluded)


def _built(suite: Suite, scale: Scale, combo: Combo, device: str, where: str) -> tuple[ExperimentConfig, str]:
    """(the trial's resolved config, "" or why its deployment entry makes it undefined); a config that cannot
    be built, or a rule undefined without the deployment entry too, is the suite's error."""
    try:
        cfg = resolve_config(build_config(suite, scale, combo, device))
        system_from(cfg.system)  # the deployment's own options out of range: the suite's error, never an exclusion
    except (ConfigError, UnknownNameError) as err:
        raise SuiteError(f"{suite.path}: {where}: {err}") from None
    try:
        check_planned_server_rule(cfg)
    except (ConfigError, UnknownNameError) as err:
        if is_default(combo.deployment) or not _defined(suite, scale, replace(combo, deployment=SYNCHRONOUS_ENTRY),
                                                        device):
            raise SuiteError(f"{suite.path}: {where}: {err}") from None
        return cfg, str(err)
    return cfg, ""


def _defined(suite: Suite, scale: Scale, combo: Combo, device: str) -> bool:
    try:
        check_planned_server_rule(resolve_config(build_config(suite, scale, combo, device)))
    except (ConfigError, UnknownNameError):
        return False
    return True


def _spec(suite: Suite, scale: str, combo: Combo, cfg: ExperimentConfig) -> TrialSpec:
    method, identity = combo.method, trial_identity(cfg)
    return TrialSpec(cfg, suite.name, scale, method.label, combo.dataset.label, combo.attack.label, combo.level,
                     combo.seed, identity.config_hash, identity.cell_hash, combo.name, method.group,
                     method.select.by if method.group else "", method.variant, identity.config_key,
                     identity.versions, cfg.legacy_hash(), {**suite.tags, **declared_f_tag(combo.deployment)},
                     combo.privacy.label, combo.deployment.label)


def _one_of_same(suite: Suite, where: str, earlier: tuple[TrialSpec, Combo], later: tuple[TrialSpec, Combo]):
    """(kept, dropped) of two grid points with one config that differ in their deployment alone: a declared f that
    changes nothing gives way to the entry without one (the other way round where the later has none); any other
    pair is an error."""
    one_point = replace(earlier[1], deployment=SYNCHRONOUS_ENTRY) == replace(later[1], deployment=SYNCHRONOUS_ENTRY)
    if one_point and later[1].deployment.f_declared:
        return earlier, later
    if one_point and earlier[1].deployment.f_declared:
        return later, earlier
    raise SuiteError(f"{suite.path}: {where}: same config as trial '{earlier[0].name}'; give the entries different "
                     f"settings or drop one")


def _excluded(combo: Combo, reason: str, same_as: str = "") -> Excluded:
    return Excluded(combo.name, combo.method.label, combo.dataset.label, combo.attack.label, combo.level, combo.seed,
                    combo.privacy.label, combo.deployment.label, reason, same_as)
