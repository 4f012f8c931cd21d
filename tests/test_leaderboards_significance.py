"""Uncertainty over seeds in the tables: confidence intervals by default, seed counts, significance marks."""

import math

import pandas as pd
import pytest

from fedarena.leaderboards.build import leaderboard_tables
from fedarena.leaderboards.significance import Scored, column_verdict, welch_p
from fedarena.leaderboards.specs import SPECS


def run(method, attack, level, seed, acc, std, dataset="digits"):
    return dict(run_id=f"{method}-{attack}-{level}-{seed}", status="FINISHED", start_time=0, dataset_label=dataset,
                method_label=method, attack_label=attack, level=str(level), seed=str(seed),
                cell_hash=f"{method}/{attack}/{level}", dataset_fingerprint="fp", git_sha="sha", scale="quick",
                diverged="false", acc_pooled=acc, acc_std=std, **{"dataset.name": "digits"})


def spec(name):
    return tuple(s for s in SPECS if s.name == name)


def texts(block):
    return [[("**" + c.text + "**") if c.bold else c.text for c in row] for row in block.rows]


# A1 50%: ditto's mean - std per seed is .80, .81, .82 and global's .70, .71, .72: far apart.
# clean: global's is .80, .70, .60 and ditto's .75, .65, .55: means .70 vs .65, sd .10 each, Welch
# t = .05 / sqrt(.01/3 + .01/3) = 0.612 on 4 degrees of freedom, p = 0.573: not significant.
RUNS = [
    *(run("ditto", "a1", 0.5, s, acc, 0.10) for s, acc in enumerate((0.90, 0.91, 0.92))),
    *(run("global", "a1", 0.5, s, acc, 0.10) for s, acc in enumerate((0.80, 0.81, 0.82))),
    *(run("global", "clean", 0.0, s, acc, 0.10) for s, acc in enumerate((0.90, 0.80, 0.70))),
    *(run("ditto", "clean", 0.0, s, acc, 0.10) for s, acc in enumerate((0.85, 0.75, 0.65))),
]


def test_tables_show_a_confidence_interval_and_mark_orderings_that_are_not_significant():
    # Execute
    tables, _, _ = leaderboard_tables(pd.DataFrame(RUNS), specs=spec("ditto_table1"))
    (table,) = [t for t in tables if t.name == "ditto_table1"]
    # Assert: mean ± t(0.975, 2) * sd / sqrt(3) = 4.303 * .1 / 1.732 = .248 (clean), .025 (A1 50%)
    assert table.blocks[0].title == "digits"
    assert texts(table.blocks[0]) == [
        ["global", "**.800±.248 (.10)‡**", ".810±.025 (.10)"],
        ["ditto", ".750±.248 (.10)", "**.910±.025 (.10)**"],
    ]
    assert "‡ digits clean: global is not significantly better than ditto (p = 0.57)." in table.footnotes
    assert not any("A1 50%: ditto is not" in note for note in table.footnotes)
    assert "Each cell is the mean over 3 seed(s)." in table.footnotes


def test_a_cell_over_fewer_seeds_than_the_others_says_how_many():
    # Prepare: ditto's clean cell lost a seed
    rows = [r for r in RUNS if not (r["method_label"] == "ditto" and r["attack_label"] == "clean" and r["seed"] == "2")]
    # Execute
    tables, _, _ = leaderboard_tables(pd.DataFrame(rows), specs=spec("full"))
    # Assert: .85, .75 -> mean .80, t(0.975, 1) * .0707 / 1.414 = 12.706 * .05 = .635
    cells = {row[0].text: row[1].text for row in tables[0].blocks[0].rows}
    assert cells["ditto"] == ".800±.635 (.10) [n=2]"
    assert "[n=k]: a cell over k seeds, fewer than the table's most." in tables[0].footnotes


def test_welch_p_from_summary_statistics():
    # clean column above: p = 0.573 (t = 0.612, df = 4)
    assert welch_p(Scored("a", 0.70, 0.10, 3), Scored("b", 0.65, 0.10, 3)) == pytest.approx(0.5733, abs=1e-3)
    assert math.isnan(welch_p(Scored("a", 0.9, float("nan"), 1), Scored("b", 0.8, 0.1, 3)))
    assert welch_p(Scored("a", 0.9, 0.0, 3), Scored("b", 0.8, 0.0, 3)) == 0.0
    assert welch_p(Scored("a", 0.9, 0.0, 3), Scored("b", 0.9, 0.0, 3)) == 1.0


def test_column_verdict_compares_the_best_with_the_runner_up():
    # Prepare: three entries; the third is far behind and must not be the comparison
    entries = [Scored("c", 0.10, 0.01, 3), Scored("a", 0.81, 0.01, 3), Scored("b", 0.80, 0.01, 3)]
    # Execute
    verdict = column_verdict(entries)
    # Assert: a vs b, t = .01 / sqrt(2 * .0001 / 3) = 1.22, p = 0.29
    assert (verdict.best, verdict.runner_up, verdict.significant) == ("a", "b", False)
    assert verdict.p == pytest.approx(0.288, abs=1e-3)
    assert column_verdict([Scored("a", 0.8, 0.1, 3)]) is None
