"""The ``privacy_audit`` table: every audit cell carries what it rests on (the exact add/remove claim beside RDP's;
each estimate with its interval and K; the lower bounds and in how many seeds the flag rose), and its notes say what
each cell measures and what sits beside it."""

import math

import pandas as pd
from test_leaderboards_tables import cells_of, run

from fedarena.leaderboards.audit_table import audit_cell
from fedarena.leaderboards.build import leaderboard_tables
from fedarena.leaderboards.render import render
from fedarena.leaderboards.specs import PRIVACY_AUDIT, SPECS, build_table

SPEC = {s.name: s for s in SPECS}[PRIVACY_AUDIT]


def audited_run(seed, *, flagged=0.0, equal=4.0, fitted=5.5, canaries=100.0, method="global"):
    return run("mnist_5k", method, "clean", 0.0, seed, 0.45, 0.05, privacy_label="audit_eps10",
               cell_hash=f"mnist_5k/{method}/audit_eps10", epsilon=10.0, delta=1e-5, noise_multiplier=5.8,
               epsilon_add_remove=4.096, epsilon_add_remove_rdp=4.427, audit_canaries=canaries, audit_confidence=0.99,
               epsilon_equal_variance_final=equal, epsilon_equal_variance_final_low=equal - 1.0,
               epsilon_equal_variance_final_high=equal + 1.0,
               epsilon_empirical_final=fitted, epsilon_empirical_final_low=fitted - 2.0,
               epsilon_empirical_final_high=fitted + 3.0,
               epsilon_empirical_iterates=2.7, epsilon_empirical_iterates_low=1.5, epsilon_empirical_iterates_high=4.0,
               epsilon_lower_bound_final=1.0 + seed / 10, epsilon_lower_bound_iterates=0.1, audit_exceeded=flagged)


RUNS = [audited_run(0), audited_run(1, flagged=1.0, equal=5.0), audited_run(2, equal=3.0)]


def columns(rows=RUNS, ci=False):
    (block,) = build_table(cells_of(rows, ci=ci), SPEC).blocks
    return dict(zip(block.header, (cell.text for cell in block.rows[0]), strict=True))


def test_the_claim_is_the_exact_add_remove_epsilon_beside_rdps():
    assert columns()["claimed ε add/remove: exact / RDP"] == "4.10 / 4.43"


def test_each_estimate_carries_its_interval_and_k():
    shown = columns()
    assert shown["ε̂ equal-variance (final) [interval] K"] == "4.00 [99%: 3.00, 5.00] K=100"  # means over the 3 seeds
    assert shown["ε̂ fitted (final) [interval] K"] == "5.50 [99%: 3.50, 8.50] K=100"
    assert shown["ε̂ fitted (all iterates) [interval] K"] == "2.70 [99%: 1.50, 4.00] K=100"


def test_the_spread_over_seeds_is_shown_beside_one_runs_interval():
    shown = columns(ci=True)["ε̂ equal-variance (final) [interval] K"]
    assert shown.startswith("4.00±2.5 [99%: 3.00, 5.00] K=100")  # t(0.975, 2) x sd 1 / sqrt(3)


def test_the_evidence_is_the_lower_bounds_and_the_seeds_flagged():
    # the equal-variance lower ends' mean 3; the thresholded bounds' larger mean (final: 1.1 > iterates 0.1)
    assert columns()["lower bounds: equal-var. / thresholded · flagged"] == "3.00 / 1.10 · flagged 1 of 3"
    unflagged = [audited_run(s) for s in range(3)]
    assert columns(unflagged)["lower bounds: equal-var. / thresholded · flagged"].endswith("flagged 0 of 3")


def test_k_follows_the_runs():
    assert columns([audited_run(s, canaries=1000.0) for s in range(2)])["ε̂ fitted (final) [interval] K"].endswith(
        "K=1000")


def test_a_run_without_an_interval_shows_the_estimate_alone():
    rows = [{**audited_run(0), "epsilon_empirical_final_low": math.nan, "epsilon_empirical_final_high": math.nan}]
    assert columns(rows)["ε̂ fitted (final) [interval] K"] == "5.50 K=100"


def test_other_metrics_are_not_audit_cells():
    row = cells_of(RUNS).iloc[0]
    assert audit_cell(row, "acc_pooled") is None and audit_cell(row, "epsilon") is None


def test_the_notes_say_what_each_cell_measures_and_what_sits_beside_it():
    tables, _, _ = leaderboard_tables(pd.DataFrame(RUNS))
    table = {t.name: t for t in tables}[PRIVACY_AUDIT]
    notes = " ".join(table.footnotes)
    for words in ("exact add/remove ε", "dp-accounting's PLD", "RDP's looser bound", "one run's interval",
                  "K the canaries", "biased up at small δ", "Evidence: the lower bounds", "in how many seeds",
                  "its accuracy is not the unaudited row's", "mnist_5k, audit_eps10: 100 canaries, 3 run(s)",
                  "at most 2 (1 - confidence) by the union bound", "independent trials", "in about 70% at 1.28"):
        assert words in notes, words
    assert "K=100" in render(table, "markdown")


def test_a_seed_without_a_flag_is_not_counted_as_flagged_or_unflagged():
    # seeds 0 and 1 measured (one flagged), seed 2 measured nothing (its model diverged: no flag, NaN): the mean
    # over the measured seeds is .5, which times all 3 seeds would read "flagged 2 of 3"
    rows = [audited_run(0, flagged=1.0), audited_run(1), {**audited_run(2), "audit_exceeded": math.nan}]
    assert columns(rows)["lower bounds: equal-var. / thresholded · flagged"].endswith("flagged 1 of 2 measured (3 seeds)")
    rows = [audited_run(0, flagged=1.0), audited_run(1), audited_run(2), audited_run(3, flagged=1.0),
            {**audited_run(4), "audit_exceeded": math.nan}]
    assert columns(rows)["lower bounds: equal-var. / thresholded · flagged"].endswith("flagged 2 of 4 measured (5 seeds)")


def test_an_infinite_estimate_is_shown_as_infinite_not_as_missing():
    # a mechanism that leaks without bound (e.g. noise far below its claim): the estimate and its upper end are
    # infinite in a seed, and the cell says so instead of the missing mark
    rows = [{**audited_run(0), "epsilon_equal_variance_final": math.inf, "epsilon_equal_variance_final_high": math.inf},
            audited_run(1)]
    assert columns(rows)["ε̂ equal-variance (final) [interval] K"] == "∞ [99%: 3.00, ∞] K=100"
