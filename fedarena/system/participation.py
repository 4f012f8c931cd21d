"""Who takes part in a synchronous round of a deployment, as pure functions of (seed, round, device): availability
(who can be drawn), stragglers (who runs fewer local steps, and how many) and failures (who trains but never
reports). Each draw has its own seed stream (``fedarena.streams``), so adding one never moves another's numbers.
What each means: docs/semantics.md ("Deployment")."""

from __future__ import annotations

import csv
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from fedarena.errors import ConfigError
from fedarena.streams import AVAILABILITY, FAILURE, STRAGGLER, keyed_uniforms
from fedarena.system.base import Availability, SystemSpec
from fedarena.system.latency import mean_latencies
from fedarena.system.requirements import following_f, undefined_reason


def availability_probability(spec: Availability, phases: np.ndarray, rounds: np.ndarray) -> np.ndarray:
    """[len(rounds), devices]: ``base + amplitude * sin(2 pi (round / period + phase_k))``, clipped to [0, 1]."""
    angle = 2 * np.pi * (np.asarray(rounds, dtype=np.float64)[:, None] / spec.period + phases[None, :])
    return np.clip(spec.base + spec.amplitude * np.sin(angle), 0.0, 1.0)


def device_phases(seed: int, devices: int) -> np.ndarray:
    """[devices]: each device's phase in its daily cycle, uniform in [0, 1) (stream AVAILABILITY, round 0)."""
    return keyed_uniforms(seed, AVAILABILITY, 0, np.arange(devices), 1)[:, 0]


def read_trace(path: str, devices: int) -> np.ndarray:
    """A ``device,round,available`` CSV as a [rounds, devices] bool table (rounds 0 .. the last listed; a device-round
    not listed is available); one-line errors naming the file and line."""
    file = Path(path)
    try:
        lines = file.read_text().splitlines()
    except OSError as err:
        raise ConfigError(f"system availability csv {path}: cannot read it ({err.strerror or err})") from None
    rows = list(csv.reader(lines))
    if not rows or [c.strip() for c in rows[0]] != ["device", "round", "available"]:
        raise ConfigError(f"system availability csv {path}: the first line must be the header device,round,available")
    entries = []
    for number, row in enumerate(rows[1:], start=2):
        try:
            device, round_idx, flag = (int(c) for c in row)
        except ValueError:
            raise ConfigError(f"system availability csv {path}, line {number}: expected three whole numbers "
                              f"device,round,available, got {','.join(row)!r}") from None
        if not 0 <= device < devices or round_idx < 0 or flag not in (0, 1):
            raise ConfigError(f"system availability csv {path}, line {number}: device must be in [0, {devices}), "
                              f"round >= 0 and available 0 or 1; got {device},{round_idx},{flag}")
        entries.append((device, round_idx, flag))
    if not entries:
        raise ConfigError(f"system availability csv {path}: no rows after the header")
    table = np.ones((max(r for _, r, _ in entries) + 1, devices), dtype=bool)
    for device, round_idx, flag in entries:
        table[round_idx, device] = bool(flag)
    return table


