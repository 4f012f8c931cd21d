"""A submitted rule registered here as a stand-in whose every call crosses to its sandboxed process.

``register(plugin)`` adds, for each aggregator the plugin registered in its sandbox, an ``AggregatorEntry`` whose
functions (rule, check, selects, sensitivity, sum_only, certify) send what the rule declares and return what it
answers, checked. Per call the rule gets: the stacked updates (rows sorted by pseudonym, ``pseudonyms``), the
weights and losses only where it declares them (None otherwise: an undeclared use fails at once), f, its
hyperparameters and, where it takes ``round``, a RoundDraw of pseudonyms, a keyed seed, its own server state and
the built-in inputs it declares (``INPUTS_ALLOWED``). Its server state lives in the run's under
``isolated:<rule>:<key>`` (checkpointed and resumed with the run) and travels with each call and answer.

Each trial's calls go to a scope of their own (a fresh fork of the rule's process), opened while the trial is built
by the round input ``isolated_trial`` that every isolated rule reads; calls made outside a trial (the checks before
training, the contract check) go to a scope kept for them.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from fedarena.errors import ConfigError
from fedarena.isolation.process import IsolatedRuleError, RuleLimits, RuleProcess
from fedarena.isolation.pseudonyms import Pseudonyms, builder_secret, trial_key
from fedarena.methods.aggregators.base import AGGREGATORS, AggregatorEntry
from fedarena.registry import Origin, loading
from fedarena.round_inputs import CORE, INPUTS, round_input

TRIAL_INPUT = "isolated_trial"
INPUTS_ALLOWED = ("model", "root_update")  # built-in inputs that are tensors of the round (DeepSight's probe is
# refused: its noise inputs are drawn from the trial's seed)
PREFIX = "isolated:"


@dataclass
class Plugin:
    """A submission as the trial's side knows it: its files, its registration (data), its identity and the
    builder's secret (shipped to the workers, never logged, never sent into the sandbox)."""

    module: str
    kind: str  # file or package
    files: tuple[tuple[str, str], ...]
    label: str
    digest: str
    registration: dict = field(default_factory=dict)
    secret: bytes = b""
    limits: RuleLimits = field(default_factory=RuleLimits)

    @property
    def origin(self) -> Origin:
        return Origin(self.label, self.digest, isolated=True)

    def sandbox_files(self) -> tuple[tuple[tuple[str, str], ...], str]:
        """(the files as the sandbox's folder holds them, the path the server imports)."""
        if self.kind == "file":
            return self.files, self.files[0][0]
        return tuple((f"{self.module}/{relative}", text) for relative, text in self.files), self.module


_PROCESSES: dict[str, RuleProcess] = {}  # plugin digest -> its rule process in this process
# plugin digest -> the scope its process serves now (one at a time: the process forks one child per scope): the
# trial this process runs, or the one-off calls' made outside a trial
_CURRENT: dict[str, Scope] = {}


def process_of(plugin: Plugin) -> RuleProcess:
    if plugin.digest not in _PROCESSES or _PROCESSES[plugin.digest].process.poll() is not None:
        files, entry = plugin.sandbox_files()
        _PROCESSES[plugin.digest] = RuleProcess(files, entry, plugin.limits)
    return _PROCESSES[plugin.digest]


class Scope:
    """One trial's (or the one-off calls') conversation with the rule's process."""

    def __init__(self, plugin: Plugin, pseudonyms: Pseudonyms, trial: bool):
        previous = _CURRENT.pop(plugin.digest, None)
        if previous is not None:
            previous.close()
        self.plugin, self.pseudonyms, self.trial = plugin, pseudonyms, trial
        self.process = process_of(plugin)
        self.process.call({"op": "open"})
        _CURRENT[plugin.digest] = self

    def call(self, what: str, name: str, **args) -> Any:
        return self.process.call({"op": "call", "what": what, "name": name, "args": args})

    def close(self) -> None:
        if self.process.process.poll() is None:
            try:
                self.process.call({"op": "close"})
            except IsolatedRuleError:
                pass  # a rule that died with its trial: the next scope starts a new process


