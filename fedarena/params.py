"""Hyperparameters of a registered component, read from its signature.

A component (dataset builder, method, attack, aggregator, model) declares its hyperparameters as
keyword-only arguments with defaults. A config section ``{"name": ..., **params}`` is checked against
that signature: unknown keys are errors that list the allowed ones, never silently dropped.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fedarena.errors import ConfigError
from fedarena.registry import Registry


@functools.lru_cache(maxsize=1024)
def signature(fn: Callable) -> inspect.Signature:
    """``inspect.signature``, once per component (a suite's expansion asks ~19,000 times for ~100 of them)."""
    return inspect.signature(fn)


def hyperparameters(fn: Callable, exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    """Keyword-only parameters of ``fn`` with their defaults (``inspect.Parameter.empty`` if required)."""
    sig = signature(fn)
    return {
        name: p.default
        for name, p in sig.parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and name not in exclude
    }


def resolve(kind: str, name: str, fn: Callable, given: Mapping[str, Any], exclude: tuple[str, ...] = ()) -> dict:
    """Defaults of ``fn`` overridden by ``given``; unknown or missing keys raise ConfigError."""
    allowed = hyperparameters(fn, exclude)
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        listing = ", ".join(sorted(allowed)) or "none"
        raise ConfigError(f"unknown parameter(s) {unknown} for {kind} {name!r}; allowed: {listing}")
    resolved = {}
    for key, default in allowed.items():
        if key in given and given[key] is None and not _nullable(fn, key, default):
            raise ConfigError(f"{kind} {name!r}: {key} cannot be null; give a value like its default {default!r}")
        if key in given and default is None:  # checked against its annotated type, kept as given
            coerce(kind, name, key, given[key], OPTIONAL_TYPES.get(_annotation(fn, key)))
            resolved[key] = given[key]
        elif key in given:
            resolved[key] = coerce(kind, name, key, given[key], default)
        elif default is inspect.Parameter.empty:
            raise ConfigError(f"{kind} {name!r} needs parameter {key!r}")
        else:
            resolved[key] = default
    return resolved


OPTIONAL_TYPES = {"int | None": 0, "float | None": 0.0, "str | None": "", "tuple | None": (), "dict | None": {}}
"""A hyperparameter's annotation (default None) -> a value of its type, to check a given value against."""


def _annotation(fn: Callable, key: str) -> str:
    return str(signature(fn).parameters[key].annotation)


def _nullable(fn: Callable, key: str, default: Any) -> bool:
    """Whether a hyperparameter takes null: its default is None (or it has none) or its annotation says so."""
    return default is None or default is inspect.Parameter.empty or "None" in _annotation(fn, key)


def coerce(kind: str, name: str, key: str, value: Any, default: Any) -> Any:
    """Bring ``value`` to the type of ``default`` where that is unambiguous (int -> float, list -> tuple)."""
    if default is None or default is inspect.Parameter.empty or value is None:
        return value
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{kind} {name!r}: {key} must be true or false, got {value!r}")
        return value
    if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(default, int) and isinstance(value, float):
        if not value.is_integer():
            raise ConfigError(f"{kind} {name!r}: {key} must be a whole number, got {value!r}")
        return int(value)
    if isinstance(default, tuple):
        return _coerce_list(f"{kind} {name!r}: {key}", value, default)
    if isinstance(default, (int, float)) and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ConfigError(f"{kind} {name!r}: {key} must be a number, got {value!r}")
    if isinstance(default, dict) and not isinstance(value, dict):
        raise ConfigError(f"{kind} {name!r}: {key} must be a mapping such as {{key: value}}, got {value!r}")
    if isinstance(default, str) and not isinstance(value, str):
        raise ConfigError(f"{kind} {name!r}: {key} must be text such as {default!r}, got {value!r}")
    return value


def _coerce_list(what: str, value: Any, default: tuple) -> tuple:
    """A list for a tuple default; where the default holds only integers (or numbers), so must the value."""
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"{what} must be a list such as {list(default)!r}, got {value!r}")
    numbers = [d for d in default if isinstance(d, (int, float)) and not isinstance(d, bool)]
    if default and len(numbers) == len(default):
        wanted = int if all(isinstance(d, int) for d in default) else (int, float)
        if not all(isinstance(v, wanted) and not isinstance(v, bool) for v in value):
            kind = "whole numbers" if wanted is int else "numbers"
            raise ConfigError(f"{what} must be a list of {kind} such as {list(default)!r}, got {value!r}")
    return tuple(value)


@dataclass(frozen=True)
class TrialFacts:
    """What is known of a trial before its data is loaded, for the values a component's null hyperparameters
    stand for (``Registry.add``'s ``effective``): ``n`` updates a round and ``f``, the malicious ones the
    server rule assumes (None where the number of devices is only known from the data)."""

    n: int
    f: int | None


def _no_structure(section: Mapping[str, Any]) -> dict:
    return {}


@dataclass(frozen=True)
class SectionKind:
    """How a config section of one kind of component is resolved and checked.

    A section is ``{"name": ..., **structural keys, **hyperparameters}``: ``name`` picks a registry entry,
    ``structural_keys`` are read by ``structure`` (e.g. an attack's level), and every other key must be a
    keyword-only argument of ``signature(entry)``. Each component package declares its kind next to its
    registry; ``fedarena.sections`` is the table of all of them.
    """

    kind: str
    registry: Registry
    signature: Callable[[Any], Callable]  # entry -> the callable whose keyword-only arguments are the keys
    structural_keys: tuple[str, ...] = ()
    structure: Callable[[Mapping[str, Any]], dict] = _no_structure  # the resolved structural keys
    exclude: tuple[str, ...] = ()  # keyword-only arguments that are not config keys (an aggregator's inputs)
    # the resolved section in one spelling (a nested mapping's defaults filled or left out), so that equal settings
    # are one identity
    canonical: Callable[[dict], dict] | None = None

    def keys(self, name: str) -> set[str]:
        """Every key a section of entry ``name`` may hold besides ``name``."""
        return set(hyperparameters(self.signature(self.registry.get(name)), self.exclude)) | set(self.structural_keys)

    def resolve(self, section: Mapping[str, Any]) -> dict:
        """``{"name", **structural, **hyperparameters with defaults}``; unknown names or keys raise errors
        that list what is allowed."""
        if "name" not in section:
            raise ConfigError(f"a {self.kind} section needs a 'name'; available: {', '.join(self.registry.names())}")
        name = section["name"]
        entry = self.registry.get(name)
        given = {k: v for k, v in section.items() if k != "name" and k not in self.structural_keys}
        params = resolve(self.kind, name, self.signature(entry), given, exclude=self.exclude)
        resolved = {"name": name, **self.structure(section), **params}
        return resolved if self.canonical is None else self.canonical(resolved)
