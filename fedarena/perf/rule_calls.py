"""How often an attack's search calls the server's rule, and what those calls cost (``make perf``).

The optimised, tailored and adaptive attacks simulate the server's rule for every candidate they try; a rule
that is cheap once a round can dominate a trial under them (FedMGDA+'s QP, SignGuard's clustering, DeepSight's
probe). Each row runs the battery's quick digits trial (30 devices, 10 a round, seed 0; the robustness and
backdoor suites' quick settings) of one built-in rule, every one by default, under one searching attack at 20%,
for a few rounds, and counts every call of the trial's ``Aggregator`` (the server's own call included): calls
per round, their mean cost and their share of the round.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from fedarena.battery.definition import NAME, battery_data, row_of
from fedarena.errors import ConfigError
from fedarena.methods.aggregators.base import AGGREGATORS
from fedarena.methods.aggregators.builder import Aggregator
from fedarena.simulation.experiment import run_experiment
from fedarena.suites.grid import TrialSpec, expand
from fedarena.suites.parse import parse_suite
from fedarena.suites.spec import Suite, SuiteError

ATTACKS = ("adaptive", "tailored_krum", "tailored_median", "tailored_bulyan", "min_max", "min_sum", "fang",
           "mimic", "alie")
LEVEL = 0.2  # the battery's larger level of each of these attacks
DATASET = "digits"  # the quick scale's cheaper dataset (mnist_5k's trials run the same calls, larger)


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


def quick_trials(rules=None, attacks=ATTACKS) -> dict[tuple[str, str], TrialSpec]:
    """The battery's quick seed-0 digits trial of each (built-in rule, attack) at ``LEVEL`` (``rules``: every
    built-in aggregator by default); a pair the battery cannot set up is left out."""
    trials = {}
    for rule in AGGREGATORS.built_in() if rules is None else rules:
        data = battery_data([row_of("aggregator", rule)], "quick")  # the tailored attacks' targets included
        for attack in data["attacks"]:
            if attack["label"] in attacks and LEVEL in attack["levels"]:
                with contextlib.suppress(ConfigError, SuiteError, KeyError):  # undefined: no trial
                    spec, = expand(one_attack(data, attack), "quick", dataset=DATASET, seeds=(0,))
                    trials[(rule, attack["label"])] = spec
    return trials


def one_attack(data: dict, attack: dict) -> Suite:
    """The battery's suite mapping reduced to one attack at ``LEVEL`` (and that attack's overrides alone: a
    suite's overrides name only its own attacks)."""
    single = {key: value for key, value in data.items() if key != "overrides"}
    single["attacks"] = [{**attack, "levels": [LEVEL]}]
    overrides = [o for o in data.get("overrides", ()) if o["when"]["attack"] == attack["label"]]
    return parse_suite({**single, "overrides": overrides} if overrides else single, Path(f"{NAME}.yaml"))


def rule_call_rows(rounds: int = 5, rules=None, attacks=ATTACKS) -> list[dict]:
    """One row per (attack, rule): calls per round, ms per call, the rule's ms per round and the round's ms; a
    pair the battery does not run (the rule undefined at that level) is listed with a note."""
    rules = AGGREGATORS.built_in() if rules is None else rules
    trials, rows = quick_trials(rules, attacks), []
    if trials:  # one untimed round first: a process's first trial pays for lazy imports
        run_experiment(replace(next(iter(trials.values())).config, rounds=1, eval_every=1))
    for attack in attacks:
        for rule in rules:
            rows.append({"attack": attack, "rule": rule, **timed_trial(trials.get((rule, attack)), rounds)})
    return rows


def timed_trial(spec: TrialSpec | None, rounds: int) -> dict:
    """A trial's first ``rounds`` rounds, timed: its rule calls per round and their cost, or why it does not run."""
    undefined = {"note": f"not run by the battery at {LEVEL:g} (the rule is undefined there)"}
    if spec is None:
        return undefined
    with timed_rule_calls() as seconds:
        start = time.perf_counter()
        try:
            run_experiment(replace(spec.config, rounds=rounds, eval_every=rounds))
        except ConfigError:  # refused when the trial is built (e.g. Bulyan's n >= 4f + 3)
            return undefined
        total = time.perf_counter() - start
    return {"calls_per_round": len(seconds) / rounds, "ms_per_call": 1e3 * sum(seconds) / len(seconds),
            "rule_ms_per_round": 1e3 * sum(seconds) / rounds, "trial_ms_per_round": 1e3 * total / rounds}
