"""fedarena tune's fairness (issue 58), without Ray: tuned rows are rows of their own (a label with the budget,
never a default row's position); tuning runs on a seed no table reports; every row's objective is over the same
tuning attacks (a row the suite leaves out of one is skipped, with why); a search where no configuration finished
is an error; a tuned row's ``select`` is dropped only where its tuned values apply."""

from types import SimpleNamespace

import pandas as pd
import pytest
import yaml

from fedarena.leaderboards.build import tuned_notes
from fedarena.suites import SUITES
from fedarena.suites.grid import expand
from fedarena.suites.parse import load_suite
from fedarena.suites.tuned import TuneError, read_frozen, tuned_label, tuned_label_of, with_tuned
from fedarena.tuning.search import outcome_of
from fedarena.tuning.targets import Target, targets_of, tuning_battery, tuning_seeds

# Two datasets, a row with a select (fedmgda_plus), a row the suite leaves out of the tuning attack alie (krum) and
# a scale override and subset naming rows by label
SUITE = {
    "name": "fairtune",
    "description": "rows for the tuning fairness tests",
    "methods": [{"label": "fedavg", "method": {"name": "global"}},
                {"label": "krum", "method": {"name": "global"}, "aggregator": {"name": "krum"}},
                {"label": "fedmgda_plus", "method": {"name": "global"}, "aggregator": {"name": "fedmgda_plus"},
                 "select": {"by": "val_acc_pooled", "over": {"aggregator.eps": [0.0, 0.5]}, "scales": ["smoke"]}}],
    "attacks": [{"label": "clean", "attack": {"name": "none"}, "levels": [0.0]},
                {"label": "alie", "attack": {"name": "alie"}, "levels": [0.2]}],
    "exclude": [{"method": "krum", "attack": "alie"}],
    "scales": {"smoke": {"fixed": {"rounds": 2, "eval_every": 2, "clients_per_round": 5, "local_steps": 1,
                                   "batch_size": 16, "lr": 0.2},
                         "datasets": [{"label": "digits", "dataset": {"name": "digits", "num_clients": 10},
                                       "model": {"name": "mlp", "hidden": [16]}},
                                      {"label": "synthetic", "dataset": {"name": "synthetic", "num_clients": 10,
                                                                         "max_samples": 60, "dim": 20}}],
                         "seeds": [0, 1],
                         "methods": ["fedavg", "krum", "fedmgda_plus"],
                         "overrides": [{"when": {"method": "fedavg", "dataset": "digits"}, "set": {"lr": 0.05}}]}},
}


@pytest.fixture()
def suite(tmp_path):
    path = tmp_path / "fairtune.yaml"
    path.write_text(yaml.safe_dump(SUITE, sort_keys=False))
    return load_suite(path)


def frozen(tmp_path, rows: dict, **extra) -> str:
    path = tmp_path / "tuned.yaml"
    path.write_text(yaml.safe_dump({"fedarena_tuned": 1, "suite": "fairtune", "scale": "smoke", "budget": 8,
                                    "rows": rows, **extra}, sort_keys=False))
    return str(path)


def choice(**values) -> dict:
    return {"values": values, "trials": 8, "objective": 0.5, "curve": [0.5] * 8, "key": "k"}


# --- tuned rows are their own rows ---

