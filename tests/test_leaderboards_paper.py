"""The published numbers shipped with the package and the reproduction view."""

import filecmp
from pathlib import Path

import pandas as pd
import pytest

from fedarena.leaderboards.cells import aggregate, normalize
from fedarena.leaderboards.paper import load_paper_tables, reproduction, reproduction_table
from fedarena.suites.published import paper_dir

SHARED = Path(__file__).resolve().parents[2] / "shared" / "reference" / "paper_tables"


def cells(*rows):
    base = dict(status="FINISHED", seed="0", dataset_fingerprint="fp", git_sha="sha")
    frame = pd.DataFrame([{**base, "run_id": f"r{i}", "cell_hash": f"h{i}", **r} for i, r in enumerate(rows)])
    return aggregate(normalize(frame))


def cell(dataset, method, attack, level, acc, std, **more):
    return dict(
        dataset_label=dataset,
        method_label=method,
        attack_label=attack,
        level=level,
        acc_pooled=acc,
        acc_std=std,
        **more,
    )


@pytest.mark.skipif(not SHARED.is_dir(), reason="the shared reference folder is not beside the checkout")
def test_packaged_csvs_are_a_copy_of_the_reference():
    names = sorted(p.name for p in SHARED.glob("*.csv"))
    assert sorted(p.name for p in paper_dir().glob("*.csv")) == names
    assert all(filecmp.cmp(SHARED / n, paper_dir() / n, shallow=False) for n in names)


def test_paper_cell_lists_every_table_that_prints_it():
    paper = load_paper_tables()
    hit = paper[
        (paper.dataset_label == "fmnist") & (paper.method_label == "global")
        & (paper.attack_label == "a1") & (paper.level == 0.5)
    ]  # fmt: skip
    assert hit.set_index("metric")[["paper_value", "tables"]].to_dict("index") == {
        "acc_pooled": {"paper_value": 0.855, "tables": "1, 9"},
        "acc_std": {"paper_value": 0.10, "tables": "1, 9"},
    }


def test_reproduction_view_on_a_known_paper_cell():
    ours = cells(
        cell("fmnist", "global", "a1", "0.5", 0.86, 0.12), cell("fmnist", "nobody", "a1", "0.5", 0.5, 0.1)
    )
    view = reproduction(ours)
    assert view[["metric", "tables", "paper_value", "ours", "n_seeds"]].to_dict("records") == [
        {"metric": "acc_pooled", "tables": "1, 9", "paper_value": 0.855, "ours": 0.86, "n_seeds": 1},
        {"metric": "acc_std", "tables": "1, 9", "paper_value": 0.10, "ours": 0.12, "n_seeds": 1},
    ]
    assert view["diff"].tolist() == pytest.approx([0.005, 0.02])


def test_tables_that_disagree_get_one_row_per_printed_value():
    view = reproduction(cells(cell("femnist", "global", "a3", "0.2", 0.40, 0.13)))
    accs = view[view.metric == "acc_pooled"]
    assert accs[["tables", "paper_value"]].to_dict("records") == [
        {"tables": "1", "paper_value": 0.314},
        {"tables": "3, 6, 8", "paper_value": 0.364},
    ]
    assert view.loc[view.metric == "acc_std", "tables"].tolist() == ["1, 6, 8"]


def test_method_aliases_and_fedtilt_percent_at_any_level():
    ours = cells(
        cell("femnist", "finetuning", "clean", "0.0", 0.80, 0.09),
        cell("mnist", "fedtilt", "persistent_random_corruption", "0.3", 0.9846, 0.0150, class_std_mean=0.03, class_std_std=0.0336),
    )  # fmt: skip
    view = reproduction(ours).set_index(["method_label", "metric"])
    assert view.loc[("finetuning", "acc_pooled"), "tables"] == "2, 8"
    assert view.loc[("finetuning", "acc_pooled"), "diff"] == pytest.approx(-0.015)
    tilt = view.loc["fedtilt"]
    assert tilt["tables"].unique().tolist() == ["3, 6"] and tilt["level"].unique().tolist() == [0.3]
    assert tilt["diff"].to_dict() == pytest.approx(
        {"acc_pooled": 0.0, "acc_std": 0.0, "class_std_mean": 0.21, "class_std_std": 0.0}
    )


def test_reproduction_table_shows_mixed_cells_without_numbers():
    frame = pd.DataFrame(
        [
            {**cell("fmnist", "global", "clean", "0.0", 0.91, 0.08), "seed": s, "component_versions": v,
             "status": "FINISHED", "cell_hash": "h", "dataset_fingerprint": "fp", "run_id": f"r{s}"}
            for s, v in (("0", '{"engine": 1}'), ("1", '{"engine": 2}'))
        ]
    )  # fmt: skip
    table = reproduction_table(aggregate(normalize(frame)))
    (block,) = table.blocks
    assert block.title == "ditto (unit: fraction)"
    assert [c.text for c in block.rows[0]] == [
        "fmnist",
        "global",
        "clean",
        "acc_pooled",
        "1, 9",
        "0.911",
        "mixed",
        "–",
        "2",
    ]
    assert "mixed: component versions engine 1, 2" in table.footnotes


def test_no_matching_cell_gives_no_reproduction_table():
    assert reproduction_table(cells(cell("digits", "global", "clean", "0.0", 0.9, 0.1))) is None


def test_stand_in_datasets_are_never_compared_with_the_paper():
    # digits labelled fmnist (the quick scale's stand-in) is not the paper's experiment; fmnist is
    ours = cells(
        {**cell("fmnist", "global", "a1", "0.5", 0.86, 0.12), "dataset.name": "digits"},
        {**cell("fmnist", "local", "a1", "0.5", 0.87, 0.11), "dataset.name": "fmnist"},
    )
    view = reproduction(ours)
    assert set(view["method_label"]) == {"local"}


def test_runs_recorded_under_another_datasets_label_are_shown_under_the_dataset_run():
    # Prepare: digits labelled fmnist (how older versions labelled the quick scale), and a real mnist run
    from fedarena.leaderboards.build import prepare_runs

    base = dict(status="FINISHED", seed="0", dataset_fingerprint="fp", git_sha="sha")
    runs = pd.DataFrame([{**base, **cell("fmnist", "global", "clean", "0.0", 0.9, 0.1), "dataset.name": "digits",
                          "cell_hash": "h1"},
                         {**base, **cell("mnist", "global", "clean", "0.0", 0.9, 0.1), "dataset.name": "mnist",
                          "cell_hash": "h2"}])
    # Execute
    prepared, notes = prepare_runs(runs)
    # Assert
    assert sorted(prepared["dataset_label"]) == ["digits", "mnist"]
    assert notes == ["1 run(s) recorded under the label fmnist ran digits: shown as digits."]
