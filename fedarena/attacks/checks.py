"""Checks of attack hyperparameters, run when the threat model is built (before any training)."""

from __future__ import annotations

import math

from fedarena.errors import ConfigError


def _number(attack: str, key: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"attack {attack!r}: {key} must be a finite number, got {value!r}")
    return float(value)


def number(attack: str, key: str, value) -> float:
    """``value`` as a float; ConfigError unless it is a finite number (not a bool)."""
    return _number(attack, key, value)


def positive(attack: str, key: str, value) -> float:
    """``value`` as a float; ConfigError unless it is a finite number > 0."""
    number = _number(attack, key, value)
    if number <= 0:
        raise ConfigError(f"attack {attack!r}: {key} must be > 0, got {value!r}")
    return number


def whole(attack: str, key: str, value, least: int) -> int:
    """``value`` if it is a whole number >= ``least`` (not a bool); ConfigError otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ConfigError(f"attack {attack!r}: {key} must be a whole number >= {least}, got {value!r}")
    return value


def non_negative(attack: str, key: str, value) -> float:
    number = _number(attack, key, value)
    if number < 0:
        raise ConfigError(f"attack {attack!r}: {key} must be >= 0, got {value!r}")
    return number


def fraction(attack: str, key: str, value) -> float:
    """A fraction in (0, 1]."""
    number = _number(attack, key, value)
    if not 0 < number <= 1:
        raise ConfigError(f"attack {attack!r}: {key} must be a fraction in (0, 1], got {value!r}")
    return number


def choice(attack: str, key: str, value, allowed: tuple[str, ...]):
    """``value`` if it is one of ``allowed``; ConfigError listing them otherwise."""
    if value not in allowed:
        raise ConfigError(f"attack {attack!r}: {key} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def optional(check, attack: str, key: str, value) -> float | None:
    """``check`` applied unless ``value`` is None (None keeps the attack's data-driven default)."""
    return None if value is None else check(attack, key, value)
