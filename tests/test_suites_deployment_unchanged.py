"""Suites without a deployment axis are what they were before it: every shipped suite at every scale expands to the
trials, identities, run names and labels the grid gave before the axis existed (commit b34a3be), computed here the
way that code computed them (its combination order, merge order and run names), independently of the axis."""

import copy

import pytest

from fedarena.config import SECTIONS, ExperimentConfig
from fedarena.sections import resolve_config
from fedarena.simulation.identity import trial_identity
from fedarena.suites import SUITES
from fedarena.suites.grid import attack_levels, expand_grid, select_datasets
from fedarena.suites.parse import load_suite
from fedarena.suites.select import variants

pytestmark = pytest.mark.slow  # 7,400 trials' identities, twice: about 40 s


def merged(data: dict, patch: dict) -> None:
    for key, value in patch.items():
        value = copy.deepcopy(value)
        data[key] = (value if "name" in value else {**data.get(key, {}), **value}) if key in SECTIONS else value


def reference_trials(suite, scale: str) -> list[tuple]:
    """(name, config_hash, cell_hash, config_key, method, dataset, attack, level, privacy) of every trial, as the
    grid before the deployment axis made them."""
    chosen = suite.scales[scale]
    methods = [v for m in suite.methods for v in variants(m, scale)
               if chosen.methods is None or {m.label, v.label} & set(chosen.methods)]
    attacks = [a for a in suite.attacks if chosen.attacks is None or a.label in chosen.attacks]
    privacy = [p for p in suite.privacy if chosen.privacy is None or p.label in chosen.privacy]
    out = []
    for dataset in select_datasets(chosen, None):
        for method in methods:
            for private in privacy:
                for attack in attacks:
                    for level in attack_levels(suite, chosen, dataset, attack):
                        for seed in chosen.seeds:
                            out += one_trial(suite, chosen, dataset, method, private, attack, level, seed)
    return out


def one_trial(suite, scale, dataset, method, private, attack, level, seed) -> list[tuple]:
    labels = {"dataset": dataset.label, "method": method.row, "attack": attack.label, "level": level,
              "privacy": private.label}
    def matches(rule):  # noqa: E306
        return rule.applies(labels) or rule.applies({**labels, "method": method.label})
    if any(matches(rule) for rule in suite.exclude + scale.exclude):
        return []
    data = ExperimentConfig().to_dict()
    for patch in (suite.fixed, scale.fixed, dataset.patch, method.patch, attack.patch, private.patch):
        merged(data, patch)
    data.update(seed=seed, device="cpu")
    data["attack"]["level"] = level
    for rule in suite.overrides + scale.overrides:
        if matches(rule):
            merged(data, rule.patch)
    identity = trial_identity(resolve_config(ExperimentConfig.from_dict(data)))
    setting = f"{attack.label}@{level:g}" if level > 0 else attack.label
    privacy = f" {private.label}" if private.label != "none" else ""
    name = f"{method.label} {dataset.label} {setting}{privacy} s{seed}"
    return [(name, identity.config_hash, identity.cell_hash, identity.config_key, method.label, dataset.label,
             attack.label, level, private.label)]


@pytest.mark.parametrize("name", [n for n in SUITES.names() if n != "deployment"])
def test_a_shipped_suite_without_the_axis_expands_as_before_it(name):
    suite = load_suite(name)
    assert [e.label for e in suite.deployment] == ["synchronous"]
    for scale in suite.scales:
        # Execute
        grid = expand_grid(suite, scale)
        # Assert
        assert not grid.excluded
        assert {t.deployment_label for t in grid.trials} == {"synchronous"}
        assert all(t.config.system_is_default() for t in grid.trials)
        ours = [(t.name, t.config_hash, t.cell_hash, t.config_key, t.method_label, t.dataset_label, t.attack_label,
                 t.level, t.privacy_label) for t in grid.trials]
        assert ours == reference_trials(suite, scale), f"{name} at {scale}"
