"""make perf's table of the server-rule calls an attack's search makes (fedarena.perf.rule_calls)."""

from fedarena.methods.aggregators.base import AGGREGATORS
from fedarena.perf.rule_calls import quick_trials, rule_call_rows


def test_the_adaptive_attack_calls_the_rule_33_times_a_round_min_max_once():
    # Execute: the battery's own quick seed-0 digits trials, 2 rounds each
    rows = rule_call_rows(rounds=2, rules=("median", "bulyan", "deepsight"), attacks=("adaptive", "min_max"))
    by = {(r["attack"], r["rule"]): r for r in rows}
    # Assert: 32 candidates a round plus the server's own call; Min-Max searches without the rule; the battery
    # leaves Bulyan out at 20% (undefined), and the row says so
    assert by[("adaptive", "median")]["calls_per_round"] == by[("adaptive", "deepsight")]["calls_per_round"] == 33
    assert by[("min_max", "median")]["calls_per_round"] == 1
    assert by[("adaptive", "median")]["rule_ms_per_round"] > by[("min_max", "median")]["rule_ms_per_round"]
    assert "not run by the battery" in by[("adaptive", "bulyan")]["note"]


def test_the_table_covers_every_built_in_rule_deepsight_included():
    trials = quick_trials(attacks=("adaptive",))
    # every built-in rule has its trial but the one the battery sets aside at 20% (Bulyan: n >= 4f + 3)
    assert set(AGGREGATORS.built_in()) - {rule for rule, _ in trials} == {"bulyan"}
    cfg = trials[("deepsight", "adaptive")].config
    assert (cfg.dataset["name"], cfg.dataset["num_clients"], cfg.model["hidden"], cfg.rounds) == ("digits", 30, (64,), 30)
    assert (cfg.attack["name"], cfg.attack["level"], cfg.aggregator["name"], cfg.seed) == ("adaptive", 0.2, "deepsight", 0)