def test_a_tuned_row_is_a_row_of_its_own_and_leaves_the_default_rows_positions(suite, tmp_path):
    path = frozen(tmp_path, {"fedavg": {"digits": choice(lr=0.31), "synthetic": choice(lr=0.07)}},
                  tuning_seeds=[2])
    default = expand(suite, "smoke")
    tuned = with_tuned(suite, "smoke", path)
    specs = expand(tuned, "smoke")
    # Assert: fedavg's trials run as fedavg+tuned8 with the chosen values (after the scale's override of lr)
    rows = {s.method_label for s in specs}
    assert tuned_label("fedavg", 8) == "fedavg+tuned8" and "fedavg+tuned8" in rows and "fedavg" not in rows
    assert {(s.dataset_label, s.config.lr) for s in specs if s.method_label == "fedavg+tuned8"} == {
        ("digits", 0.31), ("synthetic", 0.07)}
    # no table position of the tuned row is a default row's, and every other row's trials are unchanged
    position = lambda s: (s.dataset_label, s.method_label, s.attack_label, s.level, s.privacy_label)  # noqa: E731
    assert not {position(s) for s in specs if s.method_label == "fedavg+tuned8"} & {position(s) for s in default}
    assert {s.config_hash for s in specs if s.method_label != "fedavg+tuned8"} == {
        s.config_hash for s in default if s.method_label != "fedavg"}
    assert len([s for s in specs if s.method_label == "fedavg+tuned8"]) == len(
        [s for s in default if s.method_label == "fedavg"])
    assert tuned.tags["tuned_rows"] == "fedavg+tuned8" and tuned.tags["tuned_budget"] == "8"
    assert tuned.tags["tuned_seeds"] == "2"
    assert tuned_label_of(tuned, "fedavg") == "fedavg+tuned8" and tuned_label_of(tuned, "krum") == "krum"


def test_rules_and_scale_subsets_naming_a_row_name_its_tuned_row(suite, tmp_path):
    path = frozen(tmp_path, {"krum": {"digits": choice(lr=0.2), "synthetic": choice(lr=0.3)}})
    specs = expand(with_tuned(suite, "smoke", path), "smoke")
    # Assert: the suite's exclude of krum under alie holds for krum+tuned8 (and the scale's methods list keeps it)
    assert {s.attack_label for s in specs if s.method_label == "krum+tuned8"} == {"clean"}
    assert len([s for s in specs if s.method_label == "krum+tuned8"]) == 4  # 2 datasets x 2 seeds


def test_a_tuned_rows_select_is_dropped_only_where_its_tuned_values_apply(suite, tmp_path):
    # fedmgda_plus tuned on digits only (the tuner skipped synthetic)
    path = frozen(tmp_path, {"fedmgda_plus": {"digits": choice(**{"aggregator.eps": 0.3, "lr": 0.1})}},
                  skipped={"fedmgda_plus synthetic": "the suite leaves out tuning attack alie"})
    specs = expand(with_tuned(suite, "smoke", path), "smoke")
    rows = {(s.dataset_label, s.method_label, s.select_group) for s in specs if "fedmgda_plus" in s.method_label}
    # Assert: on digits the tuned row with its values and no variants; on synthetic the row as written, its grid
    assert rows == {("digits", "fedmgda_plus+tuned8", ""), ("synthetic", "fedmgda_plus_eps0", "fedmgda_plus"),
                    ("synthetic", "fedmgda_plus_eps0.5", "fedmgda_plus")}
    tuned = [s for s in specs if s.method_label == "fedmgda_plus+tuned8"]
    assert {(s.config.aggregator["eps"], s.config.lr) for s in tuned} == {(0.3, 0.1)}


def test_a_frozen_file_without_tuning_seeds_still_reads_and_a_bad_one_is_refused(suite, tmp_path):
    path = frozen(tmp_path, {"fedavg": {"digits": choice(lr=0.31)}})
    assert "tuning_seeds" not in read_frozen(path)
    assert "tuned_seeds" not in with_tuned(suite, "smoke", path).tags
    bad = frozen(tmp_path, {"fedavg": {"digits": choice(lr=0.31)}}, tuning_seeds="three")
    with pytest.raises(TuneError, match="tuning_seeds is a list of whole numbers"):
        read_frozen(bad)


def test_the_tables_note_names_the_tuned_rows_and_the_seed_they_were_tuned_on():
    runs = pd.DataFrame({"method_label": ["krum+tuned8", "median", "ditto+tuned8", "krum"],
                         "tuned_budget": ["8", "8", "8", None], "tuned_rows": ["krum+tuned8,ditto+tuned8"] * 3 + [None],
                         "tuned_seeds": ["3", "3", "3", None]})
    notes = tuned_notes(runs)
    assert len(notes) == 1 and "8 configurations each" in notes[0] and "on seed 3, none of the reported seeds" in notes[0]
    assert "ditto+tuned8, krum+tuned8;" in notes[0]
    shown = tuned_notes(runs.assign(seed=["0", "3", "1", "3"]))  # the tuning seed reported too (--seeds 0,1,2,3)
    assert len(shown) == 1 and "on seed(s) 3, also reported here (3)" in shown[0]
    older = tuned_notes(runs.drop(columns=["tuned_seeds"]))  # runs of a file from before tuning_seeds
    assert len(older) == 1 and "on the scale's first seed, one of the reported seeds" in older[0]


