"""The costs table (fedarena.leaderboards.costs_table) a suite asks for with ``costs:``, from hand-made frames of runs:
the means over seeds of the runs' cost_* metrics, the missing mark where runs did not record one, one block per
deployment, and no table (nor any other change) for a suite that does not ask."""

import pandas as pd
import pytest
from test_leaderboards_deployment import EXCLUDED, RUNS, UNDEFINED
from test_leaderboards_tables import run, texts

from fedarena.leaderboards.build import leaderboard_tables, suite_costs
from fedarena.leaderboards.render import render
from fedarena.leaderboards.tables import MISSING
from fedarena.report.compose import sections
from fedarena.suites.parse import parse_suite
from fedarena.suites.spec import SuiteError

ASKED = ("server_ms", "attack_ms", "bytes_sent")


def costed(method, attack, level, seed, server_ms, attack_ms, sent=4000.0, **extra):
    """A run of a suite without a deployment axis that recorded what each side pays."""
    return run("digits", method, attack, level, seed, 0.8 + seed / 100, 0.05, cost_server_ms=server_ms,
               cost_attack_ms=attack_ms, cost_bytes_sent=sent, cost_bytes_received=sent - 4, cost_attack_forward=0.0,
               cost_attack_backward=0.0, cost_round_ms=50.0 + seed, **extra)


COSTED = [costed("global", "clean", 0.0, 0, 1.0, 0.0), costed("global", "clean", 0.0, 1, 3.0, 0.0),
          costed("global", "alie", 0.2, 0, 1.5, 10.0), costed("global", "alie", 0.2, 1, 2.5, 30.0),
          costed("krum", "clean", 0.0, 0, 4.0, 0.0, sent=2 * 2**20), costed("krum", "clean", 0.0, 1, 6.0, 0.0,
                                                                           sent=2 * 2**20),
          costed("krum", "alie", 0.2, 0, 5.0, 0.04), costed("krum", "alie", 0.2, 1, 5.0, 0.06)]


def tables(runs, costs=ASKED, excluded=None, ci=False):
    found, cells, _ = leaderboard_tables(pd.DataFrame(runs), ci=ci, costs=costs, excluded=excluded)
    return {t.name: t for t in found}, cells


def rows_of(block):
    return {row[0]: row[1:] for row in texts(block)}


def test_a_suite_that_asks_gets_the_means_over_seeds_of_its_runs_costs():
    # Execute
    found, cells = tables(COSTED)
    # Assert: one block, clean then alie 20%, one sub-column per cost asked in the suite's order
    (block,) = found["costs"].blocks
    assert block.title == "digits"
    assert block.groups == [("clean", 3), ("alie 20%", 3)]
    assert block.header == ["method", *["server ms/round", "attacker ms/round", "bytes sent/round"] * 2]
    rows = rows_of(block)
    assert rows["global"] == ["2.00", "0.00", "3.9 KiB", "2.00", "20.00", "3.9 KiB"]
    assert rows["krum"] == ["5.00", "0.00", "2.0 MiB", "5.00", "0.05", "3.9 KiB"]
    # the cells carry the means; the tidy CSV one row per cell and cost, with its value
    krum = cells[(cells["method_label"] == "krum") & (cells["attack_label"] == "alie")].iloc[0]
    assert krum["cost_attack_ms"] == pytest.approx(0.05) and krum["cost_attack_forward"] == 0.0
    tidy = found["costs"].tidy
    assert tidy["cost"].tolist()[:3] == list(ASKED) and "deployment_label" not in tidy
    value = tidy[(tidy["method_label"] == "global") & (tidy["attack_label"] == "alie") & (tidy["cost"] == "attack_ms")]
    assert value["value"].tolist() == [pytest.approx(20.0)]
    assert "cost_server_ms" in cells and "cost_server_ms" not in found["full"].tidy  # only the costs table shows them
    for fmt in ("markdown", "latex", "csv", "html"):
        assert render(found["costs"], fmt)


