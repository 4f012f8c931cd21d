"""make perf's table of the server-rule calls an attack's search makes (fedarena.perf.rule_calls)."""

from fedarena.perf.rule_calls import rule_call_rows


def test_the_adaptive_attack_calls_the_rule_33_times_a_round_min_max_once():
    # Execute: the quick robustness suite's own seed-0 trials, 2 rounds each
    rows = rule_call_rows(rounds=2, rules=("median", "bulyan"), attacks=("adaptive", "min_max"))
    by = {(r["attack"], r["rule"]): r for r in rows}
    # Assert: 32 candidates a round plus the server's own call; Min-Max searches without the rule; the suite
    # leaves Bulyan out at 20% (undefined), and the row says so
    assert by[("adaptive", "median")]["calls_per_round"] == 33
    assert by[("min_max", "median")]["calls_per_round"] == 1
    assert by[("adaptive", "median")]["rule_ms_per_round"] > by[("min_max", "median")]["rule_ms_per_round"]
    assert "not in the quick suite" in by[("adaptive", "bulyan")]["note"]
