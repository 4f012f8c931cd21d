"""A selected method's row (FedMGDA+'s eps chosen on benign validation accuracy) and labels that say what ran."""

import pandas as pd

from fedarena.leaderboards.build import leaderboard_tables
from fedarena.leaderboards.cells import aggregate, normalize
from fedarena.leaderboards.figures import write_figures
from fedarena.leaderboards.selection import select_variants
from fedarena.leaderboards.specs import SPECS


def run(method, attack, level, seed, acc, val, variant="", dataset="digits", label=None):
    row = dict(run_id=f"{method}-{attack}-{level}-{seed}", status="FINISHED", start_time=0,
               dataset_label=label or dataset, method_label=method, attack_label=attack, level=str(level),
               seed=str(seed), cell_hash=f"{method}/{attack}/{level}", dataset_fingerprint="fp", git_sha="sha",
               scale="quick", diverged="false", acc_pooled=acc, acc_std=0.1, val_acc_pooled=val,
               **{"dataset.name": dataset})
    if variant:
        row.update(select_group="fedmgda_plus", select_by="val_acc_pooled", variant=variant)
    return row


# Validation accuracy picks eps=0.5 on clean data and eps=0 under A1 50%, although eps=0.1 has the best
# test accuracy in both columns: selection must not look at test accuracy.
VARIANTS = {  # label: (variant, {setting: (test acc, validation acc)})
    "fedmgda_plus_eps0": ("eps=0", {("clean", 0.0): (0.90, 0.80), ("a1", 0.5): (0.70, 0.75)}),
    "fedmgda_plus_eps0.1": ("eps=0.1", {("clean", 0.0): (0.95, 0.81), ("a1", 0.5): (0.80, 0.60)}),
    "fedmgda_plus_eps0.5": ("eps=0.5", {("clean", 0.0): (0.91, 0.86), ("a1", 0.5): (0.60, 0.70)}),
}
RUNS = [run(label, attack, level, seed, acc, val, variant)
        for label, (variant, cells) in VARIANTS.items() for (attack, level), (acc, val) in cells.items()
        for seed in (0, 1)] + [run("global", a, lv, s, 0.85, 0.85) for a, lv in (("clean", 0.0), ("a1", 0.5))
                               for s in (0, 1)]


def test_the_selected_row_holds_per_column_the_variant_with_the_best_validation_accuracy():
    # Execute
    tables, cells, _ = leaderboard_tables(pd.DataFrame(RUNS), specs=tuple(s for s in SPECS if s.name == "full"))
    # Assert: one fedmgda_plus row (eps=0.5 clean, eps=0 under A1), no variant rows, the choice in a note
    full = next(t for t in tables if t.name == "full")
    rows = {row[0].text: [c.text for c in row[1:]] for row in full.blocks[0].rows}
    assert sorted(rows) == ["fedmgda_plus", "global"]
    assert rows["fedmgda_plus"] == [".910±.000 (.10)", ".700±.000 (.10)"]
    chosen = cells[cells["method_label"] == "fedmgda_plus"].set_index("attack_label")["variant"].to_dict()
    assert chosen == {"clean": "eps=0.5", "a1": "eps=0"}
    assert ("fedmgda_plus on digits: per column, the variant with the highest mean val_acc_pooled: eps=0.5 at "
            "clean; eps=0 at A1 50%.") in full.footnotes


def test_every_variant_is_shown_in_the_selection_table_with_the_chosen_one_bold():
    # Execute
    tables, _, _ = leaderboard_tables(pd.DataFrame(RUNS), specs=())
    # Assert
    (table,) = [t for t in tables if t.name == "selection_fedmgda_plus"]
    bold = {(row[0].text, i) for row in table.blocks[0].rows for i, c in enumerate(row[1:]) if c.bold}
    assert bold == {("fedmgda_plus_eps0.5", 0), ("fedmgda_plus_eps0", 1)}


def test_a_variant_without_the_selection_metric_is_never_chosen():
    # Prepare: only eps=0.1 logged val_acc_pooled under A1
    rows = [{**r, "val_acc_pooled": float("nan")} if r["attack_label"] == "a1" and r["variant"] != "eps=0.1"
            else r for r in RUNS if r.get("variant")]
    # Execute
    cells, variants, _ = select_variants(aggregate(normalize(pd.DataFrame(rows))))
    # Assert
    assert cells.set_index("attack_label")["variant"].to_dict() == {"clean": "eps=0.5", "a1": "eps=0.1"}
    assert len(variants) == 6


def test_digits_runs_recorded_as_fmnist_are_tabulated_and_drawn_as_digits(tmp_path):
    # Prepare: a store written by an older version, digits runs labelled fmnist
    rows = [run("global", a, lv, s, 0.85, 0.85, label="fmnist") for a, lv in (("clean", 0.0), ("a1", 0.5))
            for s in (0, 1)]
    # Execute
    tables, cells, prepared = leaderboard_tables(pd.DataFrame(rows))
    history = pd.DataFrame({"run_id": prepared["run_id"], "step": 10, "value": 0.8})
    paths = write_figures(cells, prepared, history, tmp_path)
    # Assert: the blocks and figure files say digits; nothing is compared with the paper's fmnist numbers
    assert [t.name for t in tables] == ["ditto_table1", "full"]
    assert all(block.title == "digits" for t in tables for block in t.blocks)
    assert sorted(p.name for p in paths) == ["curves_digits.png", "figure3_digits.png", "figure5_digits.png"]
    assert "4 run(s) recorded under the label fmnist ran digits: shown as digits." in tables[0].footnotes
