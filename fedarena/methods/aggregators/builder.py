"""Build an aggregator from its config section and check it can run before training starts.

A section looks like ``{"name": "krum", "pre": ["clip"], "f": None, **hyperparameters}``: ``name`` picks
the rule, ``pre`` lists pre-aggregators applied in order to the stacked updates, each a name or ``{name: ...,
**options}`` (``clip``: norm clipping to the round's median norm; ``nnm``, ``bucketing`` with its bucket size
``s``, ``arc``: ``mixing.py``), ``f`` (if not None) overrides the engine's expected number of malicious
clients, which the rule and the pre-aggregators that read f get; every other key must be a keyword-only
hyperparameter of the rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators.base import (
    AGGREGATORS,
    PRE_AGGREGATORS,
    PRE_ARGUMENTS,
    AggregatorEntry,
    PreAggregatorEntry,
    RoundDraw,
)
from fedarena.params import SectionKind, hyperparameters
from fedarena.round_inputs import provided
from fedarena.round_stages import Pipeline

STRUCTURAL_KEYS = ("name", "pre", "f")
RULE_ARGUMENTS = ("weights", "losses", "f", "round")


@dataclass(frozen=True)
class Aggregator:
    """A resolved aggregator: ``agg(updates[n, d], weights[n], losses[n] | None) -> [d]``."""

    name: str
    entry: AggregatorEntry
    f: int
    params: dict[str, Any] = field(default_factory=dict)
    pre: tuple[str, ...] = ()
    pre_fns: tuple[PreAggregatorEntry, ...] = ()
    round: RoundDraw | None = None  # set by ``for_round`` (the engine, every round)
    pre_options: tuple[dict[str, Any], ...] = ()  # each pre-aggregator's options, with defaults (``pre`` order)

    @property
    def needs_losses(self) -> bool:
        return self.entry.needs_losses

    @property
    def uses_weights(self) -> bool:
        return self.entry.uses_weights

    @property
    def inputs(self) -> tuple[str, ...]:
        """The registered round inputs the rule and its pre-aggregators read (``fedarena.round_inputs``), each
        checked to exist."""
        pre = tuple(name for entry in self.pre_fns for name in entry.inputs)
        return provided(tuple(dict.fromkeys((*self.entry.reads, *pre))), f"aggregator {self.name!r}")

    @property
    def needs_round(self) -> bool:
        """Whether the rule or a pre-aggregator reads the round's draw (``for_round``); the others need none
        built."""
        return self.entry.needs_round or any(entry.reads_round for entry in self.pre_fns)

    def pipeline(self) -> Pipeline:
        """The rule's stages besides aggregating (``fedarena.round_stages``): a certificate it computes at each
        evaluation from the run's state (``AggregatorEntry.certify``)."""
        certify = self.entry.certify
        return Pipeline() if certify is None else Pipeline(evaluation=(partial(certify, **self.params),))

    def for_round(self, draw: RoundDraw) -> Aggregator:
        """This aggregator for one round (rules that read ``round`` see its draw order and seed stream)."""
        return replace(self, round=draw)

    def __call__(
        self, updates: torch.Tensor, weights: torch.Tensor, losses: torch.Tensor | None = None,
        client_weights: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The rule over the round's updates. ``client_weights`` p[n] is a method's own weighting of the
        clients (TERM, q-FFL, AFL, FedTilt); see ``with_client_weights``."""
        if client_weights is not None:
            updates, weights = self.with_client_weights(updates, weights, client_weights)
        merged = self.merged_rows(updates.shape[0])
        updates = self.pre_aggregated(updates)
        if merged is not None:  # the rule sees one row per group: their summed weights, in group order
            weights = torch.stack([torch.as_tensor(weights)[rows].sum() for rows in merged])
        return self.entry.rule(updates, weights=weights, losses=losses, f=self.f, **self._rule_round(merged),
                               **self.params)

    def pre_aggregated(self, updates: torch.Tensor) -> torch.Tensor:
        """The updates after the pre-aggregators, in order (what the rule itself sees)."""
        for pre_aggregate, options in zip(self.pre_fns, self.pre_options, strict=True):
            updates = pre_aggregate(updates, f=self.f, round=self.round, **options)
        return updates

    def merged_rows(self, n: int) -> list[torch.Tensor] | None:
        """For pre-aggregators that merge rows (bucketing): the input rows behind each row the rule sees; None
        where every row stays its own."""
        groups = None
        for entry, options in zip(self.pre_fns, self.pre_options, strict=True):
            if entry.merges_rows:
                step = entry.members(n if groups is None else len(groups), self.round, **options)
                groups = step if groups is None else [torch.cat([groups[i] for i in rows.tolist()]) for rows in step]
        return groups

    def _rule_round(self, merged: list[torch.Tensor] | None) -> dict:
        """The rule's ``round`` keyword, where it reads one: the round's draw, or after merging pre-aggregators
        the groups' (in group order, no client ids)."""
        if not self.entry.needs_round:
            return {}
        if merged is None or self.round is None:
            return {"round": self.round}
        return {"round": replace(self.round, order=torch.arange(len(merged)), ids=None)}

    @property
    def selects(self) -> bool:
        """Whether the rule keeps some of the rows (Krum, multi-Krum, Bulyan): ``kept`` says which."""
        return self.entry.selects is not None

    def kept(self, updates: torch.Tensor) -> torch.Tensor:
        """bool [n]: the rows the rule keeps, after its pre-aggregators, with its f and hyperparameters and the
        round's draw, as the rule itself would (what an attack tailored to it checks)."""
        if self.entry.selects is None:
            raise ConfigError(f"aggregator {self.name!r} keeps no subset of the rows; it has no selection to check")
        merged = self.merged_rows(updates.shape[0])
        rows = self.entry.selects(self.pre_aggregated(updates), f=self.f, **self._rule_round(merged), **self.params)
        if merged is not None:  # a kept group keeps every client in it
            rows = torch.cat([merged[i] for i in rows.tolist()]) if rows.numel() else rows
        mask = torch.zeros(updates.shape[0], dtype=torch.bool, device=updates.device)
        mask[rows.to(updates.device)] = True
        return mask

    def with_client_weights(self, updates: torch.Tensor, weights: torch.Tensor,
                            p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(updates, weights) that make the rule apply p on top of its own weighting, counting sizes once.

        A rule that ignores the weights sees update i scaled by n p_i: the uniform mean is then
        sum_i p_i u_i, and a robust rule filters the reweighted updates. A rule that reads the weights a
        (weighted_mean, geometric_median) gets weights a_i p_i and the updates scaled by sum(p), so its
        weighted mean is sum(p) * sum_i a_i p_i u_i / sum_i a_i p_i (sum(p) is 1 except for q-FFL, whose
        p carries its step size); a client's size is never multiplied in twice."""
        if not self.uses_weights:
            return updates * (len(p) * p).to(updates.dtype)[:, None], weights
        return updates * p.sum().to(updates.dtype), weights * p.to(weights.dtype)


def pre_specs(section: Mapping[str, Any]) -> tuple[tuple[str, dict[str, Any]], ...]:
    """The section's pre-aggregators as (name, options with defaults); names and options checked."""
    pre = section.get("pre") or ()
    allowed = ", ".join(PRE_AGGREGATORS.names())
    if not isinstance(pre, (list, tuple)):
        raise ConfigError(f"aggregator 'pre' must be a list of pre-aggregators ({allowed}), each a name or "
                          f"{{name: ..., option: value}}; got {pre!r}")
    return tuple(_pre_spec(item, allowed) for item in pre)


def _pre_spec(item: Any, allowed: str) -> tuple[str, dict[str, Any]]:
    if isinstance(item, str):
        name, given = item, {}
    elif isinstance(item, Mapping) and isinstance(item.get("name"), str):
        name, given = item["name"], {k: v for k, v in item.items() if k != "name"}
    else:
        raise ConfigError(f"each aggregator 'pre' entry needs a name ({allowed}): a name or {{name: ..., option: "
                          f"value}}; got {item!r}")
    defaults = pre_defaults(name)
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        what = f"allowed: {', '.join(sorted(defaults))}" if defaults else "it takes no option"
        raise ConfigError(f"pre-aggregator {name!r} has no option {', '.join(map(repr, unknown))} ({what})")
    return name, {**defaults, **given}


def pre_defaults(name: str) -> dict[str, Any]:
    """A pre-aggregator's options with their defaults (its keyword-only parameters but f and round)."""
    return hyperparameters(PRE_AGGREGATORS.get(name).fn, PRE_ARGUMENTS)


def pre_canonical(section: Mapping[str, Any]) -> list[Any]:
    """The resolved ``pre`` list: a pre-aggregator at its default options as its name, else ``{name, **the
    options that differ}`` (so that spelling a default out changes no identity)."""
    out: list[Any] = []
    for name, options in pre_specs(section):
        defaults = pre_defaults(name)
        changed = {k: v for k, v in options.items() if v != defaults[k]}
        out.append({"name": name, **changed} if changed else name)
    return out


def pre_names(section: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(name for name, _ in pre_specs(section))


def resolve_f(section: Mapping[str, Any], f: int) -> int:
    chosen = f if section.get("f") is None else section["f"]
    if isinstance(chosen, bool) or not isinstance(chosen, int) or chosen < 0:
        raise ConfigError(
            f"aggregator f (number of malicious clients assumed) must be an integer >= 0, got {chosen!r}"
        )
    return chosen


AGGREGATOR_SECTION = SectionKind(
    "aggregator", AGGREGATORS, signature=lambda entry: entry.rule, structural_keys=("pre", "f"),
    structure=lambda section: {"pre": pre_canonical(section), "f": section.get("f")}, exclude=RULE_ARGUMENTS,
)


def make_aggregator(section: Mapping[str, Any], *, f: int) -> Aggregator:
    """Resolve ``section`` into a callable ``Aggregator``; unknown names or hyperparameters raise errors
    that list the allowed ones. Trial set-up takes ``aggregator_from`` on the resolved section."""
    return aggregator_from(AGGREGATOR_SECTION.resolve(section), f=f)


def aggregator_from(resolved: Mapping[str, Any], *, f: int) -> Aggregator:
    """The ``Aggregator`` of a resolved section (``sections.resolve_config``); ``f`` unless it sets one."""
    params = {k: v for k, v in resolved.items() if k not in STRUCTURAL_KEYS}
    specs = pre_specs(resolved)
    return Aggregator(resolved["name"], AGGREGATORS.get(resolved["name"]), resolve_f(resolved, f), params,
                      tuple(name for name, _ in specs), tuple(PRE_AGGREGATORS.get(name) for name, _ in specs),
                      pre_options=tuple(options for _, options in specs))


def check_aggregator(section: Mapping[str, Any], *, n: int, f: int) -> None:
    """Raise ConfigError if the rule cannot run on n sampled clients with f assumed malicious
    (e.g. krum and multi_krum with n - f - 2 < 1, bulyan with n < 4f + 3, trimmed_mean with 2f >= n)."""
    check_rule(make_aggregator(section, f=f), n=n)


def check_rule(agg: Aggregator, *, n: int) -> None:
    """``check_aggregator`` for a built ``Aggregator``: each pre-aggregator on the rows it gets, then the rule
    on the rows it sees (after bucketing, the buckets)."""
    rows = n
    for name, entry, options in zip(agg.pre, agg.pre_fns, agg.pre_options, strict=True):
        if entry.check is not None:
            entry.check(rows, agg.f, **options)
        if entry.merges_rows and agg.needs_losses:
            raise ConfigError(f"aggregator {agg.name!r} reads each client's training loss, which pre-aggregator "
                              f"{name!r} merges away (it averages clients' rows); drop one of them")
        if entry.merges_rows and agg.entry.per_client:
            raise ConfigError(f"aggregator {agg.name!r} keeps per-client state across rounds, which pre-aggregator "
                              f"{name!r} cannot give it (it averages clients' rows); drop one of them")
        rows = entry.output_rows(rows, **options)
    agg.entry.check(rows, agg.f, **agg.params)
    agg.inputs  # noqa: B018  raises where no provider makes an input the rule or a pre-aggregator reads


def expected_malicious(clients_per_round: int, num_corrupted: int, num_clients: int) -> int:
    """Expected number of malicious clients among the selected ones, int(clients_per_round * num_corrupted /
    num_clients), as Ditto's reference code computes the f given to Krum, multi-Krum, k-norm and k-loss."""
    if num_clients < 1 or clients_per_round < 0 or not 0 <= num_corrupted <= num_clients:
        raise ConfigError(
            f"expected_malicious needs num_clients >= 1, clients_per_round >= 0 and 0 <= num_corrupted <= "
            f"num_clients; got {clients_per_round}, {num_corrupted}, {num_clients}"
        )
    return clients_per_round * num_corrupted // num_clients
