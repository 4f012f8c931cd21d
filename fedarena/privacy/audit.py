"""A measured epsilon beside the claimed one: one-shot empirical privacy estimation by canary clients (Andrew et
al., ICLR 2024), in the private trial it audits (``privacy: {name: central | local, audit: {canaries: K, unseen:
U}}``).

- K canary clients join the N devices (ids N .. N + K - 1), drawn by the same sampling (a round's m counts them):
  each sends, every round it is drawn, its own fixed random unit direction at the round's clip bound, and
  goes through what a device's update goes through (local DP's noise; the server's clipping, rule and noise).
  U more directions are never sent. Directions: i.i.d. Gaussian rows, normalised, from the stream AUDIT.
- Statistics per direction: the cosine of the final model's change w_T - w_0 with it (``final``), and the largest
  cosine of any round's change w_{t+1} - w_t with it (``iterates``: every released model observed).
- The estimates (``privacy.empirical``), at the run's delta: the epsilon between the Gaussians fitted to the sent
  directions' statistics and the unseen ones' (``epsilon_empirical_*``, two variances fitted apart), with a
  bootstrap percentile interval; and for the final model the equal-variance estimate (``epsilon_equal_variance_final``:
  one Gaussian shift in the unseen ones' variance, the Gaussian mechanism's epsilon at it) with its Student-t
  interval. The fitted one is biased up at small delta, the equal-variance one is not (both measured on ideal
  statistics by ``python -m fedarena.perf.audit_estimators``; docs/semantics.md, "Privacy audit").
- The evidence: lower bounds at the run's confidence, the thresholded tests' (the final statistic's false
  positives from the exact null distribution of a random direction's cosine, the iterates' from the unseen
  directions; no Gaussian assumed, but the K canaries of one run taken as independent trials, as Andrew et al.'s
  are) and the equal-variance interval's lower end (one-sided, resting on the Gaussian shift). ``audit_exceeded`` is
  1 where one lies above the claim; a point estimate above it is no evidence. Each bound holds at its own level
  (final and equal-variance: (1 + confidence) / 2, iterates: confidence), so the flag, which reads all three, is
  false for a correct mechanism in at most 2 (1 - confidence) of runs (union bound).
- A canary sends twice the round's bound, as the authors send an outsized update: every mechanism clips it to the
  bound (the server, or the device under local DP and secure aggregation), and adaptive clipping counts it clipped
  whatever the rounding (at exactly the bound, float32 counted 67 to 93 of 100 canaries unclipped).

A canary has no data: it trains nothing, is never malicious and has no row in any per-device table or metric.
"""

from __future__ import annotations

import logging
import math
from dataclasses import MISSING, dataclass, fields

import numpy as np
import torch

from fedarena.errors import ConfigError
from fedarena.privacy.empirical import (
    bootstrap_interval,
    cosine_log_sf,
    epsilon_lower_bound,
    equal_variance_epsilon,
    equal_variance_interval,
    fitted_epsilon,
)

KEYS = {"canaries": "canary clients inserted (>= 2)", "unseen": "directions never sent (>= 2)",
        "resamples": "bootstrap resamples of the interval (>= 0; default 200)",
        "confidence": "the interval's level, in (0, 1) (default 0.95)"}
LOG = logging.getLogger(__name__)
MAX_BYTES = 2 * 2**30  # the directions are kept in memory: at most this much (float32)
CANARY_SCALE = 2.0  # a canary's update in clip bounds, before the mechanism clips it to one
ITERATE_MAX = "iterate_max"  # the audit's state (its part of the run, ``SimState.part("audit")``): [K + U] largest cosine with a round's change
# what the flag reads: the thresholded tests' bounds and the equal-variance interval's lower end (one-sided)
LOWER_BOUNDS = ("epsilon_lower_bound_final", "epsilon_lower_bound_iterates", "epsilon_equal_variance_final_low")
# what an audit reports, part of an audited trial's identity (``audit/canaries``); v2: the equal-variance estimate,
# the flag on its lower end too, the add/remove claim exact (PLD) beside RDP's
VERSION = 2


