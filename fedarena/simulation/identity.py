"""A trial's identity: what it computes, so that a store keeps one run for it and never takes a run of an
older behaviour for a current one.

Two parts (``docs/semantics.md``, "Identity"):

- ``values``: the resolved config, flattened (``method.lam``), as the trial uses it: a null hyperparameter
  that its component resolves from what the trial is known to be (``Registry.add``'s ``effective``, e.g.
  multi-Krum's ``m`` = n - f, the aggregator's ``f``) counts as that value, and every value equal to its
  default is left out, top-level keys too; component names and the device stay. An option added later
  with a default that keeps the numbers therefore leaves every identity as it was. Where the data files
  live (``dataset.data_dir``) is no part of it: the run's ``dataset_fingerprint`` records what was read.
- ``versions``: ``"kind/name" -> version`` of every component the trial uses (dataset and its partitioner,
  model, method, attack, aggregator and pre-aggregators, every metric) and of the engine; a private trial
  (central or local DP) adds its privacy mechanism's and its accountant's (``accountant/rdp``).

Settings that name what the trial would do anyway are folded: an explicit ``backend`` equal to ``auto``'s pick
for the model and device (``models.backends.planned_backend``, from the model's layers, without data) is left
out as ``auto`` is, and so is a ``data_seed`` equal to the seed (a null data seed partitions with the seed):
one set of numbers, one identity. ``Identity.folded`` keeps what was folded.

``config_hash`` hashes both (the run's identity in the store); ``config_key`` hashes the values alone (the
same trial at other versions: a finished run with the key but not the hash is stale); ``cell_hash`` is
``config_hash`` without the seed (the seeds of one table cell), with a data seed fixed in the config even where
``config_hash`` folds it (the seed-0 trial of ``data_seed: 0`` stays in the cell of seeds 1 and 2).
``Identity.unfolded`` is the identity of the values as written, without folding: what a store written before
the folding recorded for the config.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from fedarena.attacks.base import malicious_count
from fedarena.config import SECTIONS, ExperimentConfig, ResolvedConfig, flatten
from fedarena.datasets.partition import PARTITIONERS
from fedarena.methods.aggregators.base import PRE_AGGREGATORS
from fedarena.methods.aggregators.builder import aggregator_from, expected_malicious, pre_names
from fedarena.models.backends import planned_backend
from fedarena.params import TrialFacts, hyperparameters
from fedarena.privacy.audit import VERSION as AUDIT_VERSION
from fedarena.privacy.base import ACCOUNTANT, privacy_from
from fedarena.privacy.base import NONE as NO_PRIVACY
from fedarena.round_inputs import INPUTS
from fedarena.sections import KINDS, resolve_config
from fedarena.simulation.engine import ENGINE_VERSION
from fedarena.simulation.metrics import METRICS

ENGINE = "engine"
AUDIT = "audit/canaries"  # a privacy audit's version: what its estimates and flag are (``privacy.audit.VERSION``)
ALWAYS_KEPT = ("device",)  # top-level keys kept even at their default ("the device stays in it")
PARTITION_KEY = "partition"  # a dataset option naming its registered partitioner
LOCATION_KEYS = {"dataset": ("data_dir",)}  # where things are, not what is computed
FOLDED = ("backend", "data_seed")  # top-level settings left out where they name what the trial does anyway
CELL_KEPT = ("data_seed",)  # folded, but a fixed one still groups the seeds of its cell (``cell_hash``)


@dataclass(frozen=True)
class Identity:
    values: dict[str, Any]  # dotted key -> value, defaults left out
    versions: dict[str, int | str]  # "kind/name" (or "engine") -> version
    folded: dict[str, Any] = dataclasses.field(default_factory=dict)  # settings as written, folded (FOLDED)

    @property
    def config_hash(self) -> str:
        return digest({"values": self.values, "versions": self.versions})

    @property
    def config_key(self) -> str:
        return digest({"values": self.values})

    @property
    def cell_hash(self) -> str:
        values = {k: v for k, v in self.values.items() if k != "seed"}
        values.update({k: v for k, v in self.folded.items() if k in CELL_KEPT})
        return digest({"values": values, "versions": self.versions})

    @property
    def unfolded(self) -> Identity:
        """The identity of the values as written (nothing folded): what a store written before the folding
        recorded for this config."""
        return Identity(dict(sorted({**self.values, **self.folded}.items())), self.versions)


def digest(data: Any) -> str:
    """sha256 of the canonical JSON of ``data`` (sorted keys), 16 hex digits."""
    blob = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def canonical(value: Any) -> Any:
    """A value as JSON gives it back (tuples as lists), so that equal values compare equal."""
    return json.loads(json.dumps(value, default=str))


def trial_facts(cfg: ExperimentConfig) -> TrialFacts:
    """n and the f the server rule assumes, where the number of devices is a dataset option (else f None)."""
    num_clients = cfg.dataset.get("num_clients")
    if isinstance(num_clients, bool) or not isinstance(num_clients, int) or num_clients < 1:
        return TrialFacts(cfg.clients_per_round, None)
    count = min(malicious_count(float(cfg.attack.get("level", 0.0)), num_clients), num_clients)
    everyone = num_clients + privacy_from(cfg.privacy).canaries  # a privacy audit's canaries are drawn too
    return TrialFacts(cfg.clients_per_round, expected_malicious(cfg.clients_per_round, count, everyone))


def trial_identity(cfg: ExperimentConfig) -> Identity:
    """The identity of a config (resolved here unless it is already)."""
    cfg = resolve_config(cfg)
    facts = trial_facts(cfg)
    values = _top_level_values(cfg)
    folded = {key: values.pop(key) for key in FOLDED if key in values and _folds(cfg, key)}
    for section in SECTIONS:
        if _added_later_at_default(cfg, section):
            continue
        values.update({f"{section}.{k}": v for k, v in section_values(cfg, section, facts).items()})
    return Identity(dict(sorted(values.items())), component_versions(cfg), folded)


def _added_later_at_default(cfg: ExperimentConfig, section: str) -> bool:
    """Sections added after the first runs (privacy, system) at their defaults: no identity changes."""
    return (section == "privacy" and cfg.privacy_is_default()) or (section == "system" and cfg.system_is_default())


def _folds(cfg: ResolvedConfig, key: str) -> bool:
    """Whether a top-level setting, written, names what the trial would do without it: a backend equal to
    ``auto``'s pick for the model and device (where that pick is known from the config alone), a data seed
    equal to the seed."""
    if key == "backend":
        return cfg.backend == planned_backend(cfg.model, cfg.device)
    return key == "data_seed" and cfg.data_seed == cfg.seed


def _top_level_values(cfg: ResolvedConfig) -> dict[str, Any]:
    defaults = ExperimentConfig()
    out = {}
    for field in dataclasses.fields(ExperimentConfig):
        if field.name in SECTIONS:
            continue
        value = getattr(cfg, field.name)
        if field.name in ALWAYS_KEPT or canonical(value) != canonical(getattr(defaults, field.name)):
            out[field.name] = canonical(value)
    return out


def section_values(cfg: ResolvedConfig, section: str, facts: TrialFacts) -> dict[str, Any]:
    """A resolved section's values as the trial uses them, defaults left out (flattened below the section)."""
    data = dict(getattr(cfg, section))
    kind = KINDS[section]
    name = data.pop("name")
    defaults = hyperparameters(kind.signature(kind.registry.get(name)), kind.exclude)
    defaults.update(_structural_defaults(section))
    resolvers = kind.registry.effective(name)
    if section == "aggregator":
        resolvers = {**resolvers, "f": lambda facts: facts.f}
    kept = {}
    for key, value in data.items():
        if key in LOCATION_KEYS.get(section, ()):
            continue
        resolver = resolvers.get(key)
        used = resolver(facts) if resolver is not None and value is None else value
        default = defaults.get(key)
        default = resolver(facts) if resolver is not None and default is None else default
        if canonical(used) != canonical(default):
            kept[key] = canonical(used)
    return {"name": name, **flatten(kept)}


