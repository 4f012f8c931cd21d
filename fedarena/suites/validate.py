"""Checks of a suite against the registries, before Ray starts and without loading any data.

- Entries: every component name (dataset, model, method, attack, aggregator, privacy, system) is registered and its
  hyperparameters match the component's signature, every variant of a ``select`` included, and a
  ``select`` picks by a registered metric (``check_suite_entries``); a dataset label names the dataset run,
  not another one (``check_dataset_labels``, rule in ``fedarena.suites.dataset_labels``).
- Trials: the merged config of every trial resolves and its server rule is defined for the trial's attack
  level (``fedarena.sections``: ``resolve_config``, ``check_planned_server_rule``, the rules trial set-up
  applies too).
"""

from __future__ import annotations

from fedarena.config import SECTIONS, ExperimentConfig
from fedarena.datasets import DATASETS
from fedarena.errors import ConfigError
from fedarena.registry import UnknownNameError
from fedarena.sections import check_section
from fedarena.simulation.metrics import METRIC_DIRECTIONS
from fedarena.suites.dataset_labels import misnamed
from fedarena.suites.select import all_variants
from fedarena.suites.spec import Suite, SuiteError


def check_patch(suite: Suite, where: str, patch: dict) -> None:
    """A patch's named sections against the registries and its top-level settings against the config."""
    for section in SECTIONS:
        if section in patch and "name" in patch[section]:
            try:
                check_section(section, patch[section])
            except (ConfigError, UnknownNameError) as err:
                raise SuiteError(f"{suite.path}: {where}.{section}: {err}") from None
    top = {k: v for k, v in patch.items() if k not in SECTIONS}
    try:
        ExperimentConfig.from_dict({**ExperimentConfig().to_dict(), **top})
    except ConfigError as err:
        raise SuiteError(f"{suite.path}: {where}: {err}") from None


def check_dataset_labels(suite: Suite) -> None:
    """A dataset label that is a dataset's name (or a paper's dataset id) is the dataset the entry runs."""
    for scale in suite.scales.values():
        for entry in scale.datasets:
            name = entry.patch["dataset"]["name"]
            if misnamed(entry.label, name, DATASETS.names()):
                raise SuiteError(f"{suite.path}: {entry.where}.label: {entry.label!r} names another dataset than "
                                 f"the one run ({name!r}); label the entry by the dataset it runs, e.g. "
                                 f"`label: {name}`, so run names, tags, tables and figures say what ran")


def check_selections(suite: Suite) -> None:
    """Every ``select`` picks its variant by a registered metric (the leaderboards know its direction)."""
    for entry in suite.methods:
        if entry.select is not None and entry.select.by not in METRIC_DIRECTIONS:
            raise SuiteError(f"{suite.path}: {entry.where}.select.by: unknown metric {entry.select.by!r}; "
                             f"available: {', '.join(METRIC_DIRECTIONS)}")


def check_suite_entries(suite: Suite) -> None:
    """Every patch of the suite: fixed settings, axis entries of every scale (every variant of a
    ``select``), override rules; the dataset labels and the selections."""
    check_dataset_labels(suite)
    check_selections(suite)
    methods = tuple(v for e in suite.methods for v in all_variants(e))
    entries = methods + suite.attacks + suite.privacy + suite.deployment
    patches = [("fixed", suite.fixed)] + [(e.where, e.patch) for e in entries]
    patches += [(rule.where + ".set", rule.patch) for rule in suite.overrides]
    for name, scale in suite.scales.items():
        patches.append((f"scales.{name}.fixed", scale.fixed))
        patches += [(e.where, e.patch) for e in scale.datasets]
        patches += [(rule.where + ".set", rule.patch) for rule in scale.overrides]
    for where, patch in patches:
        check_patch(suite, where, patch)
