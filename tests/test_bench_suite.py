"""Suites: YAML parsing, grid expansion, merge order, validation errors (file + key), all before Ray."""

from pathlib import Path

import pytest
import yaml

from fedarena.bench.progress import Printer
from fedarena.bench.runner import BenchError, BenchOptions, run_bench
from fedarena.cli import main
from fedarena.simulation.identity import trial_identity
from fedarena.suites import SUITES
from fedarena.suites.grid import Combo, build_config, count_trials, expand
from fedarena.suites.parse import load_suite
from fedarena.suites.spec import SCALES, SuiteError

TINY = {"rounds": 2, "eval_every": 1, "clients_per_round": 2, "local_steps": 1}
SYNTHETIC = {"label": "syn", "dataset": {"name": "synthetic", "num_clients": 6, "max_samples": 60, "dim": 5}}


def suite_data(suite_name: str, **changes) -> dict:
    """A small valid suite using only components of the engine skeleton (global, local, ditto, none)."""
    data = {
        "name": suite_name,
        "description": "test suite",
        "methods": [{"label": "global", "method": {"name": "global"}},
                    {"label": "ditto_lam0.5", "method": {"name": "ditto", "lam": 0.5}}],
        "attacks": [{"label": "clean", "attack": {"name": "none"}, "levels": [0.0]}],
        "scales": {scale: {"fixed": TINY, "datasets": [SYNTHETIC], "seeds": [0, 1]} for scale in SCALES},
    }
    data.update(changes)
    return data


def write_suite(tmp_path: Path, data: dict | str, name: str = "mysuite") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def test_shipped_suites_have_three_scales_and_label_their_rows():
    # Prepare / Execute
    suites = {name: load_suite(name, check_names=False) for name in SUITES.names()}
    # Assert
    assert {"robustness", "fairness", "personalization", "ditto_robust", "fedtilt", "smoke"} <= set(suites)
    for suite in suites.values():
        assert set(suite.scales) == set(SCALES)
        assert all(count_trials(suite, scale) > 0 for scale in SCALES)
    assert {"global", "local", "fair_term_t1", "ditto"} <= {m.label for m in suites["robustness"].methods}


def test_count_applies_levels_subsets_and_exclusions(tmp_path):
    # Prepare: 3 methods x (clean + a1 at 0.2, 0.5) x 2 seeds, minus "C" at 0.5 (2 trials), minus "A" on
    # dataset d2 (3 settings x 2 seeds); datasets d1, d2; a1 on d2 overridden to one level.
    data = suite_data(
        "counts",
        methods=[{"label": m, "method": {"name": "global"}} for m in ("A", "B", "C")],
        attacks=[{"label": "clean", "attack": {"name": "none"}, "levels": [0.0]},
                 {"label": "a1", "attack": {"name": "a1"}, "levels": [0.2, 0.5]}],
        exclude=[{"method": "C", "level": 0.5}],
    )
    data["scales"]["quick"]["datasets"] = [{**SYNTHETIC, "label": "d1"},
                                           {**SYNTHETIC, "label": "d2", "levels": {"a1": [0.5]}}]
    data["scales"]["quick"]["exclude"] = [{"method": "A", "dataset": "d2"}]
    suite = load_suite(write_suite(tmp_path, data, "counts"), check_names=False)
    # Execute
    count = count_trials(suite, "quick")
    # Assert: d1: 3 methods x 3 settings x 2 seeds - C@0.5 x 2 = 16; d2: (B, C) x (clean, a1@0.5) x 2 - C@0.5 x 2 = 6
    assert count == 22


def test_merge_order_fixed_dataset_method_override(tmp_path):
    # Prepare
    data = suite_data("merge", fixed={"lr": 0.1, "batch_size": 8},
                      overrides=[{"when": {"method": "ditto_lam0.5"}, "set": {"method": {"lam": 0.7}}}])
    data["scales"]["quick"]["fixed"] = {**TINY, "lr": 0.2}
    data["scales"]["quick"]["datasets"] = [{**SYNTHETIC, "lr": 0.3}]
    suite = load_suite(write_suite(tmp_path, data, "merge"))
    scale = suite.scales["quick"]
    combo = Combo(scale.datasets[0], suite.methods[1], suite.attacks[0], 0.0, 1)
    # Execute
    cfg = build_config(suite, scale, combo, device="cpu")
    # Assert: dataset entry beats scale beats suite; override sets lam inside the method entry's section
    assert (cfg.lr, cfg.batch_size, cfg.seed) == (0.3, 8, 1)
    assert cfg.method == {"name": "ditto", "lam": 0.7}


