"""The threat model: a fixed malicious set and what the attack does with it.

An attack is registered as ``build(dataset, malicious, rng, *, **hyperparameters) -> Effect``:
- ``Effect.dataset``: the dataset after a one-time data attack (training data of malicious clients only;
  validation and test data stay clean),
- ``Effect.corrupt``: a per-round data attack (persistent outliers) on the selected clients' training data,
- ``Effect.tamper``: a model attack replacing the updates that malicious clients send.

The level is the fraction of all clients in the malicious set: int(level * K) clients drawn once per
trial from the attack stream, uniformly without replacement (plus any the dataset marks adversarial).
Level 0 means no malicious client; for FedTilt's persistent outliers with ``scope="all"`` that is the
paper's setting (outliers in every participating client, see ``outliers.py``).
Attacks live in ``label_flip.py`` (a1), ``poisoned_updates.py`` (a2, a3, sign_flip, alie, ipm), ``optimized.py`` (min_max,
min_sum, fang), ``tailored.py`` (tailored_krum, tailored_bulyan, tailored_median), ``adaptive.py``
(adaptive), ``mimic.py`` (mimic), ``backdoor.py`` (badnets, dba, model_replacement, neurotoxin, targeted_flip: targeted, with a
``Backdoor`` whose success rate the engine measures), ``a3fl.py`` (a3fl: a trigger that adapts every round,
``Effect.adapt``), ``edge_case.py`` (edge_case: tail samples, their own ``Backdoor.samples``) and ``outliers.py``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import torch

from fedarena.attacks.bounds import TriggerBound
from fedarena.datasets.base import FederatedDataset, Split
from fedarena.errors import ConfigError
from fedarena.methods.aggregators.builder import Aggregator
from fedarena.params import SectionKind
from fedarena.registry import Registry
from fedarena.round_stages import Pipeline, StageView
from fedarena.streams import TAMPER

# tamper(updates[n, d], malicious[n] bool, generator) -> updates[n, d]; an effect with ``needs_rule`` gets
# the keyword ``rule``: the round's ``RoundRule`` (adaptive and rule-tailored attacks)
Tamper = Callable[..., torch.Tensor]


@dataclass(frozen=True)
class RoundRule:
    """The round's server rule as an attacker simulates it, exactly as the server runs it: the trial's
    ``Aggregator`` for the round (its f, variant, hyperparameters, pre-aggregators and draw; None for a method
    without global aggregation, whose server takes the plain mean) with the round's weights and losses. A
    method's own client weighting (TERM, q-FFL, AFL, FedTilt) is not simulated. Calling it gives the rule's
    output; a call leaves the server's state as it is (the rule gets a copy of it)."""

    aggregator: Aggregator | None
    weights: torch.Tensor | None = None
    losses: torch.Tensor | None = None

    @property
    def name(self) -> str:
        return "mean" if self.aggregator is None else self.aggregator.name

    def f(self, malicious_rows: int) -> int:
        """The f the server's rule assumes (the trial's), or, for a method without one, the malicious rows."""
        return malicious_rows if self.aggregator is None else self.aggregator.f

    def __call__(self, updates: torch.Tensor) -> torch.Tensor:
        agg = self.aggregator
        if agg is None:
            return updates.mean(0)
        if agg.round is not None and agg.round.server is not None:
            agg = agg.for_round(replace(agg.round, server=dict(agg.round.server)))
        weights = self.weights if self.weights is not None else torch.ones(updates.shape[0], dtype=updates.dtype)
        return agg(updates, weights, self.losses)

    def kept(self, updates: torch.Tensor) -> torch.Tensor:
        """bool [n]: the rows the server's selection rule keeps (``Aggregator.kept``)."""
        if self.aggregator is None:
            raise ConfigError("the plain mean keeps every row; it has no selection to check")
        return self.aggregator.kept(updates)
# corrupt(x[m, ...], y[m], owner[m], malicious[m] bool, generator) -> (x, y): every training sample of the
# round's selected clients (owner: client id per sample), called once per round (persistent outliers)
Corrupt = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Generator],
                   tuple[torch.Tensor, torch.Tensor]]