def _structural_defaults(section: str) -> dict[str, Any]:
    return {"aggregator": {"pre": [], "f": None}, "attack": {"level": 0.0}}.get(section, {})


def component_versions(cfg: ResolvedConfig) -> dict[str, int | str]:
    """``"kind/name" -> version`` of every component a resolved config uses, and the engine's."""
    versions: dict[str, int | str] = {ENGINE: ENGINE_VERSION}
    for section, kind in KINDS.items():
        if _added_later_at_default(cfg, section):
            continue
        name = getattr(cfg, section)["name"]
        versions[f"{section}/{name}"] = kind.registry.version(name)
    if not cfg.privacy_is_default() and cfg.privacy["name"] != NO_PRIVACY:  # the accountant of its epsilon
        name = cfg.privacy.get("accountant", "rdp")
        versions[f"accountant/{name}"] = ACCOUNTANT.version(name)
        if privacy_from(cfg.privacy).audit is not None:  # what a privacy audit reports
            versions[AUDIT] = AUDIT_VERSION
    for pre in pre_names(cfg.aggregator):
        versions[f"pre_aggregator/{pre}"] = PRE_AGGREGATORS.version(pre)
    for name in aggregator_from(cfg.aggregator, f=0).inputs:  # a built-in input at version 1 adds nothing: the
        if INPUTS.version(name) != 1:  # identities of before inputs had versions; a plugin's carries its source
            versions[f"round_input/{name}"] = INPUTS.version(name)
    partition = cfg.dataset.get(PARTITION_KEY)
    if isinstance(partition, str):
        versions[f"partitioner/{partition}"] = PARTITIONERS.version(partition)
    for name in METRICS.registered():
        versions[f"metric/{name}"] = METRICS.version(name)
    return dict(sorted(versions.items()))


def stale_components(recorded: dict[str, int | str], current: dict[str, int | str]) -> list[str]:
    """What differs between a run's recorded versions and today's: ``aggregator/krum v1 -> v2`` (a component
    the run used that is no longer registered: ``... v1 -> gone``)."""
    out = []
    for key in sorted(set(recorded) | set(current)):
        old, new = recorded.get(key), current.get(key)
        if old != new:
            out.append(f"{key} {_shown(old)} -> {_shown(new)}")
    return out


def _shown(version: int | str | None) -> str:
    if version is None:
        return "none"
    return f"v{version}" if isinstance(version, int) else str(version)


def registered_version(key: str) -> int | str | None:
    """Today's version of ``"kind/name"`` (or ``"engine"``); None where no such component is registered here
    (e.g. a plugin this process did not load)."""
    if key == ENGINE:
        return ENGINE_VERSION
    if key == AUDIT:
        return AUDIT_VERSION
    kind, _, name = key.partition("/")
    registry = {**{k: v.registry for k, v in KINDS.items()}, "pre_aggregator": PRE_AGGREGATORS,
                "partitioner": PARTITIONERS, "metric": METRICS, "accountant": ACCOUNTANT,
                "round_input": INPUTS}.get(kind)
    if registry is None or name not in registry:
        return None
    return registry.version(name)
