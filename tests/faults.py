"""Faults the benchmark tests inject through ``BenchOptions.round_hook`` (shipped to Ray's workers by value:
``ship_by_value`` registers this module with Ray's cloudpickle, since the workers cannot import ``tests``)."""

from __future__ import annotations

from dataclasses import dataclass

from fedarena.errors import ConfigError


class TransientFault(RuntimeError):
    """A fault a retry can fix (Ray retries the trial from its last checkpoint)."""


class PermanentFault(ConfigError):
    """A fault no retry fixes (the trial is reported failed once, not retried)."""


@dataclass(frozen=True)
class FailOnceAt:
    """Raise TransientFault when a trial that was not restored from a checkpoint reaches ``round``."""

    round: int

    def __call__(self, name: str, resumed_from: int, round_idx: int) -> None:
        if resumed_from == 0 and round_idx == self.round:
            raise TransientFault(f"injected failure at round {self.round}")


@dataclass(frozen=True)
class FailAlwaysAt:
    """Raise PermanentFault whenever a trial reaches ``round``."""

    round: int

    def __call__(self, name: str, resumed_from: int, round_idx: int) -> None:
        if round_idx == self.round:
            raise PermanentFault(f"injected config error at round {self.round}")


def ship_by_value() -> None:
    import sys

    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