def with_rows(updates: torch.Tensor, bad: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """A copy of ``updates`` with the ``bad`` rows replaced by ``rows`` ([number of bad, d] or [d]): what a
    model attack sends (benign rows are copied as they are)."""
    out = updates.clone()
    out[bad] = rows.to(updates.dtype)
    return out


@dataclass(frozen=True)
class Backdoor:
    """What a targeted attack plants, for its success rate (ASR): test samples whose label is not ``target``
    (``source``: only that class's), ``stamp``-ed with the trigger (None: no trigger), relabelled ``target``;
    a device's ASR is the fraction of them its model predicts as ``target``."""

    target: int
    stamp: Callable[[torch.Tensor], torch.Tensor] | None
    source: int | None = None
    # a trigger that changes (A3FL): restamp(x, attack state) stamps the eligible test samples at every evaluation
    # with the attack's current trigger (``stamp`` is then None: the test view holds them unstamped)
    restamp: Callable[[torch.Tensor, dict], torch.Tensor] | None = None
    # a backdoor without a trigger on the devices' own data (edge-case): the held-out samples [m, ...] whose
    # prediction as ``target`` is its success, the same for every device
    samples: torch.Tensor | None = None

    def test_view(self, dataset: FederatedDataset) -> FederatedDataset:
        """The dataset with every device's test split replaced by its triggered, relabelled eligible samples (or
        by the backdoor's own ``samples``)."""
        if self.samples is not None:
            split = Split(self.samples, torch.full((len(self.samples),), self.target, dtype=torch.long))
            return replace(dataset, clients=[replace(c, test=split) for c in dataset.clients])
        clients = []
        for client in dataset.clients:
            x, y = client.test
            keep = y != self.target if self.source is None else y == self.source
            x = x[keep] if self.stamp is None or not bool(keep.any()) else self.stamp(x[keep])
            clients.append(replace(client, test=Split(x, torch.full_like(y[keep], self.target))))
        return replace(dataset, clients=clients)


@dataclass(frozen=True)
class AttackView:
    """What an adaptive attack sees of a round: the global model (``w``, flat, no gradient), the model to run it
    with, the round's malicious devices' own training samples (clean), the round, and the device."""

    w: torch.Tensor
    model: object  # models.functional.FlatModel
    x: torch.Tensor
    y: torch.Tensor
    round: int


@dataclass(frozen=True)
class Effect:
    dataset: FederatedDataset
    tamper: Tamper | None = None
    corrupt: Corrupt | None = None
    needs_benign: bool = False  # the tamper reads the round's benign updates: a round must hold one
    needs_rule: bool = False  # the tamper calls the round's server rule (``rule`` keyword)
    needs_ids: bool = False  # the tamper reads each row's client id (``ids`` keyword, [n]; Mimic)
    backdoor: Backdoor | None = None  # a targeted attack: what its success rate is measured on
    stop_round: int | None = None  # from this round on, malicious devices behave honestly
    # an attack that adapts every round (A3FL's trigger): adapt(state, view: AttackView, generator) -> the new
    # state (a dict of tensors the engine keeps in ``SimState.attack``, checkpointed), called before local
    # training in every round holding a malicious device; its ``corrupt`` then gets the keyword ``state``
    adapt: Callable[..., dict] | None = None
    # a trigger attack's promise for every sample it stamps (``attacks.bounds``), checked by the engine where it
    # stamps: the poisoned training data, each round's corrupted rows, the success rate's test samples
    bound: TriggerBound | None = None

    def active(self, round_idx: int) -> bool:
        return self.stop_round is None or round_idx < self.stop_round


@dataclass(frozen=True)
class ThreatModel:
    name: str
    level: float
    malicious: np.ndarray  # bool [num_clients]; fixed for the whole trial
    effect: Effect
    strong: bool  # Ditto D.2: every A3, and any attack at a level above one half

    @property
    def benign(self) -> np.ndarray:
        return ~self.malicious

    def pipeline(self) -> Pipeline:
        """The threat's stages in the round (``fedarena.round_stages``): a model attack tampers with what its devices
        send (a device stage); data attacks act in the devices' local work."""
        return Pipeline() if self.effect.tamper is None else Pipeline(device=(self.tampered,))

    def tampered(self, updates: torch.Tensor, view: StageView) -> torch.Tensor:
        """The rows after the attack's tampering with its devices' (an audit's canaries among the senders are never
        malicious); an attack that reads the server's rule sees it as the round's ``RoundRule`` (the aggregator for
        the round, with the round's weights and losses). Noise from the stream TAMPER, keyed by the round."""
        effect, senders = self.effect, view.senders
        if not effect.active(view.round):  # most rounds of most runs: nothing to build
            return updates
        devices = senders < len(self.malicious)
        bad = np.zeros(len(senders), dtype=bool)
        bad[devices] = self.malicious[senders[devices]]
        bad = torch.as_tensor(bad, device=updates.device)
        if not bool(bad.any()):
            return updates
        extra = {"rule": RoundRule(view.rule, view.weights, view.losses)} if effect.needs_rule else {}
        if effect.needs_ids:
            extra["ids"] = torch.as_tensor(senders)
        return effect.tamper(updates, bad, view.generator(TAMPER), **extra)


ATTACKS: Registry[Callable[..., Effect]] = Registry("attack")
# what an attack reads besides the malicious devices' own data and updates and the released models
# (``fedarena.privacy.dp_trial.READS``): "honest_updates" (the round's honest rows, as the devices send them),
# "device_data" (other devices' raw data); a tuple, or a function of the attack's hyperparameters giving one.
# Declared at registration (``attack(name, device_reads=...)``), so that it is known without building the attack;
# an attack that declares nothing reads ``UNDECLARED``, which no DP mechanism covers.
DeviceReads = tuple[str, ...] | Callable[..., tuple[str, ...]]
READS_ATTRIBUTE = "device_reads"  # where the declaration is kept: an attribute of the registered build function
UNDECLARED = "undeclared"


def attack(name: str, *, version: int = 1, effective: dict[str, Callable] | None = None,
           device_reads: DeviceReads | None = None):
    """Register ``build(dataset, malicious, rng, *, **hyperparameters) -> Effect`` as attack ``name`` with its
    version (bump it with any change of its numbers) and what it reads besides the malicious devices' own data and
    updates (``device_reads``: ``()`` for nothing else; None leaves it undeclared, which DP refuses)."""

    def decorator(build: Callable[..., Effect]) -> Callable[..., Effect]:
        if device_reads is not None:
            setattr(build, READS_ATTRIBUTE, device_reads if callable(device_reads) else tuple(device_reads))
        return ATTACKS.register(name, version=version, effective=effective)(build)

    return decorator


def attack_reads(section: dict) -> tuple[str, ...]:
    """What the section's attack declares it reads with the section's hyperparameters (``device_reads``), without
    building it; ``(UNDECLARED,)`` where it declares nothing."""
    declared = getattr(ATTACKS.get(section["name"]), READS_ATTRIBUTE, None)
    if declared is None:
        return (UNDECLARED,)
    if callable(declared):
        params = {k: v for k, v in section.items() if k not in ("name", "level")}
        accepted = inspect.signature(declared).parameters
        if not any(p.kind is p.VAR_KEYWORD for p in accepted.values()):
            params = {k: v for k, v in params.items() if k in accepted}
        return tuple(declared(**params))
    return tuple(declared)


def level_value(section: dict) -> float:
    """The section's corruption level, checked to be a fraction in [0, 1)."""
    level = section.get("level", 0.0)
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 <= level < 1:
        raise ConfigError(f"attack level must be a fraction in [0, 1), got {level!r}")
    return float(level)


ATTACK_SECTION = SectionKind("attack", ATTACKS, signature=lambda build: build, structural_keys=("level",),
                             structure=lambda section: {"level": level_value(section)})


def malicious_count(level: float, num_clients: int) -> int:
    """Size of the malicious set for a corruption level: int(level * K), as Ditto's reference code counts
    them (Vehicle at 50%: 11 of 23; CelebA at 50%: 257 of 515)."""
    return int(level * num_clients)


def check_level(section: dict, num_clients: int) -> int:
    """Number of malicious clients for the section's level; errors for impossible levels."""
    level = level_value(section)
    if section["name"] == "none" and level > 0:
        raise ConfigError(f"attack 'none' with level {level}: choose an attack ({', '.join(ATTACKS.names())})")
    return malicious_count(level, num_clients)  # < num_clients for every level < 1


def draw_malicious(num_clients: int, count: int, rng: np.random.Generator, forced: list[int]) -> np.ndarray:
    """A fixed set drawn uniformly without replacement, plus any clients the dataset marks adversarial."""
    mask = np.zeros(num_clients, dtype=bool)
    mask[rng.choice(num_clients, size=count, replace=False)] = True
    mask[np.asarray(forced, dtype=np.int64)] = True
    return mask


def check_benign_in_every_round(threat: ThreatModel, clients_per_round: int) -> None:
    """An attack that reads the benign updates of a round (full knowledge) needs one in every round."""
    count = int(threat.malicious.sum())
    if threat.effect.needs_benign and count >= clients_per_round:
        raise ConfigError(f"attack {threat.name!r} reads the benign updates of each round, but {count} malicious "
                          f"clients can fill all {clients_per_round} places of a round; lower the level, raise "
                          "clients_per_round, or set knowledge=benign (the attackers' own honest updates in such a round) or "
                          "knowledge=malicious (always their own)")


def build_threat(section: dict, dataset: FederatedDataset, rng: np.random.Generator) -> ThreatModel:
    """The threat of a section as written (resolved here); trial set-up takes ``threat_from``."""
    return threat_from(ATTACK_SECTION.resolve(section), dataset, rng)


def threat_from(section: dict, dataset: FederatedDataset, rng: np.random.Generator) -> ThreatModel:
    """The threat model of a resolved attack section (``sections.resolve_config``) on the dataset."""
    count = check_level(section, dataset.num_clients)
    params = {k: v for k, v in section.items() if k not in ("name", "level")}
    malicious = draw_malicious(dataset.num_clients, count, rng, dataset.meta.get("malicious", []))
    if malicious.all():
        raise ConfigError("every client is malicious; metrics need at least one benign client")
    effect = ATTACKS.get(section["name"])(dataset, malicious, rng, **params)
    if section["name"] != "none" and effect.corrupt is None and not malicious.any():
        raise ConfigError(f"attack {section['name']!r} at level {section.get('level', 0.0)} corrupts no client of "
                          f"{dataset.num_clients}; set a level > 0 (e.g. --level 0.2) or use attack 'none'")
    level = level_value(section)
    strong = section["name"] == "a3" or level > 0.5  # Ditto D.2, on the nominal level (the reference's flag)
    return ThreatModel(section["name"], level, malicious, effect, strong)
