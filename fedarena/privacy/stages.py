"""Differential privacy and its audit as stages of the round (``fedarena.round_stages``).

In the order they run: an audit's drawn canaries append what they send (their directions at twice the round's clip
bound); local DP clips and noises every row (central DP under secure aggregation clips each); central DP wraps the
round's rule (clipped rows, uniform weights, noise on the output, adaptive clipping's bound); after a kept round
the audit records the released model's change; at each evaluation it reports its measured epsilons and whether they
refute the claim. Noise draws come from the stream PRIVACY, keyed by (round, which draw).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedarena.privacy.audit import CanaryAudit, exceeded
from fedarena.privacy.dp_trial import PrivacyPlan
from fedarena.round_stages import Pipeline, StageView
from fedarena.streams import COUNT_NOISE, DEVICE_NOISE, PRIVACY, SERVER_NOISE

AUDIT_SLOT = "audit"  # the audit's part of the run's state


def privacy_pipeline(plan: PrivacyPlan | None, audit: CanaryAudit | None) -> Pipeline:
    """A private trial's stages (none without DP)."""
    if plan is None:
        return Pipeline()
    stages = Private(plan)
    private = Pipeline(device=(stages.sent,), server=(stages.released,))
    if audit is None:
        return private
    audited = Audited(plan, audit)
    return (Pipeline(device=(audited.with_canaries,)) + private
            + Pipeline(after_round=((AUDIT_SLOT, audited.observed),), evaluation=(audited.measured,)))


@dataclass(frozen=True)
class Private:
    plan: PrivacyPlan

    def sent(self, updates: torch.Tensor, view: StageView) -> torch.Tensor:
        """What the devices send (local DP: clipped and noised)."""
        return self.plan.before_sending(updates, view.generator(PRIVACY, DEVICE_NOISE))

    def released(self, rule, view: StageView):
        """The round's rule under central DP: clipped, uniform weights, noised."""
        if rule is None:
            return rule
        return self.plan.server_rule(rule, view.server, view.generator(PRIVACY, SERVER_NOISE),
                                     view.generator(PRIVACY, COUNT_NOISE, device="cpu"))


@dataclass(frozen=True)
class Audited:
    plan: PrivacyPlan
    audit: CanaryAudit

    def with_canaries(self, updates: torch.Tensor, view: StageView) -> torch.Tensor:
        """The devices' rows, then what the round's drawn canaries send (ids from the number of devices on)."""
        canaries = view.senders[view.senders >= self.audit.devices]
        if len(canaries) == 0:
            return updates
        sent = self.audit.rows(canaries, self.plan.bound_now(view.server)).to(updates.dtype)
        return torch.cat([updates, sent])

    def observed(self, part: dict, change: torch.Tensor, view: StageView) -> dict:
        return self.audit.observed(part, change)

    def measured(self, trial, state) -> dict:
        """The measured epsilons now, and whether a lower bound refutes the claim."""
        estimates = self.audit.estimates(state.part(AUDIT_SLOT), state.w, trial.w0, state.round)
        return {**estimates, "audit_exceeded": exceeded(estimates, self.plan.properties(state.round))}
