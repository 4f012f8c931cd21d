"""Leaderboard tables from hand-made runs frames: pivots, bold rule, missing cells, seeds, provenance."""

import math
from pathlib import Path

import pandas as pd
import pytest

import fedarena.leaderboards as package
from fedarena.leaderboards.build import leaderboard_tables, prepare_runs
from fedarena.leaderboards.cells import aggregate, normalize, t_halfwidth
from fedarena.leaderboards.declared import TABLES
from fedarena.leaderboards.specs import SPECS, build_table
from fedarena.leaderboards.tables import MISSING

SPEC = {s.name: s for s in SPECS}


def run(dataset, method, attack, level, seed, acc, std, **extra):
    """One finished run as the reader returns it (strings where MLflow stores strings)."""
    row = dict(
        run_id=f"{dataset}-{method}-{attack}-{level}-{seed}-{extra.get('start_time', 0)}",
        status="FINISHED", start_time=0, dataset_label=dataset, method_label=method, attack_label=attack,
        level=str(level), seed=str(seed), cell_hash=f"{dataset}/{method}/{attack}/{level}",
        dataset_fingerprint="fp-a", git_sha="sha-a", component_versions='{"aggregator/mean": 1}', scale="quick",
        diverged="false", acc_pooled=acc, acc_std=std,
    )  # fmt: skip
    row.update(extra)
    return row


def cells_of(rows, ci=False):
    prepared, _ = prepare_runs(pd.DataFrame(rows))
    return aggregate(prepared, ci=ci)


def texts(block):
    return [[("**" + c.text + "**") if c.bold else c.text for c in row] for row in block.rows]


TABLE1_RUNS = [
    run("fmnist", "global", "clean", 0.0, 0, 0.90, 0.08),
    run("fmnist", "global", "clean", 0.0, 1, 0.92, 0.10),
    run("fmnist", "global", "a1", 0.5, 0, 0.80, 0.10),
    run("fmnist", "ditto", "clean", 0.0, 0, 0.95, 0.05),
    run("fmnist", "ditto", "a1", 0.5, 0, 0.85, 0.20),
    run("fmnist", "local", "a1", 0.2, 0, 0.70, 0.10),
    run("fmnist", "krum", "a1", 0.5, 0, 0.99, 0.01),
    run("femnist", "global", "clean", 0.0, 0, 0.80, 0.11),
]


def test_table1_pivot_bold_and_missing_cells():
    table = build_table(cells_of(TABLE1_RUNS), SPEC["ditto_table1"])
    fmnist, femnist = table.blocks
    assert fmnist.title == "fmnist" and femnist.title == "femnist"
    assert fmnist.groups == [("clean", 1), ("A1", 2)]
    assert fmnist.header == ["method", "", "20%", "50%"]
    # A1 50%: ditto has the higher mean, global the higher mean - std (.70 > .65): global is bold.
    assert texts(fmnist) == [
        ["global", ".910 (.09)", MISSING, "**.800 (.10)**"],
        ["local", MISSING, "**.700 (.10)**", MISSING],
        ["ditto", "**.950 (.05)**", MISSING, ".850 (.20)"],
    ]
    assert texts(femnist) == [["global", "**.800 (.11)**"]]
    assert "Each cell is the mean over 1-2 seed(s)." in table.footnotes


def test_seeds_are_averaged_with_a_t_interval():
    rows = [run("fmnist", "global", "a1", 0.5, s, acc, 0.1) for s, acc in enumerate((0.80, 0.82, 0.87))]
    cells = cells_of(rows, ci=True)
    # sd = sqrt(0.0013) over 3 seeds; t(0.975, df=2) = 4.302653
    assert cells["n_seeds"].tolist() == [3]
    assert cells["acc_pooled"].iloc[0] == pytest.approx(0.83)
    assert cells["acc_pooled_ci"].iloc[0] == pytest.approx(
        4.302653 * math.sqrt(0.0013) / math.sqrt(3), rel=1e-5
    )
    table = build_table(cells, SPEC["full"])
    assert texts(table.blocks[0]) == [["global", "**.830±.090 (.10)**"]]


def test_cells_do_not_depend_on_the_order_the_store_returns_runs_in():
    # Prepare: seeds whose float sum depends on the order it is taken in (0.1 + 0.2 + 0.3 != 0.3 + 0.2 + 0.1)
    rows = [run("fmnist", m, "a1", 0.5, s, acc, 0.1) for m in ("global", "krum") for s, acc in
            enumerate((0.1, 0.2, 0.3))]
    # Execute
    forward, backward = cells_of(rows), cells_of(rows[::-1])
    # Assert: bit for bit the same cells, in the same order
    pd.testing.assert_frame_equal(forward.reset_index(drop=True), backward.reset_index(drop=True), check_exact=True)
    assert (0.1 + 0.2) + 0.3 != (0.3 + 0.2) + 0.1