def utility_scope(plugin: Plugin) -> Scope:
    """The scope for a call outside a trial's rounds (a check, a sensitivity): the scope open now, trial or not
    (these calls are pure), else a new one."""
    current = _CURRENT.get(plugin.digest)
    if current is None or current.process.process.poll() is not None:
        current = Scope(plugin, Pseudonyms(trial_key(plugin.secret, {"utility": True}), 0), trial=False)
    return current


def open_trial(trial) -> Scope | None:
    """The trial's scope (``isolated_trial``'s prepare): a fresh child of its rule's process, keyed by the trial."""
    entry = AGGREGATORS.get(trial.aggregate.name) if trial.aggregate is not None else None
    plugin = getattr(getattr(entry, "rule", None), "isolated_plugin", None)
    if plugin is None:
        return None
    key = trial_key(plugin.secret, {k: v for k, v in trial.cfg.to_dict().items() if k != "aggregator"})
    return Scope(plugin, Pseudonyms(key, len(trial.population_sizes())), trial=True)


def isolated_trial(view) -> Scope | None:
    """The trial's scope, every round (the rule's calls go there)."""
    return view.prepared


def _provide_trial_input() -> None:
    """Register the round input every isolated rule reads, with the first isolated rule (a process that has none
    lists no such input)."""
    if TRIAL_INPUT not in INPUTS:
        round_input(TRIAL_INPUT, prepare=open_trial, stand_in=lambda updates: None)(isolated_trial)


def unregister_all() -> None:
    """Remove every isolated rule of this process, their round input, and end their processes (tests)."""
    for name in [n for n in AGGREGATORS.registered() if (AGGREGATORS.origin(n) or Origin("", "")).isolated]:
        AGGREGATORS.remove(name)
    if TRIAL_INPUT in INPUTS:
        INPUTS.remove(TRIAL_INPUT)
    _CURRENT.clear()
    while _PROCESSES:
        _PROCESSES.popitem()[1].close()


def _scope(plugin: Plugin, round) -> Scope:
    """The trial's scope where the call comes from its rounds (and it is still the one open), else the one-off's."""
    scope = round.inputs.get(TRIAL_INPUT) if round is not None else None
    if scope is not None and _CURRENT.get(plugin.digest) is not scope:
        raise IsolatedRuleError(f"a call of {plugin.label} from a trial whose scope was closed")
    return scope if scope is not None else utility_scope(plugin)


def check_registration(plugin: Plugin) -> None:
    """What an isolated submission may register, refused in one line before anything runs."""
    found = plugin.registration
    where = f"submission {plugin.label}"
    if not found.get("aggregators"):
        raise ConfigError(f"{where} registers no aggregator")
    for name, facts in found["aggregators"].items():
        own = [r for r in facts["reads"] if r not in CORE and r not in INPUTS_ALLOWED]
        checks = ((facts["own_inputs"], "reads round inputs of its own (they see the whole trial)"),
                  (own, f"reads {', '.join(own)}; an isolated rule reads {', '.join((*CORE, *INPUTS_ALLOWED))}"),
                  (facts["excludes"], "removes clients (excludes=True)"),
                  (facts["effective"], "resolves null hyperparameters itself (effective=); give defaults"),
                  (facts["search"], "declares a search space (fedarena tune does not run on submissions)"))
        for bad, why in checks:
            if bad:
                raise ConfigError(f"{where}: aggregator {name!r} {why}")
    if found.get("others"):
        raise ConfigError(f"{where}: an isolated submission registers aggregators only; it also registers "
                          f"{', '.join(found['others'])}")


