"""Grid expansion: a suite at one scale -> the list of trials (one federated run each).

The grid is datasets x methods (a method entry with ``select`` contributes its variants at the scales it
selects at, ``suites.select``) x privacy (one entry, none, unless the suite lists some) x attacks (each with
its levels) x seeds, minus ``exclude`` rules. A trial's config is the merge, in this order, of: the config
defaults, the suite's ``fixed``, the scale's ``fixed``, the dataset entry, the method entry, the attack
entry (and its level), the privacy entry, the seed, the device
chosen by the runner, then every matching ``overrides`` rule. It is resolved (every component's defaults
filled in) and identified (``simulation.identity``): ``config_hash`` is the trial's identity in the tracking
store (the values it uses and the versions of its components), ``config_key`` the values alone (a run with
the key but another hash is stale), ``cell_hash`` (the identity without the seed) groups the seeds of one
table cell.

Rules and a scale's ``methods`` subset name a method entry (every variant of a selected entry) or one
variant by its own label (``ditto_best_lam_lam0.01``): e.g. a dataset that leaves out one candidate value.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, field

from fedarena.config import SECTIONS, ExperimentConfig
from fedarena.datasets import DATASETS
from fedarena.errors import ConfigError
from fedarena.registry import UnknownNameError
from fedarena.sections import check_planned_server_rule, resolve_config
from fedarena.simulation.identity import trial_identity
from fedarena.suites.select import variants
from fedarena.suites.spec import NO_PRIVACY, NO_PRIVACY_ENTRY, Entry, Rule, Scale, Suite, SuiteError
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

    def labels(self) -> dict:
        """What rules match: a method variant matches as its entry (``row``)."""
        return {"dataset": self.dataset.label, "method": self.method.row, "attack": self.attack.label,
                "level": self.level, "privacy": self.privacy.label}

    def matches(self, rule: Rule) -> bool:
        """Whether ``rule`` applies: naming the method entry or, for a variant, the variant itself."""
        labels = self.labels()
        return rule.applies(labels) or rule.applies({**labels, "method": self.method.label})

    @property
    def name(self) -> str:
        return run_name(self.method.label, self.dataset.label, self.attack.label, self.level, self.seed,
                        self.privacy.label)


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
    """The grid points in a stable order (datasets, methods, privacy, attacks, levels, seeds), minus
    exclusions."""
    methods = [variant for m in suite.methods for variant in variants(m, scale.name)
               if scale.methods is None or {m.label, variant.label} & set(scale.methods)]
    attacks = [a for a in suite.attacks if scale.attacks is None or a.label in scale.attacks]
    privacy = [p for p in suite.privacy if scale.privacy is None or p.label in scale.privacy]
    rules = suite.exclude + scale.exclude
    for dataset in datasets or scale.datasets:
        for method in methods:
            for private in privacy:
                for attack in attacks:
                    for level in attack_levels(suite, scale, dataset, attack):
                        for seed in seeds or scale.seeds:
                            combo = Combo(dataset, method, attack, level, seed, private)
                            if not any(combo.matches(rule) for rule in rules):
                                yield combo


def count_trials(suite: Suite, scale: str) -> int:
    """Number of trials of a scale (structure only: no registry, no data)."""
    return sum(1 for _ in combinations(suite, suite.scales[scale]))


def build_config(suite: Suite, scale: Scale, combo: Combo, device: str) -> ExperimentConfig:
    data = ExperimentConfig().to_dict()
    for patch in (suite.fixed, scale.fixed, combo.dataset.patch, combo.method.patch, combo.attack.patch,
                  combo.privacy.patch):
        merge(data, patch)
    data["attack"]["level"] = combo.level
    data["seed"] = combo.seed
    data["device"] = device
    for rule in suite.overrides + scale.overrides:
        if combo.matches(rule):
            merge(data, rule.patch)
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
    """Every trial of the suite at ``scale``, validated (names, hyperparameters, server rules)."""
    if scale not in suite.scales:
        raise SuiteError(f"{suite.path}: unknown scale {scale!r}; choose one of {', '.join(suite.scales)}")
    chosen = suite.scales[scale]
    trials, seen = [], {}
    for combo in combinations(suite, chosen, select_datasets(chosen, dataset), seeds):
        where = f"scales.{scale}: trial '{combo.name}' ({combo.dataset.where}, {combo.method.where}, {combo.attack.where})"
        try:
            cfg = resolve_config(build_config(suite, chosen, combo, device))
            check_planned_server_rule(cfg)
        except (ConfigError, UnknownNameError) as err:
            raise SuiteError(f"{suite.path}: {where}: {err}") from None
        method, identity = combo.method, trial_identity(cfg)
        spec = TrialSpec(cfg, suite.name, scale, method.label, combo.dataset.label, combo.attack.label,
                         combo.level, combo.seed, identity.config_hash, identity.cell_hash, combo.name,
                         method.group, method.select.by if method.group else "", method.variant,
                         identity.config_key, identity.versions, cfg.legacy_hash(), dict(suite.tags),
                         combo.privacy.label)
        if spec.config_hash in seen:
            raise SuiteError(f"{suite.path}: {where}: same config as trial '{seen[spec.config_hash]}'; give the "
                             f"entries different settings or drop one")
        seen[spec.config_hash] = combo.name
        trials.append(spec)
    if not trials:
        raise SuiteError(f"{suite.path}: scales.{scale}: empty grid (every combination is excluded)")
    return trials
