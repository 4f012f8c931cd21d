"""One registry idiom for every kind of component (datasets, models, methods, aggregators, attacks, suites).

Register with a decorator, get an error on duplicates, and a lookup error that lists what exists:

    AGGREGATORS = Registry("aggregator")

    @AGGREGATORS.register("median")
    def median(updates, *, weights, losses, f): ...

    AGGREGATORS.get("medain")  # UnknownNameError: unknown aggregator 'medain'; available: krum, median, ...

Every entry carries a version (``register("median", version=2)``; default 1), part of the identity of every
trial that uses it (``simulation.identity``): bump it with any change that changes the entry's numbers, so
that runs of the old behaviour are never taken for runs of the new one.
"""

from __future__ import annotations

import contextlib
import contextvars
import difflib
import importlib
import pkgutil
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Origin:
    """Where a registered entry comes from, when not from fedarena's own tree: a plugin (``fedarena.plugins``),
    named by ``label`` (its path or entry point) with the hash of its source files (``digest``)."""

    label: str
    digest: str
    isolated: bool = False  # registered as a stand-in whose code runs in a sandbox (``fedarena.isolation``)


# The plugin being imported right now (set by ``fedarena.plugins`` around its import): what it registers is its
_LOADING: contextvars.ContextVar[Origin | None] = contextvars.ContextVar("fedarena_loading_plugin", default=None)


@contextlib.contextmanager
def loading(origin: Origin):
    """Within the block, every entry registered comes from ``origin``."""
    token = _LOADING.set(origin)
    try:
        yield
    finally:
        _LOADING.reset(token)


class UnknownNameError(KeyError):
    """A name that is not in a registry. The message lists the available names."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class DuplicateNameError(ValueError):
    """A name registered twice (two components, or a plugin naming a built-in one)."""


class Registry(Generic[T]):
    """A name -> object mapping for one kind of component."""

    instances: weakref.WeakSet[Registry] = weakref.WeakSet()  # every registry: a failed plugin's entries go

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, T] = {}
        self._versions: dict[str, int] = {}
        self._effective: dict[str, dict[str, Callable]] = {}
        self._search: dict[str, dict] = {}
        self._origins: dict[str, Origin | None] = {}
        Registry.instances.add(self)

    def register(self, name: str, *, version: int = 1, effective: dict[str, Callable] | None = None,
                 search: dict | None = None) -> Callable[[T], T]:
        def decorator(obj: T) -> T:
            self.add(name, obj, version=version, effective=effective, search=search)
            return obj

        return decorator

    def add(self, name: str, obj: T, *, version: int = 1, effective: dict[str, Callable] | None = None,
            search: dict | None = None) -> None:
        """``effective``: for hyperparameters whose null default the entry resolves itself, key -> a function
        of the trial's ``params.TrialFacts`` giving the value null stands for (None where the facts do not
        tell), so that a trial giving that value explicitly has the same identity. ``search``: hyperparameter
        -> its search domain (``fedarena.search_space``: the ranges its paper explores), what ``fedarena tune``
        searches."""
        if name in self._entries:
            where = self._origins.get(name)
            raise DuplicateNameError(f"{self.kind} {name!r} is already registered "
                                     f"({'by plugin ' + where.label if where else 'built-in'})")
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise ValueError(f"{self.kind} {name!r}: version must be a whole number >= 1, got {version!r}")
        self._entries[name] = obj
        self._versions[name] = version
        self._effective[name] = dict(effective or {})
        self._search[name] = dict(search or {})
        self._origins[name] = _LOADING.get()

    def version(self, name: str) -> int | str:
        """The entry's version (what a change of its numbers bumps); a plugin's entry adds its source identity,
        ``"1+src:<hash>"``, so that an edited plugin's runs are never taken for the new source's."""
        self.get(name)
        origin = self._origins[name]
        if origin is None:
            return self._versions[name]
        return f"{self._versions[name]}+src:{origin.digest[:12]}" + ("+isolated" if origin.isolated else "")

    def origin(self, name: str) -> Origin | None:
        """The plugin that registered the entry (None: built in)."""
        self.get(name)
        return self._origins[name]

    def from_origin(self, origin: Origin) -> list[str]:
        """The names a plugin registered here."""
        return [name for name, where in self._origins.items() if where == origin]

    def effective(self, name: str) -> dict[str, Callable]:
        """The entry's null-default resolvers (see ``add``)."""
        self.get(name)
        return self._effective[name]

    def search(self, name: str) -> dict:
        """The entry's declared search space (hyperparameter -> domain; empty: none declared)."""
        self.get(name)
        return dict(self._search[name])

    def get(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownNameError(self.unknown_message(name)) from None

    def unknown_message(self, name: str) -> str:
        close = difflib.get_close_matches(str(name), self._entries, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"unknown {self.kind} {name!r}{hint}; available: {', '.join(self.names())}"

    def remove(self, name: str) -> T:
        """Unregister ``name`` (plugins and tests that register a component for a while)."""
        if name not in self._entries:
            raise UnknownNameError(self.unknown_message(name))
        self._versions.pop(name, None)
        self._effective.pop(name, None)
        self._search.pop(name, None)
        self._origins.pop(name, None)
        return self._entries.pop(name)

    def names(self) -> list[str]:
        return sorted(self._entries)

    def built_in(self) -> list[str]:
        """The names fedarena itself registers (sorted), without any a plugin or a test loaded in this process."""
        return sorted(name for name in self._entries if self._origins.get(name) is None)

    def registered(self) -> list[str]:
        """The names in registration order (where the order means something, e.g. table columns)."""
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)


def import_submodules(package: str, path: Iterable[str]) -> None:
    """Import every module of a package: a component registers itself by being a file in its package, so
    adding one touches that file alone (and its test)."""
    for module in pkgutil.iter_modules(path):
        importlib.import_module(f"{package}.{module.name}")