def test_t_halfwidth_needs_two_values():
    assert math.isnan(t_halfwidth([0.5]))
    assert t_halfwidth([0.4, 0.6]) == pytest.approx(12.706205 * math.sqrt(0.02) / math.sqrt(2), rel=1e-6)


@pytest.mark.parametrize(
    ("key", "other", "words"),
    [
        ("dataset_fingerprint", "fp-b", "dataset fingerprints fp-a, fp-b"),
        ("component_versions", '{"aggregator/mean": 2}', "component versions aggregator/mean 1, 2"),
    ],
)
def test_runs_with_different_provenance_are_not_averaged(key, other, words):
    rows = [
        run("fmnist", "global", "clean", 0.0, 0, 0.90, 0.08),
        run("fmnist", "global", "clean", 0.0, 1, 0.50, 0.30, **{key: other}),
        run("fmnist", "ditto", "clean", 0.0, 0, 0.70, 0.20),
    ]
    table = build_table(cells_of(rows), SPEC["ditto_table1"])
    # the mixed cell is shown as such and cannot win the column: ditto (the only comparable cell) is bold
    assert texts(table.blocks[0]) == [["global", "mixed"], ["ditto", "**.700 (.20)**"]]
    assert f"mixed at fmnist / global / clean: runs not averaged, they differ in {words}." in table.footnotes


@pytest.mark.parametrize(("data_seed", "mixed"), [("None", False), ("7", True)])
def test_fingerprints_must_agree_among_runs_on_one_partition(data_seed, mixed):
    # data_seed unset: the partition follows the seed, so seeds legitimately see different data
    rows = [
        run("fmnist", "global", "clean", 0.0, 0, 0.90, 0.08, data_seed=data_seed),
        run("fmnist", "global", "clean", 0.0, 1, 0.80, 0.10, data_seed=data_seed, dataset_fingerprint="fp-b"),
    ]
    cells = cells_of(rows)
    assert cells["mixed"].tolist() == [mixed]
    assert cells["note"].iloc[0] == ("dataset fingerprints fp-a, fp-b" if mixed else "")
    assert (
        math.isnan(cells["acc_pooled"].iloc[0])
        if mixed
        else cells["acc_pooled"].iloc[0] == pytest.approx(0.85)
    )


def test_the_aggregate_never_averages_two_configs_at_one_position():
    # (the tables first keep the newest configuration of a position: prepare_runs, tested below)
    rows = [
        run("fmnist", "global", "clean", 0.0, 0, 0.90, 0.08, cell_hash="h1"),
        run("fmnist", "global", "clean", 0.0, 0, 0.80, 0.08, cell_hash="h2"),
    ]
    cells = aggregate(normalize(pd.DataFrame(rows)), ci=False)
    assert cells["mixed"].tolist() == [True] and cells["note"].iloc[0] == "configs (cell_hash) h1, h2"
    assert math.isnan(cells["acc_pooled"].iloc[0])


def test_unfinished_runs_other_scales_and_reruns_are_left_out_and_counted():
    rows = [
        run("fmnist", "global", "clean", 0.0, 0, 0.50, 0.08, start_time=1),
        run("fmnist", "global", "clean", 0.0, 0, 0.90, 0.08, start_time=2),  # re-run supersedes
        run("fmnist", "global", "clean", 0.0, 1, 0.10, 0.08, status="RUNNING"),
        run("fmnist", "global", "clean", 0.0, 2, 0.10, 0.08, status="FAILED"),
        run("fmnist", "global", "clean", 0.0, 3, 0.10, 0.08, scale="smoke"),
    ]
    prepared, notes = prepare_runs(pd.DataFrame(rows))
    assert prepared["acc_pooled"].tolist() == [0.90]
    assert notes == [
        "Scale: quick.",
        "1 run(s) still in progress are left out.",
        "1 failed or interrupted run(s) are left out.",
        "1 run(s) at other scales than 'quick' are left out.",
        "1 earlier run(s) of a cell and seed were superseded by a re-run.",
    ]


def test_a_position_shows_the_cell_its_suite_ran_last_not_a_mix_of_two_configurations():
    # Prepare: the suite's entry for global/clean changed (another cell_hash) after two seeds had run
    rows = [
        run("fmnist", "global", "clean", 0.0, 0, 0.50, 0.08, start_time=1, cell_hash="old"),
        run("fmnist", "global", "clean", 0.0, 1, 0.52, 0.08, start_time=2, cell_hash="old"),
        run("fmnist", "global", "clean", 0.0, 0, 0.90, 0.08, start_time=3, cell_hash="new"),
        run("fmnist", "ditto", "clean", 0.0, 0, 0.70, 0.08, start_time=0),
    ]
    # Execute
    prepared, notes = prepare_runs(pd.DataFrame(rows))
    # Assert: the newer configuration alone (one seed), the two older runs counted
    assert sorted(prepared["acc_pooled"].tolist()) == [0.70, 0.90]
    assert "2 run(s) of an earlier configuration of a table position were superseded by the suite's later one." in notes


