"""Search spaces: what ``fedarena tune`` explores for a component, declared where the component registers.

A domain is log-uniform or uniform over [low, high], or a choice among values; a component declares its own
(``@aggregator("flame", search={"lam": log_uniform(1e-4, 1e-2)})``, the ranges its paper explores) and the
shared keys (``SHARED``: the learning rate and local steps) are searchable for every row. Text forms for the
command line and suite files: ``loguniform(0.001, 1)``, ``uniform(0, 1)``, ``choice(1, 2, 5)``.

Importing this module imports neither Ray nor torch: registries declare their spaces with it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from fedarena.errors import ConfigError

KINDS = ("loguniform", "uniform", "choice")


@dataclass(frozen=True)
class Domain:
    """One hyperparameter's search domain."""

    kind: str
    low: float | None = None
    high: float | None = None
    values: tuple = ()

    def check(self, key: str) -> None:
        """ConfigError naming ``key`` if the domain is empty or inverted."""
        if self.kind not in KINDS:
            raise ConfigError(f"search space of {key!r}: unknown domain {self.kind!r}; use one of {', '.join(KINDS)}")
        if self.kind == "choice":
            if not self.values:
                raise ConfigError(f"search space of {key!r}: choice() is empty; give at least one value")
            return
        low, high = self.low, self.high
        if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in (low, high)):
            raise ConfigError(f"search space of {key!r}: {self.kind} needs finite numbers low < high, "
                              f"got {low!r}, {high!r}")
        if not low < high:
            raise ConfigError(f"search space of {key!r}: the range [{low}, {high}] is empty or inverted; "
                              f"give low < high")
        if self.kind == "loguniform" and low <= 0:
            raise ConfigError(f"search space of {key!r}: loguniform needs 0 < low < high, got [{low}, {high}]")

    def to_tune(self):
        """The Ray Tune domain."""
        from ray import tune

        if self.kind == "choice":
            return tune.choice(list(self.values))
        return (tune.loguniform if self.kind == "loguniform" else tune.uniform)(self.low, self.high)

    def text(self) -> str:
        args = self.values if self.kind == "choice" else (self.low, self.high)
        return f"{self.kind}({', '.join(format(a, 'g') if isinstance(a, float) else str(a) for a in args)})"


def log_uniform(low: float, high: float) -> Domain:
    return Domain("loguniform", low, high)


def uniform(low: float, high: float) -> Domain:
    return Domain("uniform", low, high)


def choice(*values: Any) -> Domain:
    return Domain("choice", values=tuple(values))


# Searchable for every row (``fedarena tune --keys``): the learning rate over the range the papers use (Ditto
# 0.01-0.1, the quick suites 0.2) and the local steps.
SHARED = {"lr": log_uniform(0.01, 1.0), "local_steps": choice(1, 2, 5)}
DEFAULT_SHARED = ("lr",)  # what every row searches besides its component's own space

_TEXT = re.compile(r"^\s*(loguniform|uniform|choice)\s*\((.*)\)\s*$")


def parse_domain(text: Any, key: str) -> Domain:
    """A domain from its text form (``loguniform(0.001, 1)``) or a mapping ``{loguniform: [0.001, 1]}``."""
    if isinstance(text, dict) and len(text) == 1:
        (kind, args), = text.items()
        args = list(args) if isinstance(args, (list, tuple)) else [args]
    else:
        match = _TEXT.match(str(text))
        if not match:
            raise ConfigError(f"search space of {key!r}: {text!r} is not a domain; write loguniform(low, high), "
                              f"uniform(low, high) or choice(v1, v2, ...)")
        kind, args = match.group(1), [_number(a.strip()) for a in match.group(2).split(",") if a.strip()]
    if kind == "choice":
        domain = Domain("choice", values=tuple(args))
    elif len(args) != 2:
        raise ConfigError(f"search space of {key!r}: {kind} takes two numbers (low, high), got {args}")
    else:
        domain = Domain(kind, *args)
    domain.check(key)
    return domain


def _number(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            continue
    return text.strip("'\"")
