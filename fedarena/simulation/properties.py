"""Run properties: numbers that describe the run itself rather than what its evaluation counted, reported beside
the metrics at every evaluated round and in ``final``: under differential privacy the budget spent (``epsilon``,
at ``delta``) and the ``noise_multiplier`` used, and where audited the measured epsilons; under a certified defense
its guarantee (computed at evaluation by the rule's ``certify``, the properties its entry ``reports``: CRFL's
``certified_radius``; a plugin rule's too).

A property may be infinite (no noise: no guarantee), and infinity is a value, not a missing number: the result
file writes it as JSON's ``Infinity`` and the store's reader gives it back as ``inf`` (MLflow keeps it as the
largest float). A run without the property (no differential privacy) has none.
"""

from __future__ import annotations

import math

from fedarena.methods.aggregators.base import AGGREGATORS

# name -> higher is better (None: neither): the privacy spent, at which delta, and the noise multiplier the run used
# (given, or calibrated from a target epsilon); then (``AUDIT_PROPERTIES``) a privacy audit's (``privacy.audit``): the
# epsilon of add-or-remove adjacency, the measured ones with their intervals, the canary count, whether refuted
PRIVACY_PROPERTIES: dict[str, bool | None] = {"epsilon": False, "delta": None, "noise_multiplier": None}
AUDIT_PROPERTIES: dict[str, bool | None] = {
    "epsilon_add_remove": False, "audit_canaries": None, "audit_exceeded": False,  # 1: a lower bound above the claim
    **{f"epsilon_empirical_{which}{end}": False for which in ("final", "iterates") for end in ("", "_low", "_high")},
    "epsilon_add_remove_rdp": False, "audit_confidence": None,  # RDP's bound beside the exact (PLD) claim, the
    # intervals' level; the equal-variance estimate:
    **{f"epsilon_equal_variance_final{end}": False for end in ("", "_low", "_high")},
    "epsilon_lower_bound_final": False, "epsilon_lower_bound_iterates": False}


# a deployment's (``fedarena.system``; every system but the lab's): rounds skipped (too few reports for the rule), the
# reports a round aggregated on average, and the attackers' share of all reports
SYSTEM_PROPERTIES: dict[str, bool | None] = {"rounds_skipped": None, "reports_mean": None, "attacker_share": None}


def run_property_directions() -> dict[str, bool | None]:
    """name -> higher is better (None: neither) of every run property: privacy's, those every rule registered now
    reports (a plugin's too), the audit's (in the order the tables have always shown them), a deployment's."""
    declared = {name: better for rule in AGGREGATORS.names() for name, better in AGGREGATORS.get(rule).reports.items()}
    return {**PRIVACY_PROPERTIES, **declared, **AUDIT_PROPERTIES, **SYSTEM_PROPERTIES}


RUN_PROPERTIES: dict[str, bool | None] = run_property_directions()  # the built-in ones (at import, before any plugin)
MLFLOW_INFINITY = 1.7976931348623157e308  # what MLflow's SQL store writes for an infinite metric


def run_properties(trial, rounds_done: int) -> dict[str, float]:
    """The trial's properties after ``rounds_done`` rounds (none without differential privacy)."""
    return trial.privacy.properties(rounds_done) if trial.privacy is not None else {}


def stored_value(name: str, value: float) -> float:
    """A value as read back from the store: an infinity (a run property's: no guarantee; MLflow writes it as the
    largest float, which no finite metric reaches) comes back as ``inf``, a plugin's property's too (its process
    need not have loaded the plugin)."""
    if abs(value) >= MLFLOW_INFINITY:
        return math.copysign(math.inf, value)
    return value
