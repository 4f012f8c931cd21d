"""The config's component sections, each resolved by its kind's home, and the rules between sections.

Each component package declares how a section of its kind is resolved (``SectionKind``, next to its
registry): ``datasets.catalog``, ``models.zoo``, ``methods.base``, ``attacks.base`` and
``methods.aggregators.builder``. This module is the table of them. Trial set-up, suite validation and
``--set`` all go through it; no other module knows a section's keys. Rules that tie sections together live
here too: ``model: auto`` takes the dataset's model, and the server rule must fit the method and be defined
for the attack's corruption level.
"""

from __future__ import annotations

from fedarena.attacks.base import ATTACK_SECTION, malicious_count
from fedarena.config import ExperimentConfig, ResolvedConfig
from fedarena.datasets.catalog import DATASET_SECTION, DATASETS
from fedarena.errors import ConfigError
from fedarena.methods.aggregators.builder import (
    AGGREGATOR_SECTION,
    Aggregator,
    aggregator_from,
    check_rule,
    expected_malicious,
)
from fedarena.methods.aggregators.crfl import check_crfl_method
from fedarena.methods.base import METHOD_SECTION, Method, method_from
from fedarena.models.zoo import AUTO, MODEL_SECTION
from fedarena.params import SectionKind
from fedarena.privacy.base import PRIVACY_SECTION, privacy_from
from fedarena.privacy.dp_trial import check_privacy
from fedarena.system.base import SYSTEM_SECTION, system_from
from fedarena.system.requirements import check_system_privacy

KINDS: dict[str, SectionKind] = {
    "dataset": DATASET_SECTION,
    "model": MODEL_SECTION,
    "method": METHOD_SECTION,
    "attack": ATTACK_SECTION,
    "aggregator": AGGREGATOR_SECTION,
    "privacy": PRIVACY_SECTION,
    "system": SYSTEM_SECTION,
}


def model_name(cfg: ExperimentConfig) -> str:
    """The configured model, or the dataset's own (the papers' pairing) for ``auto``."""
    name = cfg.model["name"]
    return DATASETS.get(cfg.dataset["name"]).model if name == AUTO else name


def check_section(section: str, data: dict) -> None:
    """One named section on its own (suite validation): its name is registered and its keys allowed.
    ``model: auto`` is checked once the dataset is known, and takes no options."""
    if section == "model" and data.get("name") == AUTO:
        options = sorted(k for k in data if k != "name")
        if options:
            raise ConfigError(f"model 'auto' takes no options; name the model to set {options}")
        return
    KINDS[section].resolve(data)


def resolve_config(cfg: ExperimentConfig) -> ResolvedConfig:
    """The config with every component's defaults filled in (what gets logged and hashed); a config that is
    already resolved is returned as it is."""
    if isinstance(cfg, ResolvedConfig):
        return cfg
    data = cfg.to_dict()
    for section, kind in KINDS.items():
        data[section] = kind.resolve(_named(cfg, section))
    return ResolvedConfig.from_dict(data)


def section_keys(cfg: ExperimentConfig) -> dict[str, set[str]]:
    """Allowed keys of each chosen component besides its name (for bare ``--set key=value``)."""
    return {section: kind.keys(_named(cfg, section)["name"]) for section, kind in KINDS.items()}


def _named(cfg: ExperimentConfig, section: str) -> dict:
    """The section of ``cfg``, with ``model: auto`` replaced by the dataset's model."""
    data = dict(getattr(cfg, section))
    if section == "model":
        data["name"] = model_name(cfg)
    return data


def check_method_model(cfg: ExperimentConfig, method: Method) -> None:
    """A method defined for some models only (MOCHA: the linear SVM) refuses the others."""
    model = model_name(cfg)
    if method.models is not None and model not in method.models:
        raise ConfigError(f"method {method.name!r} is defined for model {' or '.join(map(repr, method.models))} "
                          f"(a convex model it solves exactly), not {model!r}; set model.name="
                          f"{method.models[0]}")


def check_server_rule(cfg: ExperimentConfig, method: Method, num_malicious: int,
                      num_clients: int) -> Aggregator | None:
    """The method and the aggregator fit together and the rule is defined for this corruption; returns the
    checked rule (None for a method without global aggregation).

    A method without global aggregation takes only the plain mean. f = int(clients_per_round * malicious /
    clients) (docs/semantics.md), unless the aggregator section overrides it.
    """
    if not method.uses_aggregator:
        if cfg.aggregator["name"] != "mean" or cfg.aggregator.get("pre"):
            raise ConfigError(f"method {method.name!r} has no global aggregation; it cannot use aggregator "
                              f"{cfg.aggregator['name']!r} (leave the aggregator at 'mean')")
        return None
    rule = aggregator_from(cfg.aggregator, f=expected_malicious(cfg.clients_per_round, num_malicious, num_clients))
    check_rule(rule, n=cfg.clients_per_round)
    if rule.entry.certify is not None:  # a certificate of w + the rule's output: the method must make that model
        check_crfl_method(method)
    return rule


def check_clients_per_round(per_round: int, num_clients: int, canaries: int, dataset: str | None = None) -> None:
    """A ConfigError where a round draws more clients than there are: the devices and a privacy audit's canaries."""
    if per_round > num_clients + canaries:
        of = f" of dataset {dataset!r}" if dataset else ""
        also = f" and the privacy audit's {canaries} canaries" if canaries else ""
        raise ConfigError(f"clients_per_round={per_round} exceeds the {num_clients} clients{of}{also}")


def check_planned_server_rule(cfg: ExperimentConfig) -> None:
    """``check_server_rule`` and the privacy section's rules before any data is loaded (suite validation), where
    the number of clients is known from the dataset options; datasets whose number of clients is only known from
    the data (natural partitions) get their aggregator checked when the trial is built."""
    method = method_from(cfg.method)
    check_method_model(cfg, method)
    num_clients = cfg.dataset.get("num_clients")
    if not isinstance(num_clients, int) or isinstance(num_clients, bool):
        if not method.uses_aggregator:
            check_server_rule(cfg, method, 0, cfg.clients_per_round)
        check_privacy(privacy_from(cfg.privacy), cfg.sampling, method, None, cfg.attack)
        check_system_privacy(system_from(cfg.system), privacy_from(cfg.privacy).private,
                             privacy_from(cfg.privacy).secure_aggregation)
        return
    spec = privacy_from(cfg.privacy)
    check_clients_per_round(cfg.clients_per_round, num_clients, spec.canaries)
    malicious = min(malicious_count(float(cfg.attack.get("level", 0.0)), num_clients), num_clients)
    rule = check_server_rule(cfg, method, malicious, num_clients + spec.canaries)
    check_privacy(spec, cfg.sampling, method, rule, cfg.attack)
    check_system_privacy(system_from(cfg.system), spec.private, spec.secure_aggregation)
