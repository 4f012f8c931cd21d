"""The worst case over attacks: per row and level, the attack with the lowest mean accuracy, as a column
with bold and significance like the others, in every format."""

import io

import pandas as pd
from test_leaderboards_render import check_latex_structure
from test_leaderboards_tables import cells_of, run, texts

from fedarena.leaderboards.render import render
from fedarena.leaderboards.specs import SPECS, build_table
from fedarena.leaderboards.tables import MISSING, WORST

SPEC = {s.name: s for s in SPECS}

# Two seeds per cell at 20% (acc_std .1 everywhere). median: A1 .71, min_sum .61, fang .655 -> worst min_sum;
# krum: A1 .56, min_sum .805, fang .795 -> worst A1; bulyan ran A1 only. At 50% only A1 ran.
ACCS = {
    "median": {"a1": (0.70, 0.72), "min_sum": (0.58, 0.64), "fang": (0.65, 0.66)},
    "krum": {"a1": (0.50, 0.62), "min_sum": (0.80, 0.81), "fang": (0.79, 0.80)},
    "bulyan": {"a1": (0.90, 0.90)},
}
RUNS = [run("digits", m, a, 0.2, seed, acc, 0.1) for m, by in ACCS.items() for a, accs in by.items()
        for seed, acc in enumerate(accs)] + [run("digits", m, "a1", 0.5, 0, 0.4, 0.1) for m in ACCS]
# Worst-case scores (mean - std): median .51 (seeds .48, .54), krum .46 (.40, .52): median bold, and Welch's
# t = .05 / sqrt(.0018 / 2 + .0072 / 2) = .75 on 1.47 df: p = .56, not significant: ‡.
MEDIAN_WORST = ".610 (.10) [min_sum]‡"
KRUM_WORST = ".560 (.10) [A1]"


def full_table():
    return build_table(cells_of(RUNS), SPEC["full"])


def test_each_row_gets_the_attack_with_its_lowest_mean():
    # Prepare / Execute
    table = full_table()
    (block,) = table.blocks
    # Assert: one worst-case column, at 20% only (one attack at 50%), last
    assert block.groups == [("A1", 2), ("fang", 1), ("min_sum", 1), ("worst@20%", 1)]
    assert block.header == ["method", "20%", "50%", "20%", "20%", ""]
    assert [row[0] for row in texts(block)] == ["median", "krum", "bulyan"]
    assert [row[-1] for row in texts(block)] == [f"**{MEDIAN_WORST}**", KRUM_WORST, MISSING]


def test_the_worst_case_is_the_worst_attacks_cell_in_the_tidy_numbers():
    # Prepare / Execute
    tidy = full_table().tidy
    worst = tidy[tidy["attack_label"] == WORST].set_index("method_label")
    # Assert: the worst attack's own mean, spread and seeds; bulyan (one attack) has none
    assert sorted(worst.index) == ["krum", "median"]
    assert worst.loc["median", "worst_attack"] == "min_sum" and worst.loc["krum", "worst_attack"] == "a1"
    assert worst["acc_pooled"].round(3).to_dict() == {"median": 0.61, "krum": 0.56}
    assert worst["n_seeds"].to_dict() == {"median": 2, "krum": 2}
    at = tidy.set_index(["method_label", "attack_label", "level"])
    assert worst.loc["median", "acc_pooled_minus_std_sd"] == at.loc[("median", "min_sum", 0.2),
                                                                    "acc_pooled_minus_std_sd"]


def test_notes_name_the_attacks_covered_and_the_significance():
    # Prepare / Execute
    notes = full_table().footnotes
    # Assert
    assert "worst@20% on digits: over A1, fang, min_sum." in notes
    assert "worst@20% on digits, bulyan: only A1 ran, no worst case (not run: fang, min_sum)." in notes
    assert "‡ digits worst@20%: median is not significantly better than krum (p = 0.56)." in notes


def test_a_level_with_a_single_attack_gets_no_worst_case():
    # Prepare: A1 at 20% and 50%, nothing else
    rows = [run("digits", m, "a1", lv, 0, acc, 0.1) for m, acc in (("median", 0.7), ("krum", 0.6))
            for lv in (0.2, 0.5)]
    cells = cells_of(rows)
    # Execute
    full = build_table(cells, SPEC["full"])
    # Assert
    assert full.blocks[0].groups == [("A1", 2)]
    assert "worst_attack" not in full.tidy
    assert build_table(cells, SPEC["worst_case"]) is None


def test_a_table_takes_the_worst_over_the_attacks_it_shows():
    # Prepare: Ditto Table 1 shows A1-A3 only; min_sum is worse for global but not in it
    rows = [run("fmnist", "global", a, 0.2, 0, acc, 0.1) for a, acc in (("a1", 0.7), ("a2", 0.6), ("min_sum", 0.2))]
    cells = cells_of(rows)
    # Execute
    table1 = build_table(cells, SPEC["ditto_table1"])
    full = build_table(cells, SPEC["full"])
    # Assert
    assert texts(table1.blocks[0])[0][-1] == "**.600 (.10) [A2]**"
    assert texts(full.blocks[0])[0][-1] == "**.200 (.10) [min_sum]**"


def test_a_mixed_attack_cell_makes_the_worst_case_mixed():
    # Prepare: median's min_sum seeds recorded different component versions
    rows = [run("digits", "median", "a1", 0.2, 0, 0.7, 0.1), run("digits", "median", "fang", 0.2, 0, 0.6, 0.1),
            run("digits", "median", "min_sum", 0.2, 0, 0.5, 0.1),
            run("digits", "median", "min_sum", 0.2, 1, 0.5, 0.1, component_versions='{"aggregator/mean": 2}')]
    # Execute
    table = build_table(cells_of(rows), SPEC["worst_case"])
    # Assert
    assert texts(table.blocks[0]) == [["median", "mixed [min_sum]"]]
    assert ("mixed at digits / median / worst@20%: runs not averaged, they differ in component versions "
            "aggregator/mean 1, 2 (under min_sum).") in table.footnotes


def test_the_worst_case_table_holds_only_the_worst_case_columns():
    # Prepare / Execute
    table = build_table(cells_of(RUNS), SPEC["worst_case"])
    (block,) = table.blocks
    # Assert
    assert block.groups == [("worst@20%", 1)]
    assert texts(block) == [["median", f"**{MEDIAN_WORST}**"], ["krum", KRUM_WORST]]
    assert set(table.tidy["attack_label"]) == {WORST}


def test_the_column_renders_in_markdown_latex_html_and_csv():
    # Prepare
    table = full_table()
    # Execute
    md, tex, page = render(table, "markdown"), render(table, "latex"), render(table, "html")
    back = pd.read_csv(io.StringIO(render(table, "csv")))
    # Assert
    assert "| method | A1 20% | A1 50% | fang 20% | min_sum 20% | worst@20% |" in md
    assert f"| krum | .560 (.10) | **.400 (.10)** | **.795 (.10)** | **.805 (.10)‡** | {KRUM_WORST} |" in md
    assert r"\multicolumn{1}{c}{worst@20\%} \\" in tex
    assert r"\textbf{.610 (.10) [min\_sum]$^\ddagger$}" in tex
    check_latex_structure(tex)
    assert '<th colspan="1">worst@20%</th>' in page
    assert f"<td><b>{MEDIAN_WORST}</b></td>" in page and f"<td>{KRUM_WORST}</td>" in page
    worst = back[back["attack_label"] == WORST]
    assert worst[["method_label", "level", "worst_attack"]].values.tolist() == [["median", 0.2, "min_sum"],
                                                                              ["krum", 0.2, "a1"]]
