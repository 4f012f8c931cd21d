"""The contract every registered component of a kind keeps, checked on what a plugin registers before it is
used (``fedarena.api.load_plugins``), so that a broken component is one line naming its plugin, not a failed
benchmark: the checks the built-in components pass in the test suite.

- aggregator: on a small round of updates (float64 and float32) it returns one [d] vector of the updates'
  dtype, finite, the same for any order of the rows (permutation invariance, to float tolerance); the round inputs
  it reads are their providers' stand-ins (``round_input(..., stand_in=...)``); a rule reading an input without
  one (only a trial makes it: DeepSight's probe) is checked for feasibility only, and runs in its first trial;
- attack: built at its defaults on a small image dataset, it returns an ``Effect`` whose tamper returns the
  updates' shape and leaves the benign rows as they are;
- method: a ``Method`` subclass built at its defaults; dataset: its model is registered; model, metric,
  pre-aggregator, partitioner: callables.
"""

from __future__ import annotations

import numpy as np
import torch

from fedarena.attacks.base import ATTACKS, Effect, RoundRule
from fedarena.datasets.base import ClientData, FederatedDataset, Split
from fedarena.datasets.catalog import DATASETS
from fedarena.datasets.partition import PARTITIONERS
from fedarena.errors import ConfigError
from fedarena.methods.aggregators.base import AGGREGATORS, PRE_AGGREGATORS, RoundDraw
from fedarena.methods.aggregators.builder import aggregator_from
from fedarena.methods.base import METHODS, Method
from fedarena.models.zoo import MODELS
from fedarena.plugins import PluginSource, load_plugins, unload
from fedarena.registry import Origin
from fedarena.round_inputs import INPUTS
from fedarena.sections import AGGREGATOR_SECTION
from fedarena.simulation.metrics import METRICS


class ContractError(ConfigError):
    """A component that breaks its kind's contract."""


def check_plugin(origin: Origin) -> None:
    """Every component the plugin registered keeps its kind's contract; ContractError naming it otherwise."""
    for name in AGGREGATORS.from_origin(origin):
        _named(origin, "aggregator", name, check_aggregator)
    for name in ATTACKS.from_origin(origin):
        _named(origin, "attack", name, check_attack)
    for name in METHODS.from_origin(origin):
        _named(origin, "method", name, check_method)
    for name in DATASETS.from_origin(origin):
        _named(origin, "dataset", name, check_dataset)
    for registry in (MODELS, METRICS, PRE_AGGREGATORS, PARTITIONERS):
        for name in registry.from_origin(origin):
            entry = registry.get(name)
            if not callable(getattr(entry, "compute", entry)):
                raise ContractError(f"plugin {origin.label}: {registry.kind} {name!r} is not callable")


def _named(origin: Origin, kind: str, name: str, check) -> None:
    try:
        check(name)
    except ContractError as err:
        raise ContractError(f"plugin {origin.label}: {kind} {name!r} breaks the {kind} contract: {err}") from None
    except (ConfigError, TypeError, ValueError, RuntimeError, IndexError, AttributeError, KeyError) as err:
        raise ContractError(f"plugin {origin.label}: {kind} {name!r} fails at its defaults on a small round: "
                            f"{type(err).__name__}: {err}") from None


def check_aggregator(name: str) -> None:
    resolved = AGGREGATOR_SECTION.resolve({"name": name})
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(7, 5, generator=gen, dtype=torch.float64) * 0.1 + 1.0
    perm = torch.tensor([3, 0, 6, 1, 5, 2, 4])
    for f in (1, 0):
        try:
            rule = aggregator_from(resolved, f=f)
            rule.entry.check(7, f, **rule.params)
            break
        except ConfigError:
            continue
    else:
        raise ContractError("it is undefined on a round of 7 updates with f = 1 or 0")
    if any(INPUTS.get(name).stand_in is None for name in rule.inputs):
        return  # an input only a trial makes (DeepSight's probe): the rule's calls are checked where it first runs
    for dtype in (torch.float64, torch.float32):
        updates = base.to(dtype)
        out = _call(rule, updates, torch.arange(7))
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != (5,):
            raise ContractError(f"it returns {getattr(out, 'shape', type(out).__name__)} for 7 updates of 5 "
                                "coordinates; an aggregator returns one vector of the updates' length [d]")
        if out.dtype != dtype or not bool(torch.isfinite(out).all()):
            raise ContractError(f"in {dtype} it returns {out.dtype} values, finite: {bool(torch.isfinite(out).all())}")
        again = _call(rule, updates[perm], torch.argsort(perm))
        if not torch.allclose(out, again, rtol=1e-4, atol=1e-5):
            raise ContractError("it is not permutation invariant: the same updates in another order give "
                                f"{again.tolist()} instead of {out.tolist()}")


