"""Build an aggregator from its config section and check it can run before training starts.

A section looks like ``{"name": "krum", "pre": ["clip"], "f": None, **hyperparameters}``: ``name`` picks
the rule, ``pre`` lists pre-aggregators applied in order to the stacked updates (``clip``: norm clipping to
the round's median norm), ``f`` (if not None) overrides the engine's expected number of malicious clients;
every other key must be a keyword-only hyperparameter of the rule.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators.base import AGGREGATORS, PRE_AGGREGATORS, AggregatorEntry, RoundDraw
from fedarena.params import SectionKind

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
    pre_fns: tuple[Callable[[torch.Tensor], torch.Tensor], ...] = ()
    round: RoundDraw | None = None  # set by ``for_round`` (the engine, every round)

    @property
    def needs_losses(self) -> bool:
        return self.entry.needs_losses

    @property
    def uses_weights(self) -> bool:
        return self.entry.uses_weights

    @property
    def needs_root(self) -> bool:
        return self.entry.needs_root

    @property
    def needs_round(self) -> bool:
        """Whether the rule reads the round's draw (``for_round``); the others need none built."""
        return self.entry.needs_round

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
        updates = self.pre_aggregated(updates)
        extra = {"round": self.round} if self.entry.needs_round else {}
        return self.entry.rule(updates, weights=weights, losses=losses, f=self.f, **extra, **self.params)

    def pre_aggregated(self, updates: torch.Tensor) -> torch.Tensor:
        """The updates after the pre-aggregators, in order (what the rule itself sees)."""
        for pre_aggregate in self.pre_fns:
            updates = pre_aggregate(updates)
        return updates

    @property
    def selects(self) -> bool:
        """Whether the rule keeps some of the rows (Krum, multi-Krum, Bulyan): ``kept`` says which."""
        return self.entry.selects is not None

    def kept(self, updates: torch.Tensor) -> torch.Tensor:
        """bool [n]: the rows the rule keeps, after its pre-aggregators, with its f and hyperparameters and the
        round's draw, as the rule itself would (what an attack tailored to it checks)."""
        if self.entry.selects is None:
            raise ConfigError(f"aggregator {self.name!r} keeps no subset of the rows; it has no selection to check")
        extra = {"round": self.round} if self.entry.needs_round else {}
        rows = self.entry.selects(self.pre_aggregated(updates), f=self.f, **extra, **self.params)
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


def pre_names(section: Mapping[str, Any]) -> tuple[str, ...]:
    pre = section.get("pre") or ()
    if not isinstance(pre, (list, tuple)) or not all(isinstance(p, str) for p in pre):
        raise ConfigError(
            f"aggregator 'pre' must be a list of names ({', '.join(PRE_AGGREGATORS.names())}), got {pre!r}"
        )
    return tuple(pre)


def resolve_f(section: Mapping[str, Any], f: int) -> int:
    chosen = f if section.get("f") is None else section["f"]
    if isinstance(chosen, bool) or not isinstance(chosen, int) or chosen < 0:
        raise ConfigError(
            f"aggregator f (number of malicious clients assumed) must be an integer >= 0, got {chosen!r}"
        )
    return chosen


AGGREGATOR_SECTION = SectionKind(
    "aggregator", AGGREGATORS, signature=lambda entry: entry.rule, structural_keys=("pre", "f"),
    structure=lambda section: {"pre": list(pre_names(section)), "f": section.get("f")}, exclude=RULE_ARGUMENTS,
)


def make_aggregator(section: Mapping[str, Any], *, f: int) -> Aggregator:
    """Resolve ``section`` into a callable ``Aggregator``; unknown names or hyperparameters raise errors
    that list the allowed ones. Trial set-up takes ``aggregator_from`` on the resolved section."""
    return aggregator_from(AGGREGATOR_SECTION.resolve(section), f=f)


def aggregator_from(resolved: Mapping[str, Any], *, f: int) -> Aggregator:
    """The ``Aggregator`` of a resolved section (``sections.resolve_config``); ``f`` unless it sets one."""
    params = {k: v for k, v in resolved.items() if k not in STRUCTURAL_KEYS}
    pre = tuple(resolved["pre"])
    pre_fns = tuple(PRE_AGGREGATORS.get(p) for p in pre)
    return Aggregator(resolved["name"], AGGREGATORS.get(resolved["name"]), resolve_f(resolved, f), params, pre,
                      pre_fns)


def check_aggregator(section: Mapping[str, Any], *, n: int, f: int) -> None:
    """Raise ConfigError if the rule cannot run on n sampled clients with f assumed malicious
    (e.g. krum and multi_krum with n - f - 2 < 1, bulyan with n < 4f + 3, trimmed_mean with 2f >= n)."""
    check_rule(make_aggregator(section, f=f), n=n)


def check_rule(agg: Aggregator, *, n: int) -> None:
    """``check_aggregator`` for a built ``Aggregator``."""
    agg.entry.check(n, agg.f, **agg.params)


def expected_malicious(clients_per_round: int, num_corrupted: int, num_clients: int) -> int:
    """Expected number of malicious clients among the selected ones, int(clients_per_round * num_corrupted /
    num_clients), as Ditto's reference code computes the f given to Krum, multi-Krum, k-norm and k-loss."""
    if num_clients < 1 or clients_per_round < 0 or not 0 <= num_corrupted <= num_clients:
        raise ConfigError(
            f"expected_malicious needs num_clients >= 1, clients_per_round >= 0 and 0 <= num_corrupted <= "
            f"num_clients; got {clients_per_round}, {num_corrupted}, {num_clients}"
        )
    return clients_per_round * num_corrupted // num_clients