@dataclass(frozen=True)
class Participation:
    """A synchronous deployment's draws for one trial: its spec, seed, number of devices, which are malicious, and
    the availability trace (a CSV's table: rounds past its last repeat it from round 0, a trace of one day each day)
    or each device's phase."""

    spec: SystemSpec
    seed: int
    malicious: np.ndarray  # [devices] bool
    trace: np.ndarray | None = None
    phases: np.ndarray | None = None
    reasons: dict = field(default_factory=dict, compare=False)  # n -> why the rule is undefined on n rows (a memo)
    latency_means: np.ndarray | None = None  # asynchronous aggregation: each device's mean latency

    @classmethod
    def of(cls, spec: SystemSpec, seed: int, malicious: np.ndarray) -> Participation:
        devices = len(malicious)
        availability = spec.availability
        trace = read_trace(availability.csv, devices) if availability and availability.csv else None
        phases = device_phases(seed, devices) if availability and not availability.csv else None
        means = mean_latencies(spec, seed, devices) if spec.asynchronous else None
        return cls(spec, seed, np.asarray(malicious, dtype=bool), trace, phases, latency_means=means)

    def unavailable(self, rounds: np.ndarray) -> np.ndarray | None:
        """[len(rounds), devices] bool: who cannot be drawn in each round (None: everyone can, always)."""
        rounds = np.asarray(rounds, dtype=np.int64)
        if self.trace is not None:
            return ~self.trace[rounds % self.trace.shape[0]]
        if self.phases is None:
            return None
        devices = len(self.phases)
        p = availability_probability(self.spec.availability, self.phases, rounds)
        u = keyed_uniforms(self.seed, AVAILABILITY, np.repeat(rounds + 1, devices), np.tile(np.arange(devices),
                           len(rounds)), 1)[:, 0].reshape(len(rounds), devices)
        return u >= p

    def stragglers(self, ids: np.ndarray, round_idx: int) -> np.ndarray:
        """[len(ids)] bool: round(fraction x the drawn honest devices) of them, those with the lowest keyed uniforms
        (FedProx's draw of a fixed share each round). Attackers choose their work and never straggle, unless
        ``attackers_straggle`` (then the share is of every drawn device, as FedProx's code draws them)."""
        honest = np.ones(len(ids), dtype=bool) if self.spec.attackers_straggle else ~self.malicious[ids]
        count = int(np.floor(self.spec.stragglers * int(honest.sum()) + 0.5))
        keys = keyed_uniforms(self.seed, STRAGGLER, round_idx, ids, 2)
        order = np.argsort(np.where(honest, keys[:, 0], np.inf), kind="stable")
        chosen = np.zeros(len(ids), dtype=bool)
        chosen[order[:count]] = True
        return chosen

    def budgets(self, ids: np.ndarray, round_idx: int, steps: np.ndarray, epochs: int, epoch_steps: np.ndarray
                ) -> np.ndarray | None:
        """[len(ids)] local steps each drawn device runs (None: all it plans, ``steps``): a straggler runs a number of
        epochs (or of local steps, without epochs) drawn as FedProx's code draws them, ``randint(1, E)`` in numpy:
        uniform in {1, ..., E - 1}, E its planned epochs (steps). With E = 1 there is nothing less to do: the
        straggler runs its one epoch (step), so that only ``drop`` sets it apart (``straggled_units``)."""
        if self.spec.stragglers == 0:
            return None
        straggles = self.stragglers(ids, round_idx)
        draw = keyed_uniforms(self.seed, STRAGGLER, round_idx, ids, 2)[:, 1]
        units = straggled_units(draw, epochs if epochs else steps)
        partial = units * epoch_steps if epochs else units
        return np.where(straggles, np.minimum(partial, steps), steps)

    def tallied(self, part: dict, ids: np.ndarray) -> dict:
        """The run's ``system`` part with a round the rule aggregated counted (``tally``: rounds, ``reports``, and
        ``attacker_reports`` among them; a skipped round is not counted, so the means reported at each evaluation
        are over the reports the rule aggregated); the lab's part as it is (it counts nothing)."""
        if self.spec.default:
            return part
        bad = int(self.malicious[ids].sum()) if len(ids) else 0
        counts = torch.tensor([1, len(ids), bad], dtype=torch.long)
        return {**part, "tally": part.get("tally", torch.zeros(3, dtype=torch.long)) + counts}

    def rule_for(self, rule, n: int, per_round: int):
        """The server rule for a round that aggregates ``n`` reports: its f follows the reports, the trial's f
        (declared or expected among ``per_round`` drawn devices) scaled to n and rounded down, ``f_n = floor(f n /
        per_round)`` (a buffer of 5 of 10: f 2 -> 1), so that a rule never silently becomes another (trimming 2 from
        each side of 5 rows is the median). The lab's rounds aggregate every drawn device: its rule as it is."""
        if rule is None or self.spec.default or n == per_round:
            return rule
        return replace(rule, f=following_f(rule.f, n, per_round))

    def undefined(self, rule, n: int) -> bool:
        """Whether the server rule is undefined on the ``n`` reports of a round (then the round is skipped,
        ``on_undefined``); never in the lab's synchronous rounds, whose n the trial's set-up checked."""
        return not self.spec.default and undefined_reason(rule, n, self.reasons) is not None

    def reporting(self, ids: np.ndarray, round_idx: int) -> np.ndarray | None:
        """[len(ids)] bool: who reports (None: everyone). A device fails with probability ``failure_rate`` after it
        trains (attackers only where ``attackers_fail``); a straggler's work is dropped under ``straggler_policy:
        drop``."""
        if self.spec.failure_rate == 0 and (self.spec.stragglers == 0 or self.spec.straggler_policy == "include"):
            return None
        fails = keyed_uniforms(self.seed, FAILURE, round_idx, ids, 1)[:, 0] < self.spec.failure_rate
        if not self.spec.attackers_fail:
            fails &= ~self.malicious[ids]
        if self.spec.stragglers and self.spec.straggler_policy == "drop":
            fails |= self.stragglers(ids, round_idx)
        return ~fails


def straggled_units(draw: np.ndarray, planned) -> np.ndarray:
    """A straggler's epochs (or steps) from a uniform ``draw`` in [0, 1): FedProx's ``randint(1, E)``, uniform in
    {1, ..., E - 1}; with E = 1 (nothing less to do) its one unit."""
    fewer = np.maximum(np.asarray(planned, dtype=np.int64) - 1, 1)  # the values {1, ..., E - 1} can take (E = 1: 1)
    return 1 + np.floor(draw * fewer).astype(np.int64)


LAB = Participation(SystemSpec(), 0, np.zeros(0, dtype=bool))  # the default: everyone available, reporting, whole