def _call(rule, updates: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """The rule on a round whose rows were drawn in ``order`` (ids follow the rows), with what it reads."""
    n = updates.shape[0]
    inputs = {name: INPUTS.get(name).stand_in(updates) for name in rule.inputs}  # stand-ins: a made-up round
    draw = RoundDraw(order, 0, order.clone(), {}, inputs)
    losses = torch.linspace(0.5, 1.5, n, dtype=updates.dtype)[order] if rule.needs_losses else None
    return rule.for_round(draw)(updates, torch.ones(n, dtype=updates.dtype), losses)


def tiny_images() -> FederatedDataset:
    """Four devices of 8 x 8 one-channel images of 10 classes (what most attacks accept)."""
    gen = torch.Generator().manual_seed(0)

    def split(n: int) -> Split:
        return Split(torch.randn(n, 1, 8, 8, generator=gen), torch.randint(0, 10, (n,), generator=gen))

    clients = [ClientData(split(12), split(4), split(4)) for _ in range(4)]
    return FederatedDataset("contract", clients, 10, (1, 8, 8), "contract", "classification")


def check_attack(name: str) -> None:
    dataset, malicious = tiny_images(), np.array([False, True, False, True])
    try:
        effect = ATTACKS.get(name)(dataset, malicious, np.random.default_rng(0))
    except ConfigError:
        return  # defined for other data (e.g. text): its own data decides
    if not isinstance(effect, Effect):
        raise ContractError(f"its builder returns {type(effect).__name__}, not an attacks.base.Effect")
    if effect.tamper is None:
        return
    updates = torch.randn(4, 6, generator=torch.Generator().manual_seed(1))
    bad = torch.tensor(malicious)
    extra = {"rule": RoundRule(None)} if effect.needs_rule else {}
    out = effect.tamper(updates.clone(), bad, torch.Generator().manual_seed(2), **extra)
    if not isinstance(out, torch.Tensor) or out.shape != updates.shape:
        raise ContractError(f"its tamper returns {getattr(out, 'shape', type(out).__name__)} for updates of shape "
                            f"{tuple(updates.shape)}; it must return the updates' shape")
    if not torch.equal(out[~bad], updates[~bad]):
        raise ContractError("its tamper changes benign devices' updates; only the malicious rows may change")


def check_method(name: str) -> None:
    cls = METHODS.get(name)
    if not (isinstance(cls, type) and issubclass(cls, Method)):
        raise ContractError(f"it is {cls!r}, not a subclass of fedarena.Method")
    cls()


def check_dataset(name: str) -> None:
    model = DATASETS.get(name).model
    if model not in MODELS:
        raise ContractError(f"its model {model!r} is not registered; available: {', '.join(MODELS.names())}")


_CHECKED: set[str] = set()  # digests of the plugins whose components were checked in this process


def load_checked(include=(), *, entry_points: bool = True) -> list[PluginSource]:
    """Load the plugins (``plugins.load_plugins``: FEDARENA_INCLUDE, ``include``, the installed entry points)
    and check each new one's components against their contracts; one line naming the plugin otherwise."""
    sources = load_plugins(include, entry_points=entry_points)
    for source in sources:
        if source.digest not in _CHECKED:
            try:
                check_plugin(source.origin)
            except ContractError:
                unload(source)  # nothing of a broken plugin stays registered
                raise
            _CHECKED.add(source.digest)
    return sources