def test_expand_resolves_configs_and_hashes_cells_without_seed(tmp_path):
    # Prepare
    suite = load_suite(write_suite(tmp_path, suite_data("hashes"), "hashes"))
    # Execute
    trials = expand(suite, "quick")
    # Assert: 2 methods x 1 setting x 2 seeds; seeds share a cell, never a config
    assert [(t.method_label, t.seed) for t in trials] == [("global", 0), ("global", 1), ("ditto_lam0.5", 0),
                                                         ("ditto_lam0.5", 1)]
    assert len({t.config_hash for t in trials}) == 4
    assert trials[0].cell_hash == trials[1].cell_hash != trials[2].cell_hash
    assert trials[2].config.method["dynamic_lam"] is False  # defaults filled in (resolved)
    assert trials[0].config_hash == trial_identity(trials[0].config).config_hash


def test_expand_dataset_filter_and_seed_override(tmp_path):
    # Prepare
    suite = load_suite(write_suite(tmp_path, suite_data("filters"), "filters"))
    # Execute
    by_label = expand(suite, "quick", dataset="syn", seeds=(5,))
    elsewhere = expand(suite, "quick", dataset="digits", seeds=(5,))
    # Assert
    assert [t.seed for t in by_label] == [5, 5]
    assert {t.dataset_label for t in elsewhere} == {"digits"}
    assert elsewhere[0].config.dataset["name"] == "digits" and elsewhere[0].config.model["name"] == "mlp"


def test_rules_and_scale_subsets_may_name_one_variant_of_a_selected_entry(tmp_path):
    # Prepare: ditto selects lam among 0.1, 1, 2; d2 leaves out lam 2; lam 0.1 gets 3 local steps; the
    # smoke scale runs the variant ditto_lam1 alone
    data = suite_data("variants", methods=[{"label": "ditto", "method": {"name": "ditto"},
                                            "select": {"by": "val_acc_pooled", "over": {"method.lam": [0.1, 1, 2]}}}],
                      overrides=[{"when": {"method": "ditto_lam0.1"}, "set": {"local_steps": 3}}])
    data["scales"]["quick"]["datasets"] = [{**SYNTHETIC, "label": "d1"}, {**SYNTHETIC, "label": "d2", "lr": 0.3}]
    data["scales"]["quick"]["exclude"] = [{"method": "ditto_lam2", "dataset": "d2"}]
    data["scales"]["smoke"]["methods"] = ["ditto_lam1"]
    suite = load_suite(write_suite(tmp_path, data, "variants"))
    # Execute
    quick = expand(suite, "quick", seeds=(0,))
    smoke = expand(suite, "smoke", seeds=(0,))
    # Assert
    assert [(t.dataset_label, t.method_label, t.config.local_steps) for t in quick] == [
        ("d1", "ditto_lam0.1", 3), ("d1", "ditto_lam1", 1), ("d1", "ditto_lam2", 1),
        ("d2", "ditto_lam0.1", 3), ("d2", "ditto_lam1", 1)]
    assert [t.method_label for t in smoke] == ["ditto_lam1"]


@pytest.mark.parametrize(
    ("change", "key", "words"),
    [
        ({"metrics": ["acc"]}, "metrics", "unknown key"),
        ({"methods": [{"label": "g", "method": {"name": "glob"}}]}, "methods[0].method", "unknown method 'glob'"),
        ({"methods": [{"label": "d", "method": {"name": "ditto", "lamb": 1}}]}, "methods[0].method", "lamb"),
        ({"methods": [{"label": "g", "aggregator": {"name": "krumm"}}]}, "methods[0].aggregator", "unknown aggregator"),
        ({"attacks": [{"label": "x", "attack": {"name": "nothing"}, "levels": [0.0]}]}, "attacks[0].attack",
         "unknown attack 'nothing'"),
        ({"methods": []}, "methods", "non-empty list"),
        ({"methods": [{"label": "g", "seed": 3}]}, "methods[0].seed", "seeds are an axis"),
        ({"methods": [{"label": "g", "rounds": -1}]}, "methods[0]", "rounds must be a positive integer"),
        ({"attacks": [{"label": "a", "attack": {"name": "none"}, "levels": [1.5]}]}, "attacks[0].levels[0]", "[0, 1)"),
        ({"exclude": [{"method": "nope"}]}, "exclude[0].method", "unknown method label 'nope'"),
        ({"name": "other"}, "name", "must equal the file name"),
    ],
)
def test_invalid_suites_name_file_and_key(tmp_path, change, key, words):
    # Prepare
    path = write_suite(tmp_path, suite_data("bad", **change), "bad")
    # Execute / Assert
    with pytest.raises(SuiteError) as err:
        load_suite(path)
    assert str(err.value).startswith(f"{path}: {key}")
    assert words in str(err.value)