@dataclass(frozen=True)
class AuditSpec:
    canaries: int
    unseen: int
    resamples: int = 200
    confidence: float = 0.95

    def canonical(self) -> dict:
        """The audit in one spelling (a config's identity): canaries and unseen, and the others where they differ
        from their defaults."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.default is MISSING or getattr(self, f.name) != f.default}


def audit_spec(section: dict | None, where: str) -> AuditSpec | None:
    """The checked ``audit`` mapping of a privacy section (None: no audit); one line per wrong value."""
    if section is None:
        return None
    unknown = sorted(set(section) - set(KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown audit key(s) {unknown}; allowed: "
                          + "; ".join(f"{k}: {v}" for k, v in KEYS.items()))
    for key in ("canaries", "unseen", "resamples"):
        value = section.get(key, AuditSpec.resamples if key == "resamples" else None)
        least = 0 if key == "resamples" else 2
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ConfigError(f"{where}: audit.{key} must be a whole number >= {least} ({KEYS[key]}), got {value!r}"
                              + ("" if key in section else " (missing)"))
    confidence = section.get("confidence", AuditSpec.confidence)
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0 < confidence < 1:
        raise ConfigError(f"{where}: audit.confidence must be in (0, 1), got {confidence!r}")
    return AuditSpec(section["canaries"], section["unseen"], section.get("resamples", AuditSpec.resamples),
                     float(confidence))


def check_size(spec: AuditSpec | None, dim: int) -> None:
    """A ConfigError where the audit's directions of a model of ``dim`` parameters would not fit ``MAX_BYTES``."""
    count = 0 if spec is None else spec.canaries + spec.unseen
    if count * dim * 4 > MAX_BYTES:
        raise ConfigError(f"privacy audit: {spec.canaries} canaries and {spec.unseen} unseen directions of the "
                          f"model's {dim:,} parameters take {count * dim * 4 / 2**30:.1f} GiB, above the "
                          f"{MAX_BYTES / 2**30:g} GiB an audit keeps; lower audit.canaries or audit.unseen (at most "
                          f"{MAX_BYTES // (4 * dim):,} together) or audit a smaller model")


def with_canaries(spec: AuditSpec | None, sizes: np.ndarray) -> np.ndarray:
    """The training sizes of everyone the sampling draws from: the devices', then one per canary (uniform sampling
    reads only how many there are)."""
    if spec is None:
        return sizes
    return np.concatenate([sizes, np.ones(spec.canaries, dtype=np.asarray(sizes).dtype)])


