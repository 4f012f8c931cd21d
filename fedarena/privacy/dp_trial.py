"""A trial's privacy: what its section allows (checked before training), the noise multiplier it runs at
(given, or calibrated from a target epsilon), the epsilon it has spent after each round, and the steps the
round loop takes.

Order in a round (``simulation.engine.run_round``):

1. the devices train; under **local DP** each clips its update to ``clip`` and adds its own noise;
   under **central DP with secure aggregation** each clips its own update (the server cannot see one);
2. the attackers replace or alter their rows (an attacker does not have to clip or noise);
3. **central DP**: the server clips every update it receives to the bound, runs its rule on them with uniform
   weights (a device's sample count is private too), and adds Gaussian noise to the rule's output of standard
   deviation z_Delta x bound x sensitivity / 2, the rule's replace-one sensitivity in bounds
   (``AggregatorEntry.sensitivity``): for the mean 2 / n, i.e. DP-FedAvg's noise ``z clip`` on the sum divided
   by n. So every rule spends the same budget at the same z; a rule that moves more per update gets more
   noise. With adaptive clipping the bound of the next round follows the noisy count of unclipped updates.

What the noise covers: under local DP what the devices send (each update noised before it leaves its device), and
whatever is computed from it (post-processing, an attacker's reading of the honest updates too); under central DP one
device's clipped update, as far as the rule's sensitivity says it moves the output. So a component that reads anything
else (``READS``: the devices' training losses, their raw data; under central DP an attack that reads the honest
updates, which moves the attackers' rows with an honest device's) is refused before training, as it declares it
(``device_reads`` of a method, an aggregator or pre-aggregator entry, an attack's registration).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import numpy as np
import torch

from fedarena.attacks.base import ATTACKS, READS_ATTRIBUTE, UNDECLARED, attack_reads
from fedarena.errors import ConfigError
from fedarena.methods.aggregators.base import AGGREGATORS, PRE_AGGREGATORS
from fedarena.methods.aggregators.builder import Aggregator
from fedarena.methods.base import METHODS, Method
from fedarena.privacy import accounting
from fedarena.privacy.base import PrivacySpec
from fedarena.privacy.noise import clip_rows, gaussian, local_privatize, next_clip, unclipped_count

CLIP_STATE = "dp_clip"  # the adaptive bound, in the server's state (``SimState.server``)
COUNT_NOISE_SHARE = 20  # count_noise null: clients_per_round / 20 (Andrew et al. 2021)

# What a component may declare it reads besides the updates the devices send (``device_reads``), and which mechanism's
# noise covers each: local DP covers what is computed from the noised updates (an attack reading the honest ones
# too), central DP only one clipped update through the rule's sensitivity. A name not here is covered by neither.
READS = {
    "losses": "each device's training loss at the global model, computed on its data without noise",
    "device_data": "raw training data of the devices",
    "honest_updates": "the honest devices' updates of the round",
    UNDECLARED: "values it does not declare (register it with attack(name, device_reads=...))",
}
COVERED = {"local": frozenset({"honest_updates"}), "central": frozenset()}
COVERS = {"local": "but local DP's noise covers only what the devices send (each update, noised on its device)",
          "central": "but central DP's noise covers only one device's clipped update, as far as the rule's "
                     "sensitivity says it moves the output"}


def check_privacy(spec: PrivacySpec, sampling: str, method: Method, rule: Aggregator | None,
                  attack: dict | None = None) -> None:
    """The checks that need no data: DP needs uniform sampling, a method with a global model that averages the
    updates, components that read nothing the noise does not cover (``READS``: the method, the rule and its
    pre-aggregators, the ``attack`` section's attack), and (central) a rule of known sensitivity without
    pre-aggregators; secure aggregation needs a rule that reads only the sum. One line each, naming what is
    allowed."""
    where = f"privacy {spec.name!r}"
    if spec.private and sampling != "uniform":
        raise ConfigError(f"{where} needs sampling: uniform (a fixed number of devices drawn uniformly without "
                          f"replacement, the sampling its accountant covers); got sampling={sampling}")
    if spec.private and not method.uses_aggregator:
        raise ConfigError(f"{where}: method {method.name!r} has no global aggregation, so nothing leaves a device "
                          f"to privatize; leave privacy at none")
    if spec.central and method.reweights_clients:
        local = "" if uncovered(PrivacySpec("local"), method_reads(method)) else " or use privacy local"
        raise ConfigError(f"{where}: method {method.name!r} weights the devices by their losses or updates, which "
                          f"DP-FedAvg's noise does not cover; central DP composes with methods that average the "
                          f"updates (global, ditto, finetuning, fedprox, ...){local}")
    if spec.private and uncovered(spec, method_reads(method)):
        raise ConfigError(f"{where}: method {method.name!r} reads {_what(uncovered(spec, method_reads(method)))}, "
                          f"{COVERS[spec.name]}; {spec.name} DP composes with methods that read only the "
                          f"updates: {', '.join(private_methods(spec))}")
    if spec.adaptive and spec.secure_aggregation:
        raise ConfigError(f"{where}: adaptive clipping under secure aggregation is not modelled (the devices would "
                          f"count the unclipped updates securely too); use a fixed clip or drop secure_aggregation")
    if attack is not None:
        check_attack_privacy(spec, attack)
    if spec.audit is not None:
        check_audit(spec, method)
    if rule is None:
        return
    if spec.private:
        _check_rule_reads(spec, where, rule)
    if spec.central:
        _check_central_rule(where, rule)
    if spec.local and rule.entry.excludes:
        raise ConfigError(f"{where}: aggregator {rule.name!r} removes devices during the run, so how often a device "
                          f"takes part (what local DP's accountant counts) is not known before it; use another rule")
    if spec.secure_aggregation and (rule.pre or rule.entry.needs_each_update(**rule.params)):
        what = f"pre-aggregator {rule.pre[0]!r}" if rule.pre else f"aggregator {rule.name!r}"
        raise ConfigError(f"{where}: {what} needs each device's update, which secure aggregation hides; under "
                          f"secure_aggregation the server rule must need only their sum: {', '.join(sum_rules())}")


def check_audit(spec: PrivacySpec, method: Method) -> None:
    """A canary is a client of the server's aggregation (w + the rule over the updates): a method whose server step
    is its own (a share of the population, per-client server state) would count canaries as something else."""
    if type(method).server_step is not Method.server_step:
        allowed = [name for name in private_methods(spec) if METHODS.get(name).server_step is Method.server_step]
        raise ConfigError(f"privacy {spec.name!r}: audit inserts canary clients into the server's aggregation, and "
                          f"method {method.name!r} has a server step of its own; audit composes with "
                          f"{', '.join(allowed)}")


def method_reads(method: Method | type[Method]) -> tuple[str, ...]:
    """What a method (or its class) declares it reads besides the updates: its ``device_reads``, and "losses" where
    it ``needs_losses``."""
    return tuple(dict.fromkeys((*method.device_reads, *(("losses",) if method.needs_losses else ()))))


def uncovered(spec: PrivacySpec, reads: tuple[str, ...]) -> list[str]:
    """The reads that ``spec``'s mechanism does not cover (none without DP)."""
    return [name for name in reads if name not in COVERED[spec.name]] if spec.private else []


def _what(reads: list[str]) -> str:
    return " and ".join(READS.get(name, f"{name!r} (no DP mechanism covers it)") for name in reads)


def private_methods(spec: PrivacySpec) -> list[str]:
    """The methods ``spec`` composes with as far as what they read goes (a global aggregation reading nothing
    uncovered; central DP also refuses reweighting, which a class's ``reweights_clients`` property may decide)."""
    out = []
    for name in METHODS.names():
        cls = METHODS.get(name)
        reweights = spec.central and cls.reweights_clients is True
        if cls.uses_aggregator and not uncovered(spec, method_reads(cls)) and not reweights:
            out.append(name)
    return out


def check_attack_privacy(spec: PrivacySpec, attack: dict) -> None:
    """Refuse, in one line, an attack (its section: name, level, hyperparameters) whose declared reads ``spec``'s
    noise does not cover: under central DP one that reads the honest updates (it runs before the server clips, so one
    honest device moves the attackers' rows too, beyond the rule's sensitivity), under both one that reads the
    devices' raw data or declares nothing."""
    missing = uncovered(spec, attack_reads(attack))
    if not missing:
        return
    name = attack["name"]
    options = _declaring_options(name, attack)
    shown = f"attack {name!r}" + (f" ({options})" if options else "")
    why = ""
    if "honest_updates" in missing:
        why = (" (it runs before the server clips: one honest device then moves the attackers' rows too, beyond the "
               "rule's sensitivity)")
    local = PrivacySpec("local")
    other = "; or use privacy local (the attack then reads noised updates)" if (
        spec.central and not uncovered(local, attack_reads(attack))) else ""
    raise ConfigError(f"privacy {spec.name!r}: {shown} reads {_what(missing)}{why}, {COVERS[spec.name]}; "
                      f"{spec.name} DP composes with attacks that read only the attackers' own data and updates"
                      f"{' and the noised updates' if spec.local else ''}: {private_attacks(spec)}{other}")


def _declaring_options(name: str, section: dict) -> str:
    """The hyperparameters an attack's declaration depends on, as set (``knowledge: benign``)."""
    declared = getattr(ATTACKS.get(name), READS_ATTRIBUTE, None)
    if not callable(declared):
        return ""
    keys = [p for p in inspect.signature(declared).parameters.values() if p.kind is p.KEYWORD_ONLY]
    return ", ".join(f"{p.name}: {section.get(p.name, p.default)}" for p in keys)


def private_attacks(spec: PrivacySpec) -> str:
    """The attacks ``spec`` composes with at their defaults, and those whose reads depend on their options."""
    fixed, optional = [], []
    for name in ATTACKS.names():
        declared = getattr(ATTACKS.get(name), READS_ATTRIBUTE, None)
        if not uncovered(spec, attack_reads({"name": name})):
            fixed.append(name)
        elif callable(declared):
            keys = [p.name for p in inspect.signature(declared).parameters.values() if p.kind is p.KEYWORD_ONLY]
            optional.append(f"{name} (as its {', '.join(keys)} says)")
    return ", ".join(fixed + optional)


def _check_rule_reads(spec: PrivacySpec, where: str, rule: Aggregator) -> None:
    missing = uncovered(spec, rule.entry.device_reads)
    if missing:
        allowed = (f"central DP composes with {', '.join(dp_rules())}" if spec.central else
                   f"local DP composes with every rule that reads only the updates (all but "
                   f"{', '.join(n for n in AGGREGATORS.names() if uncovered(spec, AGGREGATORS.get(n).device_reads))})")
        raise ConfigError(f"{where}: aggregator {rule.name!r} reads {_what(missing)}, {COVERS[spec.name]}; "
                          f"{allowed}")
    for name in rule.pre:
        missing = uncovered(spec, PRE_AGGREGATORS.get(name).device_reads)
        if missing:
            raise ConfigError(f"{where}: pre-aggregator {name!r} reads {_what(missing)}, {COVERS[spec.name]}; "
                              f"drop it from aggregator.pre")


def _check_central_rule(where: str, rule: Aggregator) -> None:
    if rule.entry.sensitivity is None:
        raise ConfigError(f"{where}: aggregator {rule.name!r} has no known sensitivity to one device's update, so "
                          f"no noise can be calibrated to it; central DP composes with {', '.join(dp_rules())}, "
                          f"or use privacy local, which composes with every rule that reads only the updates and "
                          f"removes no device")
    if rule.pre:
        raise ConfigError(f"{where}: pre-aggregator {rule.pre[0]!r} couples the updates before the rule, which "
                          f"the rule's sensitivity does not cover; drop aggregator.pre under central DP")


def dp_rules() -> list[str]:
    """The aggregators central DP composes with (a known sensitivity, reading nothing but the updates)."""
    return [name for name in AGGREGATORS.names()
            if AGGREGATORS.get(name).sensitivity is not None and not AGGREGATORS.get(name).device_reads]


def sum_rules() -> list[str]:
    """The aggregators that can run under secure aggregation (at their defaults or with a fixed bound)."""
    out = []
    for name in AGGREGATORS.names():
        entry = AGGREGATORS.get(name)
        if not entry.needs_each_update():
            out.append(name)
        elif callable(entry.sum_only):
            out.append(f"{name} (max_norm set)")
    return out


@dataclass(frozen=True)
class PrivacyPlan:
    """A private trial's mechanism, fixed before training."""

    spec: PrivacySpec
    noise_multiplier: float  # z: given, or calibrated from the target epsilon
    delta: float
    num_clients: int
    per_round: int
    count_noise: float | None  # adaptive clipping's (central), else None
    most_rounds: np.ndarray | None  # local DP: [rounds + 1] the most rounds any device took part in after t rounds

    def epsilon(self, rounds_done: int) -> float:
        """The epsilon spent after ``rounds_done`` rounds (central: of the released models; local: of the device
        that took part most), at ``delta``, by dp-accounting."""
        if self.spec.local:
            return accounting.local_epsilon(self.spec.accountant, self.noise_multiplier,
                                            int(self.most_rounds[rounds_done]), self.delta)
        return accounting.central_epsilon(self.spec.accountant, self.noise_multiplier, self.num_clients,
                                          self.per_round, rounds_done, self.delta, self.count_noise)

    def properties(self, rounds_done: int) -> dict[str, float]:
        """The run properties it reports at a round (``simulation.properties``); an audited run adds the
        add-or-remove epsilon its estimates are held against, where the accountant has one."""
        out = {"epsilon": self.epsilon(rounds_done), "delta": self.delta, "noise_multiplier": self.noise_multiplier}
        if self.spec.audit is not None and self.add_remove_computable:  # the claim: exact (PLD), and RDP's bound
            out["epsilon_add_remove"] = self.epsilon_add_remove(rounds_done, "pld")
            out["epsilon_add_remove_rdp"] = self.epsilon_add_remove(rounds_done, "rdp")
        return out

    @property
    def add_remove_computable(self) -> bool:
        """Whether dp-accounting has an add-or-remove epsilon of the run: local DP (a device's own releases, no
        sampling), or central DP where every client takes part in every round. Not for sampled central runs: its
        RDP refuses sampling without replacement under add-or-remove and its PLD has no such sampling at all; there a
        canary's contribution against the client's slot sending nothing is a replace-one pair at distance one
        clip, which the claimed (replace-one) epsilon covers."""
        return self.spec.local or self.per_round >= self.num_clients

    def epsilon_add_remove(self, rounds_done: int, accountant: str) -> float:
        """epsilon under add-or-remove adjacency after ``rounds_done`` rounds by ``accountant`` (pld: the exact
        epsilon of the composed Gaussians; ``accounting.add_remove_epsilon``)."""
        rounds = int(self.most_rounds[rounds_done]) if self.spec.local else rounds_done
        return accounting.add_remove_epsilon(accountant, self.noise_multiplier, rounds, self.delta, self.count_noise)

    def before_sending(self, updates: torch.Tensor, noise: torch.Generator) -> torch.Tensor:
        """What the devices send: local DP clips each update and adds its own noise (drawn from ``noise``); central
        DP under secure aggregation clips each (the server cannot)."""
        if self.spec.local:
            return local_privatize(updates, self.spec.clip, self.noise_multiplier, noise)
        if self.spec.central and self.spec.secure_aggregation:
            return clip_rows(updates, self.spec.clip)  # adaptive clipping is refused under secure aggregation
        return updates

    def bound_now(self, server: dict) -> float:
        """This round's clip bound: the adaptive one in the server's state, else ``clip``."""
        value = server.get(CLIP_STATE)
        return self.spec.clip if value is None else float(value)

    def server_rule(self, rule: Aggregator, server: dict, noise: torch.Generator,
                    count_noise: torch.Generator) -> CentralRule | Aggregator:
        """The round's server rule: under central DP ``rule`` clipped, uniformly weighted and noised (``noise``
        for the output, ``count_noise`` for adaptive clipping's count)."""
        if not self.spec.central:
            return rule
        return CentralRule(self, rule, server, noise, count_noise)


@dataclass(frozen=True)
class CentralRule:
    """``rule`` under central DP for one round, called like an ``Aggregator`` by a method's server step."""

    plan: PrivacyPlan
    rule: Aggregator
    server: dict  # the round's server state: the adaptive bound is replaced here
    noise: torch.Generator
    count_noise: torch.Generator

    def __call__(self, updates: torch.Tensor, weights: torch.Tensor, losses: torch.Tensor | None = None,
                 client_weights: torch.Tensor | None = None) -> torch.Tensor:
        if client_weights is not None:  # check_privacy refuses such methods before training
            raise ConfigError("central DP: a method's own client weighting is not covered by its noise")
        plan, spec = self.plan, self.plan.spec
        bound = plan.bound_now(self.server)
        rows = updates if spec.secure_aggregation else clip_rows(updates, bound)
        out = self.rule(rows, torch.ones_like(weights), losses)
        sensitivity = self.rule.entry.sensitivity_at(updates.shape[0], self.rule.f, bound, **self.rule.params)
        z = accounting.update_noise(plan.noise_multiplier, plan.count_noise)
        std = z * bound * sensitivity / accounting.SENSITIVITY_PER_CLIP
        out = out + gaussian(out, std, self.noise)
        if spec.adaptive:
            new = next_clip(bound, unclipped_count(updates, bound), updates.shape[0], spec.target_quantile,
                            spec.clip_lr, plan.count_noise, self.count_noise)
            self.server[CLIP_STATE] = torch.tensor(new, dtype=torch.float64)
        return out


def privacy_plan(spec: PrivacySpec, num_clients: int, per_round: int, rounds: int,
                 most_rounds: np.ndarray | None = None) -> PrivacyPlan | None:
    """The plan of a private trial (None without DP): delta, the count noise and the noise multiplier, calibrated
    where a target epsilon is given (a target no noise reaches is a ConfigError, before training). Local DP
    needs ``most_rounds`` [rounds + 1]: after t rounds, the most rounds any one device took part in (the
    draws are seeded, so known before training)."""
    if not spec.private:
        return None
    delta = accounting.default_delta(num_clients) if spec.delta is None else spec.delta
    count_noise = None
    if spec.adaptive:
        count_noise = per_round / COUNT_NOISE_SHARE if spec.count_noise is None else spec.count_noise
    if spec.local:
        make = ("local", int(most_rounds[rounds]))
        probe = accounting.local_event(1.0, make[1])
    else:
        make = ("central", num_clients, per_round, rounds, count_noise)
        probe = accounting.central_event(1.0, num_clients, per_round, rounds)  # the sampling decides support
    accounting.check_supported(spec.accountant, probe)
    if spec.target_epsilon is not None:
        z = accounting.calibrate(spec.accountant, spec.target_epsilon, delta, make)
    else:
        z = spec.noise_multiplier
        accounting.update_noise(z, count_noise)  # adaptive clipping's count must leave budget for the updates
    return PrivacyPlan(spec, z, delta, num_clients, per_round, count_noise, most_rounds)