def register(plugin: Plugin) -> list[str]:
    """Register every aggregator of the plugin as a stand-in (see the module docstring); returns their names."""
    check_registration(plugin)
    _provide_trial_input()
    names = []
    with loading(plugin.origin):
        for name, facts in plugin.registration["aggregators"].items():
            if name in AGGREGATORS and AGGREGATORS.origin(name) == plugin.origin:
                continue  # this process has it already
            AGGREGATORS.add(name, entry_of(plugin, name, facts), version=facts["version"])
            names.append(name)
    return names


def entry_of(plugin: Plugin, name: str, facts: dict) -> AggregatorEntry:
    sum_only = facts["sum_only"]
    return AggregatorEntry(
        _rule(plugin, name, facts), _check(plugin, name), (*facts["reads"], "round", TRIAL_INPUT),
        _selects(plugin, name, facts) if facts["selects"] else None,
        _sensitivity(plugin, name, facts) if facts["sensitivity"] else None,
        _sum_only(plugin, name) if sum_only == "call" else bool(sum_only), facts["per_client"],
        _certify(plugin, name) if facts["certify"] else None, dict(facts["reports"]), False, tuple(facts["tasks"]),
        tuple(facts["device_reads"]))


def _rule(plugin: Plugin, name: str, facts: dict):
    reads = set(facts["reads"])

    def rule(updates, *, weights, losses, f, round=None, **params):
        scope = _scope(plugin, round)
        rows, pseudo = scope.pseudonyms.arrange(round.ids if round is not None else None, updates.shape[0])
        answer = scope.call("rule", name, updates=updates[rows], f=f, params=params,
                            weights=_rows_of(weights, rows) if "weights" in reads else None,
                            losses=_rows_of(losses, rows) if "losses" in reads else None,
                            round=_round(scope, round, pseudo, reads, name, updates.shape[0]) if facts["takes_round"] else None)
        out = _vector(answer.get("out") if isinstance(answer, dict) else None, updates, name)
        if facts["takes_round"] and round is not None and round.server is not None:
            _keep_state(round.server, name, answer.get("server"))
        return out

    rule.__signature__ = _signature(facts)
    rule.__doc__ = f"Isolated rule {name!r} of {plugin.label} (its process answers each call)."
    rule.isolated_plugin = plugin
    return rule


def _rows_of(values, rows: torch.Tensor):
    return None if values is None else torch.as_tensor(values)[rows.to(torch.as_tensor(values).device)]


def _round(scope: Scope, round, pseudo, reads: set[str], name: str, n: int) -> dict | None:
    if round is None:
        return {"order": torch.arange(n), "seed": scope.pseudonyms.seed(0), "ids": pseudo, "server": {}, "inputs": {}}
    inputs = {k: round.inputs[k] for k in INPUTS_ALLOWED if k in reads and round.inputs.get(k) is not None}
    return {"order": torch.arange(n), "seed": scope.pseudonyms.seed(round.seed), "ids": pseudo,
            "server": own_state(round.server, name), "inputs": inputs}


def own_state(server: Mapping | None, name: str) -> dict:
    """The rule's own entries of the run's server state, under the names it gave them."""
    prefix = f"{PREFIX}{name}:"
    return {k[len(prefix):]: v for k, v in (server or {}).items() if k.startswith(prefix)}


def _keep_state(server: dict, name: str, state) -> None:
    """The rule's answer replaces its entries of the run's server state (tensors only: they are checkpointed)."""
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise IsolatedRuleError(f"isolated rule {name!r} left server state that is not a mapping of tensors")
    prefix = f"{PREFIX}{name}:"
    for key in [k for k in server if k.startswith(prefix)]:
        del server[key]
    server.update({prefix + k: v for k, v in state.items()})


def _vector(out, updates: torch.Tensor, name: str) -> torch.Tensor:
    """The rule's answer checked: one vector of the updates' length (its dtype and device)."""
    if not isinstance(out, torch.Tensor) or out.dim() != 1 or out.shape[0] != updates.shape[1]:
        raise IsolatedRuleError(f"isolated rule {name!r} answered {getattr(out, 'shape', type(out).__name__)}; "
                                f"an aggregator returns one vector of length {updates.shape[1]}")
    return out.to(device=updates.device, dtype=updates.dtype)


