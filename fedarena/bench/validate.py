"""Checks of a suite against the registries, before Ray starts and without loading any data.

- Entries: every component name (dataset, model, method, attack, aggregator) is registered and its
  hyperparameters match the component's signature (``check_suite_entries``).
- Trials: the merged config of every trial resolves (``resolve_config``), and its server rule is defined
  for the trial's attack level (e.g. Krum needs 2f + 2 < n), where the number of clients is known from the
  dataset options (``check_server_rule``, the same rule ``simulation.setup`` applies when it builds a trial).
"""

from __future__ import annotations

from fedarena.attacks.base import attack_params
from fedarena.bench.suite import Suite, SuiteError
from fedarena.config import SECTIONS, ExperimentConfig
from fedarena.datasets import dataset_options
from fedarena.methods.aggregators import make_aggregator
from fedarena.methods.base import METHODS, build_method
from fedarena.models import MODELS
from fedarena.params import ConfigError, resolve
from fedarena.registry import UnknownNameError
from fedarena.simulation import setup  # importing it registers every component


def check_section(section: str, data: dict) -> None:
    """One named config section against its registry (raises UnknownNameError / ConfigError)."""
    name, options = data["name"], {k: v for k, v in data.items() if k != "name"}
    if section == "dataset":
        dataset_options(name, options)
    elif section == "model":
        if name != "auto":
            resolve("model", name, MODELS.get(name), options)
        elif options:
            raise ConfigError(f"model 'auto' takes no options; name the model to set {sorted(options)}")
    elif section == "method":
        resolve("method", name, METHODS.get(name), options)
    elif section == "attack":
        attack_params(data)
    else:
        make_aggregator(data, f=0)


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


def check_suite_entries(suite: Suite) -> None:
    """Every patch of the suite: fixed settings, axis entries of every scale, override rules."""
    patches = [("fixed", suite.fixed)] + [(e.where, e.patch) for e in suite.methods + suite.attacks]
    patches += [(rule.where + ".set", rule.patch) for rule in suite.overrides]
    for name, scale in suite.scales.items():
        patches.append((f"scales.{name}.fixed", scale.fixed))
        patches += [(e.where, e.patch) for e in scale.datasets]
        patches += [(rule.where + ".set", rule.patch) for rule in scale.overrides]
    for where, patch in patches:
        check_patch(suite, where, patch)


def check_server_rule(cfg: ExperimentConfig) -> None:
    """The trial's method and aggregator fit together, and the aggregator is defined for the level (the rule
    ``simulation.setup`` applies when it builds a trial). Datasets whose number of clients is only known from
    the data (natural partitions) get their aggregator checked when the trial is built."""
    method = build_method(cfg.method)
    num_clients = cfg.dataset.get("num_clients")
    if not isinstance(num_clients, int) or isinstance(num_clients, bool):
        if not method.uses_aggregator:
            setup.check_server_rule(cfg, method, 0, cfg.clients_per_round)
        return
    if cfg.clients_per_round > num_clients:
        raise ConfigError(f"clients_per_round={cfg.clients_per_round} exceeds the {num_clients} clients")
    malicious = min(int(round(float(cfg.attack.get("level", 0.0)) * num_clients)), num_clients)
    setup.check_server_rule(cfg, method, malicious, num_clients)