def test_a_cost_not_recorded_shows_the_missing_mark_never_zero():
    # Prepare: krum's runs predate the costs (no cost_* column of their own); one global seed lacks its server ms
    older = [run("digits", "krum", attack, level, seed, 0.8, 0.05) for attack, level in (("clean", 0.0), ("alie", 0.2))
             for seed in (0, 1)]
    runs = COSTED[:4] + older
    runs[0] = {**runs[0], "cost_server_ms": None}
    # Execute
    found, cells = tables(runs)
    # Assert: krum's cells have no number of any cost; global's clean server ms is its one recorded seed's
    rows = rows_of(found["costs"].blocks[0])
    assert rows["krum"] == [MISSING] * 6
    assert rows["global"][0] == "3.00"
    assert any(note.startswith(f"{MISSING}: not recorded") for note in found["costs"].footnotes)
    assert cells.loc[cells["method_label"] == "krum", "cost_server_ms"].isna().all()


def test_runs_without_any_cost_column_still_get_the_table_asked_for_with_missing_marks():
    # Prepare: a store of runs made before the cost metrics existed
    runs = [run("digits", "global", "clean", 0.0, seed, 0.8, 0.05) for seed in (0, 1)]
    # Execute
    found, cells = tables(runs, costs=("bytes_received",))
    # Assert
    assert rows_of(found["costs"].blocks[0]) == {"global": [MISSING]}
    assert not any(c.startswith("cost_server") for c in cells.columns)


def test_a_suite_that_does_not_ask_gets_no_costs_table_and_the_other_tables_are_unchanged():
    # Prepare: the same runs, with and without their cost metrics
    bare = [{k: v for k, v in r.items() if not k.startswith("cost_")} for r in COSTED]
    # Execute
    asked, _ = tables(COSTED, ci=True)
    silent, _ = tables(COSTED, costs=(), ci=True)
    before, _ = tables(bare, costs=(), ci=True)
    # Assert: no costs table; every other table renders as it did without cost metrics, in every format
    assert "costs" not in silent and "costs" in asked
    assert set(silent) == set(before) == set(asked) - {"costs"}
    for name in silent:
        for fmt in ("markdown", "csv", "latex"):
            assert render(silent[name], fmt) == render(asked[name], fmt)
            assert render(silent[name], fmt) == render(before[name], fmt)


def test_a_suite_with_a_deployment_axis_gets_one_block_per_deployment_with_exclusions_shown():
    # Prepare: the deployment table's runs, each with a server ms of its own per deployment
    runs = [{**r, "cost_server_ms": 7.0 if r.get("deployment_label") == "fail0.3" else 2.0} for r in RUNS]
    # Execute
    found, _ = tables(runs, costs=("server_ms",), excluded=EXCLUDED)
    # Assert: blocks in the suite's deployment order; f_double's clean cells are the synchronous trials', krum's
    # attacked ones undefined with the reason in a note
    table = found["costs"]
    titles = [b.title for b in table.blocks]
    assert titles[:3] == ["digits synchronous", "digits fail0.3", "digits fail0.6"] and titles[-1] == "digits f_double"
    assert rows_of(table.blocks[1])["global"] == ["7.00", "7.00", "7.00"]
    f_double = rows_of(table.blocks[-1])
    assert f_double["global"] == ["2.00 (= synchronous)", "2.00", "2.00"]
    assert f_double["krum"] == ["2.00 (= synchronous)", "undefined", "undefined"]
    assert any(UNDEFINED in note for note in table.footnotes)
    assert "deployment_label" in table.tidy and "cost_server_ms" not in found["deployment"].tidy  # its own only
    notes = "\n".join(table.footnotes)  # what a cell measures, and the confounders beside it
    assert "ms per round the rule ran (a round skipped for too few reports is not counted" in notes
    assert "Confounders beside the costs of a deployment" in notes and "agg a/T" in notes
    single = tables([r for r in RUNS if "deployment_label" not in r], costs=("server_ms",))[0]["costs"]
    assert "Confounders beside" not in "\n".join(single.footnotes)  # no deployment axis: none to name