def _selects(plugin: Plugin, name: str, facts: dict):
    reads = set(facts["reads"])

    def selects(updates, *, f, round=None, **params):
        scope = _scope(plugin, round)
        rows, pseudo = scope.pseudonyms.arrange(round.ids if round is not None else None, updates.shape[0])
        kept = scope.call("selects", name, updates=updates[rows], f=f, params=params,
                          round=_round(scope, round, pseudo, reads, name, updates.shape[0]) if facts["takes_round"] else None)
        if not isinstance(kept, torch.Tensor) or kept.dim() != 1 or kept.dtype != torch.int64 or (
                kept.numel() and (int(kept.min()) < 0 or int(kept.max()) >= updates.shape[0])):
            raise IsolatedRuleError(f"isolated rule {name!r}'s selection is not a vector of row indices")
        return rows[kept].to(updates.device)

    return selects


def _check(plugin: Plugin, name: str):
    passed: set = set()  # (n, f, hyperparameters) the rule is defined on: the checks before training repeat them

    def check(n: int, f: int, **params) -> None:
        key = (int(n), int(f), _hashable(params))
        if key not in passed:
            utility_scope(plugin).call("check", name, n=int(n), f=int(f), params=params)
            passed.add(key)

    return check


def _sensitivity(plugin: Plugin, name: str, facts: dict):
    def sensitivity(n: int, f: int, bound: float = 1.0, **params) -> float:
        value = utility_scope(plugin).call("sensitivity", name, n=n, f=f, bound=bound, params=params)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise IsolatedRuleError(f"isolated rule {name!r}'s sensitivity is {value!r}, not a number >= 0")
        return float(value)

    if not facts["sensitivity_bound"]:
        def unbounded(n: int, f: int, **params) -> float:
            return sensitivity(n, f, 1.0, **params)
        return unbounded
    return sensitivity


def _sum_only(plugin: Plugin, name: str):
    def sum_only(**params) -> bool:
        return bool(utility_scope(plugin).call("sum_only", name, params=params) is True)

    return sum_only


def _certify(plugin: Plugin, name: str):
    def certify(trial, state, **params) -> dict:
        scope = utility_scope(plugin)  # the trial's, which is open while it evaluates
        found = scope.call("certify", name, server=own_state(getattr(state, "server", None), name), params=params)
        if not isinstance(found, dict) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                  for v in found.values()):
            raise IsolatedRuleError(f"isolated rule {name!r}'s certificate is not a mapping of numbers")
        return found

    return certify


def _signature(facts: dict) -> inspect.Signature:
    """The rule's signature as its sandbox read it: its hyperparameters are what a config may set."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    params = [inspect.Parameter("updates", inspect.Parameter.POSITIONAL_OR_KEYWORD),
              *[inspect.Parameter(n, keyword) for n in ("weights", "losses", "f")],
              inspect.Parameter("round", keyword, default=None)]
    for p in facts["parameters"]:
        params.append(inspect.Parameter(p["name"], keyword,
                                        default=inspect.Parameter.empty if p["required"] else p["default"],
                                        annotation=p["annotation"] or inspect.Parameter.empty))
    return inspect.Signature(params)


def _hashable(value):
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    return value


def new_plugin(source, secret: bytes | None = None, limits: RuleLimits | None = None) -> Plugin:
    """A plugin source (``plugins.read_source``) started in its sandbox: its registration read and checked."""
    module, kind, files, label, digest = source
    plugin = Plugin(module, kind, files, label, digest, secret=builder_secret() if secret is None else secret,
                    limits=limits or RuleLimits.from_env())
    plugin.registration = process_of(plugin).registration
    check_registration(plugin)
    return plugin
