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

from fedarena.privacy.audit import audit_spec
from fedarena.privacy.base import PRIVACY, PrivacySpec, checked


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
