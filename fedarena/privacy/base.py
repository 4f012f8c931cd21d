"""The ``privacy`` config section's contract: ``PrivacySpec`` (a section as checked values), the registry of
mechanisms (``mechanisms.py`` registers none, central and local) and how a section is resolved (``privacy_from``).
What each mechanism means: ``mechanisms.py`` and docs/semantics.md ("Privacy").
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
ACCOUNTANT: Registry = Registry("accountant")  # each accountant's version (``accounting.py`` registers them)


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
