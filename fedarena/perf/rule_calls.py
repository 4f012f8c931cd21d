"""How often an attack's search calls the server's rule, and what those calls cost (``make perf``).

The optimised, tailored and adaptive attacks simulate the server's rule for every candidate they try; a rule
that is cheap once a round can dominate a trial under them (FedMGDA+'s QP, SignGuard's clustering). Each row
runs the quick robustness suite's own trial (digits, 30 devices, 10 a round) of one rule row under one attack
at its suite level, for a few rounds, and counts every call of the trial's ``Aggregator`` (the server's own
call included): calls per round, their mean cost and their share of the round.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import replace

from fedarena.methods.aggregators.builder import Aggregator
from fedarena.simulation.experiment import run_experiment
from fedarena.suites.grid import TrialSpec, expand
from fedarena.suites.parse import load_suite

ATTACKS = ("adaptive", "tailored_krum", "tailored_median", "tailored_bulyan", "min_max", "min_sum", "fang",
           "mimic", "alie")
RULES = ("krum", "median", "trimmed_mean", "geometric_median", "bulyan", "dnc", "signguard", "fedmgda_plus_eps0.1")


@contextlib.contextmanager
def timed_rule_calls() -> Iterator[list[float]]:
    """Every ``Aggregator`` call's seconds while the block runs (the class's call, restored after)."""
    seconds: list[float] = []
    original = Aggregator.__call__

    def timed(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - start)

    Aggregator.__call__ = timed
    try:
        yield seconds
    finally:
        Aggregator.__call__ = original


def quick_trials(rules=RULES, attacks=ATTACKS) -> dict[tuple[str, str], TrialSpec]:
    """The quick robustness suite's seed-0 trial of each (rule row, attack) it runs."""
    specs = expand(load_suite("robustness"), "quick", seeds=(0,))
    return {(s.method_label, s.attack_label): s for s in specs if s.method_label in rules and s.attack_label in attacks}


def rule_call_rows(rounds: int = 5, rules=RULES, attacks=ATTACKS) -> list[dict]:
    """One row per (attack, rule) the suite runs: calls per round, ms per call, the rule's ms per round and the
    round's ms; a pair the suite leaves out (the rule undefined at that level, or left out for its cost) is
    listed with a note."""
    trials, rows = quick_trials(rules, attacks), []
    if trials:  # one untimed round first: a process's first trial pays for lazy imports
        run_experiment(replace(next(iter(trials.values())).config, rounds=1, eval_every=1))
    for attack in attacks:
        for rule in rules:
            spec = trials.get((rule, attack))
            row = {"attack": attack, "rule": rule}
            if spec is None:
                rows.append({**row, "note": "not in the quick suite (undefined there, or left out for its cost)"})
                continue
            cfg = replace(spec.config, rounds=rounds, eval_every=rounds)
            with timed_rule_calls() as seconds:
                start = time.perf_counter()
                run_experiment(cfg)
                total = time.perf_counter() - start
            rows.append({**row, "calls_per_round": len(seconds) / rounds, "ms_per_call": 1e3 * sum(seconds) / len(seconds),
                         "rule_ms_per_round": 1e3 * sum(seconds) / rounds, "trial_ms_per_round": 1e3 * total / rounds})
    return rows
