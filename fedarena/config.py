"""Typed experiment config: defaults, strict construction from dicts, ``--set`` overrides, identity hash.

Component sections (dataset, model, method, attack, aggregator, privacy, system) are ``{"name": ..., **hyperparameters}``;
their hyperparameters are checked against the registered component's signature when the config is
resolved (``fedarena.sections.resolve_config``), so a misspelled key is an error, never ignored.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import hashlib
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fedarena.errors import ConfigError

SECTIONS = ("dataset", "model", "method", "attack", "aggregator", "privacy", "system")
SYNCHRONOUS = "synchronous"  # the system section's default: every drawn device reports (``fedarena.system``)
# the system options that act, at the values where they do not: the others act only through these
SYSTEM_INACTIVE = {"failure_rate": 0.0, "availability": None, "stragglers": 0.0}
NO_PRIVACY = "none"  # the privacy section's default mechanism (``fedarena.privacy``): no DP, no secure aggregation
BACKENDS = ("auto", "sequential", "batched")  # auto: models.backends.auto_backend picks one
SAMPLINGS = ("proportional", "uniform")
SCALES = ("smoke", "quick", "paper")  # a suite's scales, from the least to the most thorough
ON_DIVERGENCE = ("stop", "continue")


@dataclass
class ExperimentConfig:
    dataset: dict = field(default_factory=lambda: {"name": "digits"})
    model: dict = field(default_factory=lambda: {"name": "auto"})
    method: dict = field(default_factory=lambda: {"name": "global"})
    attack: dict = field(default_factory=lambda: {"name": "none", "level": 0.0})
    aggregator: dict = field(default_factory=lambda: {"name": "mean"})
    privacy: dict = field(default_factory=lambda: {"name": NO_PRIVACY})
    system: dict = field(default_factory=lambda: {"name": SYNCHRONOUS})  # the deployment (``fedarena.system``)
    rounds: int = 50
    clients_per_round: int = 10
    local_steps: int = 2
    local_epochs: int = 0  # > 0: train this many epochs per round instead of ``local_steps`` steps
    batch_size: int = 16
    lr: float = 0.05
    seed: int = 0
    data_seed: int | None = None  # partition seed; None: same as ``seed`` (fix it to compare seeds on one partition)
    eval_every: int = 10
    backend: str = "auto"  # the faster of sequential and batched for the model and device
    device: str = "cpu"  # cpu, cuda, cuda:N or auto
    sampling: str = "proportional"  # Ditto Algorithm 2: probability proportional to sample counts
    on_divergence: str = "stop"

    @classmethod
    def from_dict(cls, data: dict) -> ExperimentConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown config key(s) {unknown}; allowed: {', '.join(sorted(known))}")
        cfg = cls(**copy.deepcopy(data))
        cfg.check()
        return cfg

    def to_dict(self) -> dict:
        return copy.deepcopy(dataclasses.asdict(self))

    def check(self) -> None:
        """Checks that need no registry: types, ranges and choices of the top-level settings."""
        for name in SECTIONS:
            section = getattr(self, name)
            if not isinstance(section, dict) or not isinstance(section.get("name"), str):
                raise ConfigError(f"config section {name!r} must be a mapping with a 'name', got {section!r}")
        positive = ("rounds", "clients_per_round", "batch_size", "eval_every")
        for key in positive:
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{key} must be a positive integer, got {getattr(self, key)!r}")
        for key in ("local_steps", "local_epochs", "seed"):
            if isinstance(getattr(self, key), bool) or not isinstance(getattr(self, key), int):
                raise ConfigError(f"{key} must be an integer, got {getattr(self, key)!r}")
        if self.local_steps < 0 or self.local_epochs < 0 or (self.local_steps == 0 and self.local_epochs == 0):
            raise ConfigError("set local_steps >= 1 (steps per round) or local_epochs >= 1 (epochs per round)")
        for key in ("seed", "data_seed"):  # numpy's seed streams take integers >= 0
            value = getattr(self, key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ConfigError(f"{key} must be an integer >= 0{' or null' if key == 'data_seed' else ''}, got {value!r}")
        if isinstance(self.lr, bool) or not isinstance(self.lr, (int, float)) or not 0 < self.lr < math.inf:
            raise ConfigError(f"lr must be a positive finite number, got {self.lr!r}")
        self.lr = float(self.lr)
        _check_choice("backend", self.backend, BACKENDS)
        _check_choice("sampling", self.sampling, SAMPLINGS)
        _check_choice("on_divergence", self.on_divergence, ON_DIVERGENCE)
        if not isinstance(self.device, str):
            raise ConfigError(f"device must be cpu, cuda, cuda:N or auto; got {self.device!r}")

    def flat(self) -> dict[str, Any]:
        """Dotted key -> value (e.g. ``method.lam``), the form logged as MLflow params."""
        return flatten(self.to_dict())

    def privacy_is_default(self) -> bool:
        """Whether the privacy section is the default (no DP, no secure aggregation): no number changes."""
        return self.privacy.get("name") == NO_PRIVACY and not self.privacy.get("secure_aggregation", False)

    def system_is_default(self) -> bool:
        """Whether the system section is the lab's synchronous rounds (every drawn device reports): no number
        changes, and the section is no part of the trial's identity."""
        return self.system.get("name") == SYNCHRONOUS and all(
            self.system.get(key, value) == value for key, value in SYSTEM_INACTIVE.items())

    def legacy_hash(self, exclude: tuple[str, ...] = ()) -> str:
        """What a previous release recorded as the ``config_hash`` of this resolved config (sha256 of the canonical
        JSON of every key), optionally without some keys: the key of its runs and checkpoints. A trial's
        identity today is ``simulation.identity.trial_identity``."""
        items = {k: v for k, v in self.flat().items() if k not in exclude}
        if self.privacy_is_default():  # the section came later: at its default, hashes stay as they were
            items = {k: v for k, v in items.items() if not k.startswith("privacy.")}
        if self.system_is_default():  # so did this one
            items = {k: v for k, v in items.items() if not k.startswith("system.")}
        blob = json.dumps(items, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


class ResolvedConfig(ExperimentConfig):
    """A config whose component sections are resolved (defaults filled, names and keys checked): what
    ``sections.resolve_config`` returns and every builder of a trial takes, so nothing is resolved twice."""


TOP_LEVEL_KEYS = frozenset({f.name for f in dataclasses.fields(ExperimentConfig)} - set(SECTIONS))  # rounds, lr, ...


def _check_choice(key: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{key} must be one of {', '.join(allowed)}; got {value!r}")


def flatten(data: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, path + "."))
        else:
            out[path] = value
    return out


class NumberLoader(yaml.SafeLoader):
    """YAML's safe loader that also reads ``1e-5`` and ``2E3`` as numbers (YAML 1.1, PyYAML's, needs a dot and a
    signed exponent, ``1.0e-5``: ``--set privacy.delta=1e-5`` was the string '1e-5')."""


NumberLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def load_yaml(text: str) -> Any:
    """YAML text read with ``NumberLoader`` (every config, suite and ``--set`` value)."""
    return yaml.load(text, Loader=NumberLoader)  # noqa: S506 (a SafeLoader subclass)


def read_yaml_file(path: Path) -> Any:
    """A YAML file's contents; a missing file or a syntax error is a one-line ConfigError naming the file
    (and the line and column of the error)."""
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise ConfigError(f"cannot read {path}: {err.strerror or err}") from None
    try:
        return load_yaml(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)  # absent on YAMLErrors without a position
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        context = getattr(err, "context", None)
        detail = f"{problem} ({context})" if context else problem
        raise ConfigError(f"{path}{where}: invalid YAML: {detail}") from None


def parse_value(text: str) -> Any:
    """A ``--set`` value: YAML scalars and lists (``0.1``, ``true``, ``[1, 2]``), else the raw string."""
    try:
        return load_yaml(text)
    except (yaml.YAMLError, ValueError):  # ValueError: a number PyYAML cannot convert ('._e5')
        return text


def folder_arg(hint: str, *, uri: bool = False) -> Callable[[str], str]:
    """An argparse ``type`` for a folder option (``--out``, ``--data-dir``, ``--storage``): an existing file
    is refused with ``TEXT is a file; HINT``; an absent folder passes (created when written). ``uri``: a
    remote URI such as s3://bucket/path passes unchecked."""

    def folder(text: str) -> str:
        if not (uri and "://" in text) and Path(text).exists() and not Path(text).is_dir():
            raise argparse.ArgumentTypeError(f"{text} is a file; {hint}")
        return text

    return folder


def apply_override(data: dict, key: str, value: Any, section_params: dict[str, set[str]]) -> None:
    """Set ``key`` (dotted, or a bare hyperparameter name such as ``lam``) in a config dict.

    A bare key that is not a top-level setting is looked up among the hyperparameters of the chosen
    components (``section_params``: section -> its allowed keys); it must match exactly one section.
    """
    if "." in key:
        section, sub = key.split(".", 1)
        if section not in SECTIONS:
            raise ConfigError(f"unknown config section {section!r} in {key!r}; sections: {', '.join(SECTIONS)}")
        _set_nested(data.setdefault(section, {}), sub.split("."), value, key)
        return
    if key in TOP_LEVEL_KEYS:
        data[key] = value
        return
    owners = [s for s, keys in section_params.items() if key in keys]
    if len(owners) != 1:
        found = f"it belongs to {owners}; write section.{key}" if owners else "no component takes it"
        known = sorted(TOP_LEVEL_KEYS | {f"{s}.{k}" for s, keys in section_params.items() for k in keys})
        raise ConfigError(f"cannot set {key!r}: {found}. Settable keys: {', '.join(known)}")
    data.setdefault(owners[0], {})[key] = value


def _set_nested(target: dict, path: list[str], value: Any, key: str) -> None:
    for part in path[:-1]:
        target = target.setdefault(part, {})
        if not isinstance(target, dict):
            raise ConfigError(f"cannot set {key!r}: {part!r} holds {target!r}, not a mapping of options; "
                              f"set section.option (e.g. dataset.num_clients=50)")
    target[path[-1]] = value