@dataclass(frozen=True)
class CanaryAudit:
    """One trial's canaries: the directions (fixed before training) and how they enter and are read."""

    spec: AuditSpec
    devices: int  # N: canary k is client N + k
    directions: torch.Tensor  # [K + U, d] unit rows, the K sent ones first
    delta: float
    seed: int  # of the bootstrap's resampling

    @classmethod
    def of(cls, spec: AuditSpec, devices: int, dim: int, delta: float, generator: torch.Generator, seed: int,
           device: torch.device, dtype: torch.dtype) -> CanaryAudit:
        check_size(spec, dim)
        rows = torch.randn(spec.canaries + spec.unseen, dim, generator=generator)
        rows.div_(rows.norm(dim=1, keepdim=True))  # in place: the limit above is what it holds
        return cls(spec, devices, rows.to(device=device, dtype=dtype), delta, seed)

    def rows(self, drawn_canaries: np.ndarray, bound: float) -> torch.Tensor:
        """[c, d] what the drawn canaries (ids N + k, ascending) send: their directions at ``CANARY_SCALE`` times
        ``bound``, which the mechanism's clipping brings to the bound."""
        index = torch.as_tensor(drawn_canaries - self.devices, device=self.directions.device)
        return self.directions[index] * (CANARY_SCALE * bound)

    def observed(self, state: dict, change: torch.Tensor) -> dict:
        """The audit's state after a round whose released model moved by ``change`` [d] (a dropped round moves
        nothing and is no observation)."""
        cosines = _cosines(self.directions, change)
        if cosines is None:
            return state
        best = state.get(ITERATE_MAX)
        best = cosines if best is None else torch.maximum(best.to(cosines.device), cosines)
        return {**state, ITERATE_MAX: best}

    def estimates(self, state: dict, w: torch.Tensor, w0: torch.Tensor, evaluated_round: int) -> dict[str, float]:
        """The run's measured epsilons now, each with its interval's ends (``_low``, ``_high``) and its lower bound
        (``epsilon_lower_bound_*``), the final model's equal-variance estimate, the canary count and the intervals'
        confidence. NaN where nothing is observed yet (no kept round, or the model has not moved)."""
        out = {"audit_canaries": float(self.spec.canaries), "audit_confidence": self.spec.confidence}
        statistics = {"final": _cosines(self.directions, w - w0), "iterates": state.get(ITERATE_MAX)}
        out.update(self._equal_variance(statistics["final"]))
        alpha = (1.0 - self.spec.confidence) / 2  # per rate: both hold together at the confidence (union bound)
        for index, (which, values) in enumerate(statistics.items()):
            name, bound = f"epsilon_empirical_{which}", f"epsilon_lower_bound_{which}"
            if values is None:
                out.update({name: math.nan, f"{name}_low": math.nan, f"{name}_high": math.nan, bound: math.nan})
                continue
            values = values.double().cpu().numpy()
            seen, unseen = values[: self.spec.canaries], values[self.spec.canaries:]
            rng = np.random.default_rng([self.seed, evaluated_round, index])
            low, high = bootstrap_interval(seen, unseen, self.delta, self.spec.resamples, self.spec.confidence, rng)
            exact_null = cosine_log_sf(self.directions.shape[1]) if which == "final" else None
            out.update({name: fitted_epsilon(seen, unseen, self.delta), f"{name}_low": low, f"{name}_high": high,
                        bound: epsilon_lower_bound(seen, self.delta, alpha, unseen, exact_null)})
        return out

    def _equal_variance(self, final: torch.Tensor | None) -> dict[str, float]:
        """The final statistic's equal-variance estimate and its interval at the run's confidence (NaN unobserved)."""
        name = "epsilon_equal_variance_final"
        if final is None:
            return {name: math.nan, f"{name}_low": math.nan, f"{name}_high": math.nan}
        values = final.double().cpu().numpy()
        seen, unseen = values[: self.spec.canaries], values[self.spec.canaries:]
        low, high = equal_variance_interval(seen, unseen, self.delta, self.spec.confidence)
        return {name: equal_variance_epsilon(seen, unseen, self.delta), f"{name}_low": low, f"{name}_high": high}


def exceeded(estimates: dict[str, float], claims: dict[str, float]) -> float:
    """1.0 where a measured lower bound (``LOWER_BOUNDS``) lies above the claim it is held against (the exact
    add-or-remove epsilon where the run has one, else the claimed epsilon), 0.0 where none does, NaN where nothing
    is measured yet or the claim is infinite. The point estimates are no evidence: they sit above a tight claim by
    their fit's error (the fitted one mostly does)."""
    claim = claims.get("epsilon_add_remove", claims.get("epsilon", math.nan))
    bounds = [estimates[name] for name in LOWER_BOUNDS if not math.isnan(estimates[name])]  # an infinite one: a leak
    if not bounds or not math.isfinite(claim):
        return math.nan
    if max(bounds) > claim:
        LOG.warning("privacy audit: a measured lower bound on epsilon (%.4g) lies above the claim (%.4g): the "
                    "mechanism spends more than its accountant says", max(bounds), claim)
    return float(max(bounds) > claim)


def _cosines(directions: torch.Tensor, change: torch.Tensor) -> torch.Tensor | None:
    """[K + U] cosine of each unit direction with ``change`` (None for a zero or non-finite change)."""
    norm = float(change.double().norm())
    if not math.isfinite(norm) or norm == 0.0:
        return None
    return (directions @ change.to(directions)).double() / norm  # float32 rows: cosines ~ d^-1/2 need no more