def test_labels_fall_back_to_params_and_diverged_runs_are_marked():
    row = run("x", "x", "x", 0.0, 0, 0.60, 0.10, diverged="true")
    for key in ("dataset_label", "method_label", "attack_label", "level"):
        del row[key]
    row.update(
        {"dataset.name": "digits", "method.name": "global", "attack.name": "none", "attack.level": "0.0"}
    )
    table = build_table(cells_of([row]), SPEC["full"])
    assert table.blocks[0].title == "digits"
    assert texts(table.blocks[0]) == [["global", "**.600 (.10)†**"]]
    assert "†: at least one seed diverged." in table.footnotes


def test_table2_puts_datasets_in_columns_and_needs_a_personalization_baseline():
    rows = [
        run(ds, m, a, lv, 0, acc, 0.1)
        for ds, base in (("femnist", 0.80), ("celeba", 0.90))
        for m, shift in (("global", 0.0), ("ewc", 0.01))
        for a, lv, drop in (("clean", 0.0, 0.0), ("a1", 0.5, 0.2))
        for acc in [round(base + shift - drop, 3)]
    ]
    table = build_table(cells_of(rows), SPEC["ditto_table2"])
    (block,) = table.blocks
    assert block.groups == [("clean", 2), ("A1 50%", 2)]
    assert block.header == ["method", "femnist", "celeba", "femnist", "celeba"]
    assert texts(block) == [
        ["global", ".800 (.10)", ".900 (.10)", ".600 (.10)", ".700 (.10)"],
        ["ewc", "**.810 (.10)**", "**.910 (.10)**", "**.610 (.10)**", "**.710 (.10)**"],
    ]
    assert (
        build_table(cells_of([r for r in rows if r["method_label"] == "global"]), SPEC["ditto_table2"])
        is None
    )


def test_table3_shows_means_only_and_table5_orders_lambdas():
    rows = [
        run("femnist", "ditto_clipping", "a1", 0.2, 0, 0.810, 0.3),
        run("femnist", "ditto", "a1", 0.2, 0, 0.803, 0.01),
        run("femnist", "ditto_lam1", "a1", 0.2, 0, 0.70, 0.1),
        run("femnist", "ditto_lam0.1", "a1", 0.2, 0, 0.71, 0.1),
        run("femnist", "ditto_best_lam", "a1", 0.2, 0, 0.72, 0.1),
    ]
    cells = cells_of(rows)
    table3 = build_table(cells, SPEC["ditto_table3"])
    assert texts(table3.blocks[0]) == [["ditto", ".803"], ["ditto_clipping", "**.810**"]]
    table5 = build_table(cells, SPEC["ditto_table5"])
    assert [r[0].text for r in table5.blocks[0].rows] == [
        "ditto",
        "ditto_lam0.1",
        "ditto_lam1",
        "ditto_best_lam",
    ]


def test_fedtilt_table_in_percent_bolds_by_metric_direction():
    metrics = dict(class_std_mean=0.0684, class_std_std=0.0200)
    rows = [
        run("mnist", "fedavg", "clean", 0.0, 0, 0.9569, 0.0291, **metrics),
        run("mnist", "fedtilt", "clean", 0.0, 0, 0.9853, 0.0167, class_std_mean=0.0433, class_std_std=0.0333),
    ]
    table = build_table(cells_of(rows), SPEC["fedtilt_table2"])
    (block,) = table.blocks
    assert block.title == "mnist clean"
    assert block.header == ["method", "test acc. (%)", "client σ", "μσ", "σσ"]
    assert texts(block) == [
        ["fedavg", "95.69", "2.91", "6.84", "**2.00**"],
        ["fedtilt", "**98.53**", "**1.67**", "**4.33**", "3.33"],
    ]


def test_leaderboard_tables_writes_only_applicable_tables():
    tables, cells, _ = leaderboard_tables(pd.DataFrame(TABLE1_RUNS))
    assert [t.name for t in tables] == ["ditto_table1", "full", "reproduction"]
    assert len(cells) == 7


def test_the_tables_are_declared_as_data_and_no_label_is_matched_by_a_regular_expression():
    # every table the leaderboards write comes from paper_tables/tables.yaml, and no leaderboards module
    # matches labels against a pattern (membership is a list in that file)
    assert [s.name for s in SPECS] == [t["name"] for t in TABLES]
    sources = "\n".join(p.read_text() for p in Path(package.__file__).parent.glob("*.py"))
    assert "import re\n" not in sources and "fullmatch" not in sources
