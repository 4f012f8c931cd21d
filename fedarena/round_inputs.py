"""Round inputs: what a server rule reads of a round besides the updates, each made by a registered provider.

A rule declares what it reads (``@aggregator("fltrust", reads=("round", "root_update"))``); a name is either one
of the facts every round has (``CORE``: the round's draw, the devices' losses at the global model, the aggregation
weights), which the engine gives a rule that reads them, or an input registered here by the component that
introduced it, with ``round_input``:

    @round_input("root_update", prepare=root_set, device_reads=("device_data",))
    def root_update(view: RoundView) -> torch.Tensor: ...

``prepare(trial)`` runs once per trial while it is built, before any training (the server's clean data, a fixed
set of probe inputs; a ``ConfigError`` there stops the trial), and ``compute(view)`` once per round that some
component of the trial reads it; the rule finds the value in ``round.inputs[name]``. Where a provider draws at
random, it draws from ``view.rng(...)``, its own stream keyed by (trial seed, its name, round, keys), so a resumed
run draws the same. ``device_reads`` names what the input takes from the devices besides their updates (raw
training samples, their losses): differential privacy refuses a rule that reads what its noise does not cover.
``stand_in(updates)`` (optional) makes a value of the right shape from a round's updates alone, for timing a rule
outside a trial (``make perf``).

The engine computes exactly the inputs some component of the trial reads, with no branch per input: a new input
is a new provider, never an edit of ``fedarena.simulation``.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fedarena.errors import ConfigError
from fedarena.registry import Registry
from fedarena.streams import ROUND_INPUT, stream

# every round has these: the rule's ``round`` keyword (the RoundDraw: draw order, seed, client ids, server state),
# each device's training loss at the global model (``losses``), the aggregation weights (``weights``)
CORE = ("round", "losses", "weights")


@dataclass(frozen=True)
class RoundView:
    """What a provider's ``compute`` sees of the round: the trial (``simulation.setup.Trial``), the round's index and
    global model, the value its ``prepare`` made for the trial, and ``train(x, y, plan_seed)``: the update the
    server gets by training the global model on samples (x, y) with the devices' local schedule (steps or epochs,
    batch size, learning rate, plain SGD; minibatches planned from ``plan_seed``), as the engine trains a device.
    ``server`` is the round's server state (the rule's): what a provider keeps across rounds goes there, under keys
    of its own, replaced never modified, and is checkpointed and resumed with the run."""

    name: str
    trial: Any
    round: int
    model: torch.Tensor
    prepared: Any
    train: Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]
    server: dict | None = None  # the round's server state: a provider keeps what it carries across rounds here

    @property
    def seed(self) -> int:
        return self.trial.cfg.seed

    def rng(self, *keys: int) -> np.random.Generator:
        """The provider's own generator for this round: keyed by (trial seed, the input's name, round, keys)."""
        return stream(self.seed, ROUND_INPUT, zlib.crc32(self.name.encode()), self.round, *keys)


@dataclass(frozen=True)
class RoundInput:
    """A registered round input: see the module's docstring."""

    compute: Callable[[RoundView], Any]
    prepare: Callable[[Any], Any] | None = None
    device_reads: tuple[str, ...] = ()
    stand_in: Callable[[torch.Tensor], Any] | None = None


INPUTS: Registry[RoundInput] = Registry("round input")


def round_input(name: str, *, prepare: Callable[[Any], Any] | None = None, device_reads: tuple[str, ...] = (),
                stand_in: Callable[[torch.Tensor], Any] | None = None, version: int = 1):
    """Register ``compute(view) -> value`` as round input ``name`` (see the module's docstring)."""
    if name in CORE:
        raise ConfigError(f"round input {name!r} is one every round has ({', '.join(CORE)}); pick another name")

    def decorator(compute: Callable[[RoundView], Any]) -> Callable[[RoundView], Any]:
        INPUTS.add(name, RoundInput(compute, prepare, tuple(device_reads), stand_in), version=version)
        return compute

    return decorator


@round_input("model", stand_in=lambda updates: torch.zeros_like(updates[0]))
def global_model(view: RoundView) -> torch.Tensor:
    """The round's global model [d] (CRFL bounds it, DeepSight probes it)."""
    return view.model


def checked_reads(reads, owner: str) -> tuple[str, ...]:
    """``reads`` as a tuple of names, each a string (which input provides it is checked when a trial is built)."""
    names = None if isinstance(reads, str) else tuple(reads)  # a generator is read once, here
    if names is None or not all(isinstance(name, str) for name in names):
        raise ConfigError(f"{owner} declares reads={reads!r}: a tuple of round inputs' names ({', '.join(CORE)} or "
                          "a registered round input)")
    return tuple(dict.fromkeys(names))


def provided(reads: tuple[str, ...], owner: str) -> tuple[str, ...]:
    """The names in ``reads`` made by registered providers (not ``CORE``), each checked to exist: an unknown one
    raises the error that lists every input there is."""
    names = tuple(name for name in reads if name not in CORE)
    for name in names:
        if name not in INPUTS:
            raise ConfigError(f"{owner} reads {name!r}, which no round input provides; known: "
                              f"{', '.join([*CORE, *INPUTS.names()])}")
    return names


def inputs_device_reads(reads: tuple[str, ...]) -> tuple[str, ...]:
    """What the inputs in ``reads`` take from the devices besides their updates (``losses`` for the core one)."""
    taken = ["losses"] if "losses" in reads else []
    for name in reads:
        if name not in CORE and name in INPUTS:
            taken.extend(INPUTS.get(name).device_reads)
    return tuple(dict.fromkeys(taken))


def prepared_inputs(trial, names: tuple[str, ...]) -> dict[str, Any]:
    """Each provided input's value for the trial (its ``prepare``, once, while the trial is built); a prepare that
    fails is one line naming the input and where it comes from."""
    out = {}
    for name in names:
        entry = INPUTS.get(name)
        if entry.prepare is None:
            continue
        try:
            out[name] = entry.prepare(trial)
        except ConfigError:
            raise
        except Exception as err:  # a plugin's own code: named, with its error, before any training
            origin = INPUTS.origin(name)
            where = f" (plugin {origin.label})" if origin is not None else ""
            raise ConfigError(f"round input {name!r}{where} failed to prepare: {type(err).__name__}: {err}") from err
    return out


def computed_inputs(names: tuple[str, ...], trial, round_idx: int, model: torch.Tensor,
                    prepared: Mapping[str, Any], train, server: dict | None = None) -> dict[str, Any]:
    """The round's value of each input in ``names``."""
    return {name: INPUTS.get(name).compute(RoundView(name, trial, round_idx, model, prepared.get(name), train, server))
            for name in names}