def test_the_suite_key_names_costs_and_a_bad_name_is_one_line(tmp_path):
    # Prepare
    base = {"name": "s", "methods": [{"label": "global", "method": {"name": "global"}}],
            "attacks": [{"label": "clean", "attack": {"name": "none"}, "levels": [0.0]}],
            "scales": {"smoke": {"seeds": [0], "datasets": [{"label": "synthetic", "dataset": {"name": "synthetic"}}]}}}
    path = tmp_path / "s.yaml"
    # Execute / Assert
    assert parse_suite({**base, "costs": ["bytes_sent", "server_ms"]}, path).costs == ("bytes_sent", "server_ms")
    assert parse_suite(base, path).costs == ()
    with pytest.raises(SuiteError) as err:
        parse_suite({**base, "costs": ["server_ms", "server_s"]}, path)
    message = str(err.value)
    assert "\n" not in message and message == (
        f"{path}: costs[1]: unknown cost 'server_s'; allowed: server_ms, attack_ms, attack_forward, attack_backward, "
        f"bytes_sent, bytes_received")
    with pytest.raises(SuiteError, match="duplicate costs"):
        parse_suite({**base, "costs": ["server_ms", "server_ms"]}, path)


def test_the_deployment_suite_asks_for_its_costs_and_the_others_do_not():
    assert suite_costs("deployment") == ("server_ms", "attack_ms", "bytes_sent")
    assert suite_costs("robustness") == () and suite_costs("no_such_suite") == ()


def test_the_report_shows_the_costs_table_in_a_section_of_its_own():
    # Prepare
    found, _, prepared = leaderboard_tables(pd.DataFrame(COSTED), ci=False, costs=ASKED)
    # Execute
    shown = {s.anchor: "\n".join(s.lines) for s in sections(found, [], prepared, 0)}
    # Assert
    assert "server ms/round" in shown["costs"] and "server ms/round" not in shown["leaderboards"]


def test_a_cell_of_incomparable_runs_reads_mixed_not_a_mean():
    # Prepare: global's clean seeds ran at other component versions
    runs = [*COSTED[:1], {**COSTED[1], "component_versions": '{"aggregator/mean": 2}'}, *COSTED[2:4]]
    # Execute
    found, _ = tables(runs)
    # Assert
    assert rows_of(found["costs"].blocks[0])["global"][:3] == ["mixed"] * 3


def test_the_notes_measure_the_timer_noise_across_a_rows_attacked_settings():
    # Prepare: global's server step (one mean) timed 1.0 ms under ALIE and 4.0 ms under Min-Max; Krum's 5.0 and 6.0
    runs = COSTED + [costed("global", "min_max", 0.2, seed, 4.0, 12.0) for seed in (0, 1)]
    runs += [costed("krum", "min_max", 0.2, seed, 6.0, 0.1) for seed in (0, 1)]
    runs = [{**r, "cost_server_ms": 1.0} if r["method_label"] == "global" and r["attack_label"] == "alie" else r
            for r in runs]
    # Execute
    notes = "\n".join(tables(runs)[0]["costs"].footnotes)
    # Assert: the largest spread (4.0 / 1.0) and the median row's ((4.0 + 1.2) / 2); clean cells not compared
    assert ("Noise in server ms/round: one row's cells across the attacked settings of a block (the same rule on as "
            "many reports: the attack changes their values, hardly the work) differ by up to 4.0x, 2.6x in the "
            "median row") in notes
    assert "Noise in attacker ms/round" not in notes  # two attacks are two computations
    # one attacked setting: nothing to compare
    assert "Noise in" not in "\n".join(tables(COSTED)[0]["costs"].footnotes)
