"""Privacy in the leaderboards: every table, figure and caption that shows an epsilon (or a privacy label that
names one, ``eps10``) shows the delta it is at."""

import math

import pandas as pd
import pytest
from test_leaderboards_tables import cells_of, run

from fedarena.leaderboards.build import leaderboard_tables
from fedarena.leaderboards.privacy_figure import epsilon_axis
from fedarena.leaderboards.render import render
from fedarena.leaderboards.specs import PRIVACY, SPECS, TableSpec, build_table
from fedarena.leaderboards.tables import delta_text
from fedarena.report.page import CAPTIONS

SPEC = {s.name: s for s in SPECS}


def private_run(method, privacy, seed, acc, *, epsilon, delta, z, dataset="digits", attack="clean", level=0.0):
    extra = {} if privacy == "none" else {"epsilon": epsilon, "delta": delta, "noise_multiplier": z}
    return run(dataset, method, attack, level, seed, acc, 0.05, privacy_label=privacy,
               cell_hash=f"{dataset}/{method}/{attack}/{level}/{privacy}", **extra)


RUNS = [
    *(private_run(m, "none", s, 0.90, epsilon=None, delta=None, z=None) for m in ("global", "ditto") for s in (0, 1)),
    *(private_run(m, "eps10", s, 0.80, epsilon=10.0, delta=1e-5, z=0.9) for m in ("global", "ditto") for s in (0, 1)),
    *(private_run(m, "clip", s, 0.85, epsilon=math.inf, delta=1e-5, z=0.0) for m in ("global", "ditto") for s in (0, 1)),
]


def privacy_table(rows=RUNS):
    tables, _, _ = leaderboard_tables(pd.DataFrame(rows))
    return {t.name: t for t in tables}[PRIVACY]


def test_the_privacy_tables_columns_name_the_delta_of_their_epsilon():
    # Execute
    table = privacy_table()
    # Assert: a private label carries its delta; none (no DP) has none to carry
    (block,) = table.blocks
    assert block.header == ["method", "none", "clip (δ = 1e-05)", "eps10 (δ = 1e-05)"]
    assert "digits, eps10: ε = 10 at δ = 1e-05, noise multiplier 0.9." in table.footnotes
    assert "digits, clip: ε = ∞ at δ = 1e-05, noise multiplier 0." in table.footnotes
    assert "| method | none | clip (δ = 1e-05) | eps10 (δ = 1e-05) |" in render(table, "markdown")


def test_a_label_whose_runs_differ_in_delta_shows_the_range():
    # Prepare: ditto's eps10 runs at delta 1e-6 (the seeds of one cell share their delta: it is in their identity)
    rows = [{**r, "delta": 1e-6} if (r["privacy_label"], r["method_label"]) == ("eps10", "ditto") else r for r in RUNS]
    # Execute
    (block,) = privacy_table(rows).blocks
    # Assert
    assert "eps10 (δ = 1e-06–1e-05)" in block.header


def test_a_table_that_blocks_by_privacy_label_names_the_delta_in_the_block_title():
    # Execute: Ditto's Table 1 layout over cells of several privacy labels: one block per label
    table = build_table(cells_of(RUNS), SPEC["ditto_table1"])
    # Assert
    assert [b.title for b in table.blocks] == ["digits none", "digits clip (δ = 1e-05)", "digits eps10 (δ = 1e-05)"]


def test_an_epsilon_column_shows_its_delta():
    # Prepare: a declared table with the epsilon as a metric column
    spec = TableSpec("eps", "epsilon per method", requires_metric="epsilon", column_by=("metric",),
                     value="metrics", metrics=(("epsilon", "ε"),), bold=None)
    rows = [r for r in RUNS if r["privacy_label"] == "eps10"]
    # Execute
    (block,) = build_table(cells_of(rows), spec).blocks
    # Assert
    assert block.header == ["method", "ε"] and block.rows[0][1].text == "10 (δ = 1e-05)"


def test_the_privacy_figures_axis_and_caption_name_the_delta():
    cells = cells_of(RUNS)
    assert epsilon_axis(cells) == "ε at δ = 1e-05 (privacy spent)"
    assert epsilon_axis(cells[cells["privacy_label"] == "none"]) == "ε (privacy spent)"
    assert "delta" in CAPTIONS["privacy"]


@pytest.mark.parametrize("deltas, text", [([1e-5, 1e-5], "δ = 1e-05"), ([float("nan")], ""), ([], ""),
                                          ([0.0794328, 1e-5], "δ = 1e-05–0.079")])
def test_delta_text(deltas, text):
    assert delta_text(deltas) == text