def test_unknown_axis_and_dataset_in_a_scale(tmp_path):
    # Prepare
    data = suite_data("scaleerr")
    data["scales"]["paper"]["optimizers"] = ["sgd"]
    axis = write_suite(tmp_path, data, "scaleerr")
    data = suite_data("dataerr")
    data["scales"]["quick"]["datasets"] = [{"label": "x", "dataset": {"name": "digts"}}]
    dataset = write_suite(tmp_path, data, "dataerr")
    # Execute / Assert
    with pytest.raises(SuiteError, match=r"scaleerr\.yaml: scales\.paper\.optimizers: unknown key"):
        load_suite(axis)
    with pytest.raises(SuiteError, match=r"dataerr\.yaml: scales\.quick\.datasets\[0\]\.dataset: unknown dataset 'digts'"):
        load_suite(dataset)


def test_bad_yaml_and_missing_scale(tmp_path):
    # Prepare
    broken = write_suite(tmp_path, "name: broken\nmethods: [{label: g\n", "broken")
    data = suite_data("noscale")
    del data["scales"]["paper"]
    missing = write_suite(tmp_path, data, "noscale")
    # Execute / Assert
    with pytest.raises(SuiteError, match=r"broken\.yaml, line 3, column 1: invalid YAML"):
        load_suite(broken)
    with pytest.raises(SuiteError, match=r"noscale\.yaml: unknown scale 'paper'; choose one of smoke, quick$"):
        expand(load_suite(missing), "paper")  # a suite defines the scales it uses (tests/test_suite_scales.py)


def test_empty_grid_and_undefined_server_rules_fail_at_expansion(tmp_path):
    # Prepare: every combination excluded; krum with 2 updates per round (needs n - f - 2 >= 1); local + median
    empty = load_suite(write_suite(tmp_path, suite_data("empty", exclude=[{"attack": "clean"}]), "empty"))
    krum = load_suite(write_suite(tmp_path, suite_data(
        "krum", methods=[{"label": "krum", "aggregator": {"name": "krum"}}]), "krum"))
    local = load_suite(write_suite(tmp_path, suite_data(
        "local", methods=[{"label": "local_median", "method": {"name": "local"}, "aggregator": {"name": "median"}}]),
        "local"))
    # Execute / Assert
    with pytest.raises(SuiteError, match=r"empty\.yaml: scales\.quick: empty grid"):
        expand(empty, "quick")
    with pytest.raises(SuiteError, match=r"krum\.yaml: scales\.quick: trial 'krum syn clean s0'.*krum"):
        expand(krum, "quick")
    with pytest.raises(SuiteError, match=r"local\.yaml: .*has no global aggregation"):
        expand(local, "quick")


def test_invalid_suite_fails_before_ray_and_tracking(tmp_path):
    # Prepare
    import ray

    path = write_suite(tmp_path, suite_data("early", methods=[{"label": "g", "method": {"name": "glob"}}]), "early")
    store = tmp_path / "store" / "mlflow.db"
    # Execute / Assert
    with pytest.raises(SuiteError, match="unknown method 'glob'"):
        run_bench(BenchOptions(str(path), tracking_uri=f"sqlite:///{store}", storage=tmp_path / "ray"))
    assert not ray.is_initialized()
    assert not (tmp_path / "ray").exists()


def test_cli_bench_run_reports_invalid_suite_with_exit_code_2(tmp_path, capsys):
    # Prepare
    path = write_suite(tmp_path, suite_data("cli", methods=[{"label": "g", "method": {"name": "glob"}}]), "cli")
    # Execute
    code = main(["bench", "run", str(path), "--scale", "smoke", "--tracking-uri", f"sqlite:///{tmp_path}/x.db"])
    # Assert
    assert code == 2
    assert f"{path}: methods[0].method: unknown method 'glob'" in capsys.readouterr().err


def test_cli_bench_list_shows_counts_per_scale(capsys):
    # Execute
    code = main(["bench", "list", "--no-check"])
    # Assert: the smoke suite's counts are 2 / 6 / 9 (see its YAML)
    out = capsys.readouterr().out
    assert code == 0
    smoke_row = next(line for line in out.splitlines() if line.startswith("smoke "))
    assert smoke_row.split()[1:4] == ["2", "6", "9"]
    assert "robustness" in out and "fedtilt" in out


def test_missing_data_fails_before_ray(tmp_path):
    # Prepare: a paper dataset pointed at an empty data directory
    import ray

    data = suite_data("nodata")
    data["scales"]["quick"]["datasets"] = [
        {"label": "fmnist", "dataset": {"name": "fmnist", "num_clients": 10, "data_dir": str(tmp_path / "empty")}}]
    path = write_suite(tmp_path, data, "nodata")
    # Execute / Assert
    with pytest.raises(BenchError, match=r"(?s)need data that is not here:\ndataset fmnist.*missing"):
        run_bench(BenchOptions(str(path), tracking_uri=f"sqlite:///{tmp_path}/mlflow.db", storage=tmp_path / "ray"),
                  Printer(lambda line: None))
    assert not ray.is_initialized()