# --- tuning on seeds never reported ---

def test_tuning_seeds_and_every_scales_reported_seeds_are_disjoint():
    for name in SUITES.names():
        suite = load_suite(name)
        reported = {seed for scale in suite.scales.values() for seed in scale.seeds}
        assert not set(tuning_seeds(suite)) & reported, name
    targets, _ = targets_of(load_suite("robustness"), "quick", rows=("krum", "median"))
    seeds = {run["seed"] for target in targets for _, run in target.runs}
    assert seeds == set(tuning_seeds(load_suite("robustness"))) == {3}


# --- the same objective for every row ---

def test_a_row_the_suite_leaves_out_of_a_tuning_attack_is_skipped_not_tuned_on_fewer(suite):
    targets, skipped = targets_of(suite, "smoke")
    _, attacks, _ = tuning_battery()
    # Assert: every target runs every tuning attack; krum (no alie) is reported on both datasets, with why
    assert {t.row for t in targets} == {"fedavg", "fedmgda_plus"}
    assert all([a for a, _ in t.runs] == [a.label for a in attacks] for t in targets)
    assert set(skipped) == {"krum digits", "krum synthetic"}
    assert all("alie" in why and "not tuned on fewer attacks" in why for why in skipped.values())


def _result(trial: str, progress: int, objective: float, lr: float):
    return SimpleNamespace(metrics={"trial_id": trial, "attacks_done": progress, "objective": objective},
                           config={"lr": lr}, error=None)


def test_a_search_where_no_configuration_finished_the_battery_is_an_error():
    target = Target("krum", "digits", {"lr": None}, tuple((a, {}) for a in ("a1", "a2", "alie", "min_max")))
    grid = [_result("t1", 2, 0.6, 0.1), _result("t2", 1, 0.7, 0.2)]  # ASHA stopped both, or they failed
    with pytest.raises(TuneError, match="krum digits: no configuration finished the tuning battery"):
        outcome_of(grid, target, "key")
    # one that finished is chosen, over an unfinished one with a higher (partial) worst case
    outcome = outcome_of([*grid, _result("t3", 4, 0.5, 0.3)], target, "key")
    assert outcome.values == {"lr": 0.3} and outcome.objective == 0.5 and outcome.trials == 3


def test_tuned_runs_recorded_under_the_default_label_are_read_as_the_tuned_row():
    import pandas as pd

    from fedarena.suites.tuned_labels import with_tuned_labels

    runs = pd.DataFrame({"method_label": ["krum", "krum", "median", "krum+tuned8"],
                         "tuned_rows": [None, "krum,median", "krum,median", "krum+tuned8"],
                         "tuned_budget": [None, "8", "8", "8"]})
    out = with_tuned_labels(runs)
    assert out["method_label"].tolist() == ["krum", "krum+tuned8", "median+tuned8", "krum+tuned8"]
    assert out.loc[1, "tuned_rows"] == out.loc[2, "tuned_rows"] == "krum+tuned8,median+tuned8"


def test_a_tuned_row_and_its_default_row_holding_one_trial_both_keep_their_run():
    import pandas as pd

    from fedarena.leaderboards.cells import dedupe

    runs = pd.DataFrame({"method_label": ["krum", "krum+tuned8", "krum"], "cell_hash": ["c", "c", "c"],
                         "seed": [0, 0, 0], "start_time": [1, 2, 3]})
    kept, dropped = dedupe(runs)
    pairs = sorted(zip(kept["method_label"], kept["start_time"], strict=True))
    assert dropped == 1 and pairs == [("krum", 3), ("krum+tuned8", 2)]
