"""The ``system`` config section: how the devices of a deployment behave, beside what they compute.

``{name: synchronous}`` (the default) is the lab every trial assumed before: every drawn device reports, finishes
its local work, and the server waits for all of them; no number and no identity changes. Its options make a
synchronous deployment less kind (``failure_rate``, ``availability``, ``stragglers``); ``{name: asynchronous}`` is
FedBuff's buffered asynchronous aggregation (``system.asynchronous``). What each option means: docs/semantics.md
("Deployment"). The keys avoid ``dropout``, which already means the networks' dropout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fedarena.config import SYNCHRONOUS, SYSTEM_INACTIVE
from fedarena.errors import ConfigError
from fedarena.params import SectionKind
from fedarena.registry import Registry

ASYNCHRONOUS = "asynchronous"
STRAGGLER_POLICIES = ("drop", "include")  # FedProx's experiments: FedAvg drops them, FedProx includes their work
ON_UNDEFINED = ("skip",)  # a round whose reporters are too few for the rule: the global model stays as it was
TIMINGS = ("honest", "fresh", "stale")  # when an attacker's update arrives under asynchronous aggregation
SYSTEMS: Registry = Registry("system")


@dataclass(frozen=True)
class Availability:
    """When a device can be drawn: ``base + amplitude * sin(2 pi (round / period + phase_k))`` (a daily cycle of
    ``period`` rounds, phase_k uniform per device), or a CSV trace ``device,round,available`` (``csv``)."""

    base: float = 0.7
    amplitude: float = 0.2
    period: int = 24
    csv: str | None = None


@dataclass(frozen=True)
class SystemSpec:
    """A system section as checked values (``system_from``)."""

    name: str = SYNCHRONOUS
    failure_rate: float = 0.0
    attackers_fail: bool = False
    availability: Availability | None = None
    stragglers: float = 0.0
    straggler_policy: str = "drop"
    on_undefined: str = "skip"
    attackers_straggle: bool = False
    # asynchronous (FedBuff) only
    buffer: int = 10
    concurrency: int | None = None  # devices training at once (None: clients_per_round)
    latency_mean: float = 1.0
    speed_sigma: float = 0.5
    jitter_sigma: float = 0.25
    trace: str | None = None
    attacker_timing: str = "honest"
    stale_factor: float = 10.0

    @property
    def asynchronous(self) -> bool:
        return self.name == ASYNCHRONOUS

    @property
    def default(self) -> bool:
        """The lab's synchronous rounds: nothing of this section changes a number (``ExperimentConfig.system_is_default``
        on the section as written)."""
        return self.name == SYNCHRONOUS and all(getattr(self, key) == value for key, value in SYSTEM_INACTIVE.items())

    @property
    def partial_participation(self) -> bool:
        """Whether fewer devices than drawn may report, or the draw is not the sampling's (DP's refusal); stragglers
        whose partial work is included still report, each clipped as any other."""
        return (self.asynchronous or self.failure_rate > 0 or self.availability is not None
                or (self.stragglers > 0 and self.straggler_policy == "drop"))


def _fraction(where: str, key: str, value, *, closed: bool) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and (
        0 <= value <= 1 if closed else 0 <= value < 1)
    if not ok:
        raise ConfigError(f"{where}: {key} must be a number in [0, {'1]' if closed else '1)'}, got {value!r}")
    return float(value)


def _positive(where: str, key: str, value, *, integer: bool = False) -> float | int:
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or not 0 < value < math.inf:
        raise ConfigError(f"{where}: {key} must be a {'whole number' if integer else 'finite number'} > 0, "
                          f"got {value!r}")
    return value if integer else float(value)


AVAILABILITY_KEYS = ("base", "amplitude", "period", "csv")


def availability_from(where: str, value) -> Availability | None:
    """The checked availability option (null: every device always available)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: availability must be a mapping with keys {', '.join(AVAILABILITY_KEYS)} "
                          f"(or null), got {value!r}")
    unknown = sorted(set(value) - set(AVAILABILITY_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown availability key(s) {unknown}; allowed: {', '.join(AVAILABILITY_KEYS)}")
    if value.get("csv") is not None:
        if set(value) - {"csv"}:
            raise ConfigError(f"{where}: availability from a csv trace takes no {sorted(set(value) - {'csv'})}")
        if not isinstance(value["csv"], str) or not value["csv"]:
            raise ConfigError(f"{where}: availability.csv must be a path to a device,round,available file")
        return Availability(csv=value["csv"])
    spec = Availability(**value)
    base = _fraction(where, "availability.base", spec.base, closed=True)
    amplitude = _fraction(where, "availability.amplitude", spec.amplitude, closed=True)
    period = _positive(where, "availability.period", spec.period, integer=True)
    if base - amplitude <= 0 and base + amplitude <= 0:
        raise ConfigError(f"{where}: availability base + amplitude must be > 0 (no device would ever be available)")
    return Availability(base, amplitude, period)


def checked(spec: SystemSpec) -> SystemSpec:
    """The spec, or a one-line ConfigError saying which value is wrong and what is allowed."""
    where = f"system {spec.name!r}"
    failure = _fraction(where, "failure_rate", spec.failure_rate, closed=False)
    stragglers = _fraction(where, "stragglers", spec.stragglers, closed=True)
    for key in ("attackers_fail", "attackers_straggle"):
        if not isinstance(getattr(spec, key), bool):
            raise ConfigError(f"{where}: {key} must be true or false, got {getattr(spec, key)!r}")
    if spec.straggler_policy not in STRAGGLER_POLICIES:
        raise ConfigError(f"{where}: straggler_policy must be one of {', '.join(STRAGGLER_POLICIES)}, "
                          f"got {spec.straggler_policy!r}")
    if spec.on_undefined not in ON_UNDEFINED:
        raise ConfigError(f"{where}: on_undefined must be one of {', '.join(ON_UNDEFINED)}, got {spec.on_undefined!r}")
    availability = availability_from(where, spec.availability)
    return SystemSpec(spec.name, failure, spec.attackers_fail, availability, stragglers, spec.straggler_policy,
                      spec.on_undefined, spec.attackers_straggle, *_asynchronous_values(where, spec))


def _asynchronous_values(where: str, spec: SystemSpec) -> tuple:
    buffer = _positive(where, "buffer", spec.buffer, integer=True)
    if spec.concurrency is not None:
        _positive(where, "concurrency", spec.concurrency, integer=True)
    values = [_positive(where, key, getattr(spec, key)) for key in ("latency_mean",)]
    for key in ("speed_sigma", "jitter_sigma"):
        value = getattr(spec, key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
            raise ConfigError(f"{where}: {key} must be a finite number >= 0 (lognormal sigma), got {value!r}")
        values.append(float(value))
    if spec.trace is not None and (not isinstance(spec.trace, str) or not spec.trace):
        raise ConfigError(f"{where}: trace must be a path to a device,latency csv file, got {spec.trace!r}")
    if spec.attacker_timing not in TIMINGS:
        raise ConfigError(f"{where}: attacker_timing must be one of {', '.join(TIMINGS)}, got {spec.attacker_timing!r}")
    stale = _positive(where, "stale_factor", spec.stale_factor)
    return (buffer, spec.concurrency, *values, spec.trace, spec.attacker_timing, stale)


# 2: a straggler's work drawn as FedProx's code draws it, {1, ..., E - 1} (was {1, ..., E}); the rule's f follows the
# reports it aggregates (``Participation.rule_for``); attacker_share and reports_mean over the rounds the rule ran
@SYSTEMS.register(SYNCHRONOUS, version=2)
def synchronous(*, failure_rate: float = 0.0, attackers_fail: bool = False, availability: dict | None = None,
                stragglers: float = 0.0, straggler_policy: str = "drop", on_undefined: str = "skip",
                attackers_straggle: bool = False) -> SystemSpec:
    """Rounds that wait for every drawn device: ``failure_rate`` p (a drawn device trains, then fails to report with
    probability p; attackers too where ``attackers_fail``), ``availability`` (devices drawn only among those
    available in the round), ``stragglers`` (that fraction of the drawn honest devices runs a number of local epochs,
    or of local steps without epochs, uniform in {1, ..., E - 1} as FedProx's code draws them, its one with E = 1;
    ``straggler_policy`` drop: their work is discarded, FedAvg in FedProx's experiments; include: it is aggregated,
    FedProx's; attackers are among them only where ``attackers_straggle``, then the fraction is of every drawn
    device). ``on_undefined``: what a round does whose reporters are too few for the server rule (whose f follows
    the reports: the trial's f scaled to them, rounded down)."""
    return checked(SystemSpec(SYNCHRONOUS, failure_rate, attackers_fail, availability, stragglers, straggler_policy,
                              on_undefined, attackers_straggle))


# 2: the rule's f follows the buffer (the trial's f scaled to K, rounded down); attacker_share over the steps it ran
@SYSTEMS.register(ASYNCHRONOUS, version=2)
def asynchronous(*, buffer: int = 10, concurrency: int | None = None, latency_mean: float = 1.0,
                 speed_sigma: float = 0.5, jitter_sigma: float = 0.25, trace: str | None = None,
                 attacker_timing: str = "honest", stale_factor: float = 10.0) -> SystemSpec:
    """FedBuff (Nguyen et al., AISTATS 2022): ``concurrency`` devices train at once on the model they received; the
    server applies the mean of the first ``buffer`` arrivals, each scaled by 1 / sqrt(1 + staleness). Latencies:
    lognormal, ``latency_mean`` x a per-device speed (sigma ``speed_sigma``) x a per-dispatch jitter (sigma
    ``jitter_sigma``), or a trace (``device,latency`` csv: each device's mean latency). ``attacker_timing``: honest
    (as any device), fresh (latency 0: in the next buffer) or stale (``stale_factor`` x its latency). The rule's f
    follows the buffer: the trial's f scaled to K / clients_per_round, rounded down."""
    return checked(SystemSpec(ASYNCHRONOUS, buffer=buffer, concurrency=concurrency, latency_mean=latency_mean,
                              speed_sigma=speed_sigma, jitter_sigma=jitter_sigma, trace=trace,
                              attacker_timing=attacker_timing, stale_factor=stale_factor))


SYSTEM_SECTION = SectionKind("system", SYSTEMS, signature=lambda fn: fn)


def system_from(resolved: dict) -> SystemSpec:
    """The checked spec of a resolved system section (``sections.resolve_config``)."""
    return SYSTEMS.get(resolved["name"])(**{k: v for k, v in resolved.items() if k != "name"})


