"""The ``privacy`` config section: ``{name: none | central | local, ...}``, one registered function per mechanism
whose keyword-only arguments are the section's keys (checked like every other section's).

- ``none`` (default): no differential privacy; nothing is clipped or noised, and no number changes.
- ``central``: user-level DP-FedAvg (McMahan et al., ICLR 2018). The server clips every update to L2 norm
  ``clip``, runs its rule with uniform weights and adds Gaussian noise scaled to the rule's sensitivity: for the
  mean, standard deviation ``noise_multiplier * clip`` on the sum, divided by the number of sampled devices.
  ``adaptive``: the bound follows the ``target_quantile`` of the update norms (Andrew et al., NeurIPS 2021).
- ``local``: every device clips its own update to ``clip`` and adds noise of standard deviation
  ``noise_multiplier * clip`` before sending it; the server runs any rule on what it receives.

Give ``noise_multiplier`` or ``target_epsilon`` (the multiplier is then calibrated before training). ``delta``
null is 1e-5, or N^-1.1 for N devices where that is smaller (``accounting.default_delta``).
``secure_aggregation``: the server sees only the sum of the updates, so a rule that needs each one is refused
(``fedarena.privacy.plan``). ``audit: {canaries: K, unseen: U}`` measures the epsilon beside the claimed one
(``fedarena.privacy.audit``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from fedarena.errors import ConfigError
from fedarena.params import SectionKind
from fedarena.privacy.audit import AuditSpec, audit_spec
from fedarena.registry import Registry

NONE = "none"
ACCOUNTANTS = ("rdp", "pld")  # dp-accounting's RDP (default, as pfl-research and TFF report) and PLD (versioned:
# ``accounting.ACCOUNTANT``)
DEFAULT_SECTION = {"name": NONE}


@dataclass(frozen=True)
class PrivacySpec:
    """A privacy section as values, checked (``privacy_from``)."""

    name: str = NONE
    noise_multiplier: float | None = None
    target_epsilon: float | None = None
    clip: float = 1.0
    delta: float | None = None
    accountant: str = "rdp"
    adaptive: bool = False
    target_quantile: float = 0.5
    clip_lr: float = 0.2
    count_noise: float | None = None
    secure_aggregation: bool = False
    audit: AuditSpec | None = None  # canaries inserted to measure the epsilon (``privacy.audit``)

    @property
    def private(self) -> bool:
        """Whether the updates are clipped, noised and accounted for (central or local DP)."""
        return self.name != NONE

    @property
    def canaries(self) -> int:
        """The canary clients an audit adds to the devices the sampling draws from (0: no audit)."""
        return 0 if self.audit is None else self.audit.canaries

    @property
    def central(self) -> bool:
        return self.name == "central"

    @property
    def local(self) -> bool:
        return self.name == "local"


PRIVACY: Registry = Registry("privacy")


@PRIVACY.register("none")
def no_privacy(*, secure_aggregation: bool = False) -> PrivacySpec:
    """No differential privacy (the default): nothing is clipped or noised. ``secure_aggregation`` still refuses
    the server rules that need each update."""
    return PrivacySpec(secure_aggregation=secure_aggregation)


# v2 (central, local): delta null is min(1e-5, N^-1.1), not N^-1.1: the epsilon reported and a calibrated z move
@PRIVACY.register("central", version=2)
def central_dp(*, noise_multiplier: float | None = None, target_epsilon: float | None = None, clip: float = 1.0,
               delta: float | None = None, accountant: str = "rdp", adaptive: bool = False,
               target_quantile: float = 0.5, clip_lr: float = 0.2, count_noise: float | None = None,
               secure_aggregation: bool = False, audit: dict | None = None) -> PrivacySpec:
    """User-level central DP (DP-FedAvg), optionally with adaptive clipping (``adaptive``: ``clip`` is the first
    round's bound; it moves by exp(-clip_lr (noisy fraction unclipped - target_quantile)) each round; the count's
    noise ``count_noise`` null is clients_per_round / 20, Andrew et al.'s choice; ``audit``: canaries that measure
    the epsilon, ``privacy.audit``)."""
    spec = PrivacySpec("central", noise_multiplier, target_epsilon, clip, delta, accountant, adaptive, target_quantile,
                       clip_lr, count_noise, secure_aggregation, audit_spec(audit, "privacy 'central'"))
    return checked(spec)


@PRIVACY.register("local", version=2)
def local_dp(*, noise_multiplier: float | None = None, target_epsilon: float | None = None, clip: float = 1.0,
             delta: float | None = None, accountant: str = "rdp", secure_aggregation: bool = False,
             audit: dict | None = None) -> PrivacySpec:
    """Local DP: each device clips its update to ``clip`` and adds Gaussian noise before sending it (``audit``:
    canaries that measure the epsilon of the released models, ``privacy.audit``)."""
    return checked(PrivacySpec("local", noise_multiplier, target_epsilon, clip, delta, accountant,
                               secure_aggregation=secure_aggregation, audit=audit_spec(audit, "privacy 'local'")))


def checked(spec: PrivacySpec) -> PrivacySpec:
    """The spec, or a one-line ConfigError saying which value is wrong and what is allowed."""
    where = f"privacy {spec.name!r}"
    if (spec.noise_multiplier is None) == (spec.target_epsilon is None):
        raise ConfigError(f"{where}: give noise_multiplier (noise standard deviation / clip) or target_epsilon "
                          f"(calibrated before training), not {'both' if spec.target_epsilon is not None else 'neither'}")
    if spec.noise_multiplier is not None and not 0 <= spec.noise_multiplier < math.inf:
        raise ConfigError(f"{where}: noise_multiplier must be a finite number >= 0 (0: clipping only, epsilon "
                          f"infinite), got {spec.noise_multiplier!r}")
    if spec.target_epsilon is not None and not 0 < spec.target_epsilon < math.inf:
        raise ConfigError(f"{where}: target_epsilon must be a finite number > 0, got {spec.target_epsilon!r}")
    if not 0 < spec.clip < math.inf:
        raise ConfigError(f"{where}: clip (the L2 bound of an update) must be a finite number > 0, got {spec.clip!r}")
    if spec.delta is not None and not 0 < spec.delta < 1:
        raise ConfigError(f"{where}: delta must be in (0, 1) (null: 1e-5, or N^-1.1 for N devices where smaller), "
                          f"got {spec.delta!r}")
    if spec.accountant not in ACCOUNTANTS:
        raise ConfigError(f"{where}: accountant must be one of {', '.join(ACCOUNTANTS)}, got {spec.accountant!r}")
    if not 0 < spec.target_quantile < 1:
        raise ConfigError(f"{where}: target_quantile must be in (0, 1), got {spec.target_quantile!r}")
    if not 0 < spec.clip_lr < math.inf:
        raise ConfigError(f"{where}: clip_lr must be a finite number > 0, got {spec.clip_lr!r}")
    if spec.count_noise is not None and not 0 < spec.count_noise < math.inf:
        raise ConfigError(f"{where}: count_noise must be a finite number > 0 (null: clients_per_round / 20), "
                          f"got {spec.count_noise!r}")
    numbers = ("noise_multiplier", "target_epsilon", "clip", "delta", "target_quantile", "clip_lr", "count_noise")
    return dataclasses.replace(spec, **{key: float(getattr(spec, key)) for key in numbers  # 2 reads as 2.0
                                        if getattr(spec, key) is not None})


def canonical_audit(resolved: dict) -> dict:
    """The section with its ``audit`` checked and in one spelling: canaries and unseen, and resamples and confidence
    where they differ from their defaults."""
    if resolved.get("audit") is None:
        return resolved
    return {**resolved, "audit": audit_spec(resolved["audit"], f"privacy {resolved['name']!r}").canonical()}


PRIVACY_SECTION = SectionKind("privacy", PRIVACY, signature=lambda fn: fn, canonical=canonical_audit)


def privacy_from(resolved: dict) -> PrivacySpec:
    """The checked spec of a resolved privacy section (``sections.resolve_config``)."""
    return PRIVACY.get(resolved["name"])(**{k: v for k, v in resolved.items() if k != "name"})


def is_default(section: dict) -> bool:
    """Whether a (resolved or written) privacy section is the default: no DP and no secure aggregation, which
    leaves every number and every identity as they were before the section existed."""
    return section.get("name", NONE) == NONE and not section.get("secure_aggregation", False)
