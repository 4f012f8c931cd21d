"""A trial's identity (``simulation.identity``) and the store's reading of it (``tracking.versions``)."""

import json

import pytest

from fedarena.config import ExperimentConfig
from fedarena.methods.aggregators.base import AGGREGATORS
from fedarena.sections import resolve_config
from fedarena.simulation.identity import digest, trial_identity
from fedarena.tracking.runs import run_params
from fedarena.tracking.versions import (
    V1_COMMITS,
    current_versions,
    is_current,
    legacy_identity,
    parse_param,
    run_identity,
)


def identity(**data):
    return trial_identity(ExperimentConfig.from_dict(data))


def test_values_leave_defaults_out_and_keep_names_and_the_device():
    ident = identity(dataset={"name": "digits", "num_clients": 30}, method={"name": "ditto", "lam": 0.1}, rounds=50)
    assert ident.values == {"aggregator.name": "mean", "attack.name": "none", "dataset.name": "digits",
                            "device": "cpu", "method.lam": 0.1, "method.name": "ditto", "model.name": "mlp"}
    assert ident.versions["method/ditto"] == 1 and ident.versions["engine"] == 3
    assert ident.versions["partitioner/k_classes"] == 1 and "metric/acc_pooled" in ident.versions


def test_an_option_added_with_a_default_that_keeps_the_numbers_keeps_the_identity():
    # a config written before `mode` existed, and today's config with mode at its default
    before = identity(attack={"name": "min_sum", "level": 0.2})
    today = identity(attack={"name": "min_sum", "level": 0.2, "mode": "paper"})
    other = identity(attack={"name": "min_sum", "level": 0.2, "mode": "reference"})
    assert before.config_hash == today.config_hash != other.config_hash


def test_a_null_counts_as_the_value_its_component_resolves_it_to():
    # multi-Krum's m null is n - f: 10 - 0 on a clean round of 10
    assert identity(aggregator={"name": "multi_krum"}).config_hash == \
        identity(aggregator={"name": "multi_krum", "m": 10}).config_hash
    assert identity(aggregator={"name": "multi_krum", "m": 9}).values["aggregator.m"] == 9
    # the aggregator's f null is the expected malicious count: 10 * 6 // 30 = 2 at 20% of 30 devices
    attack = {"name": "a1", "level": 0.2}
    assert identity(attack=attack, aggregator={"name": "median"}).config_hash == \
        identity(attack=attack, aggregator={"name": "median", "f": 2}).config_hash


def test_the_data_folder_is_no_part_of_the_identity():
    a = identity(dataset={"name": "vehicle", "data_dir": "/data/a"})
    b = identity(dataset={"name": "vehicle", "data_dir": "/mnt/b"})
    assert a.config_hash == b.config_hash


def test_seeds_share_a_cell_and_a_version_bump_changes_hash_and_cell_but_not_key(monkeypatch):
    a, b = identity(seed=0, aggregator={"name": "krum"}), identity(seed=1, aggregator={"name": "krum"})
    assert a.cell_hash == b.cell_hash and a.config_hash != b.config_hash
    monkeypatch.setitem(AGGREGATORS._versions, "krum", AGGREGATORS.version("krum") + 1)
    bumped = identity(seed=0, aggregator={"name": "krum"})
    assert bumped.config_key == a.config_key
    assert bumped.config_hash != a.config_hash and bumped.cell_hash != a.cell_hash


def legacy_params(**data) -> dict[str, str]:
    """The params a previous release logged: the flattened resolved config of that day (no privacy section)."""
    flat = resolve_config(ExperimentConfig.from_dict(data)).flat()
    return run_params({k: v for k, v in flat.items() if not k.startswith("privacy.")})


def test_a_previous_release_run_of_a_known_commit_is_version_one_of_what_it_used():
    params = legacy_params(attack={"name": "min_sum", "level": 0.2}, aggregator={"name": "median"}, seed=2)
    params.pop("attack.mode")  # written before the option existed
    found = run_identity(params, {"git_sha": sorted(V1_COMMITS)[0], "config_hash": "old"})
    today = identity(attack={"name": "min_sum", "level": 0.2}, aggregator={"name": "median"}, seed=2)
    # its values are today's; it ran version 1 of everything it used (engine and digits since bumped): stale
    assert found.legacy and found.config_key == today.config_key and found.versions["engine"] == 1
    assert found.versions == {key: 1 for key in today.versions}
    assert found.config_hash == digest({"values": today.values, "versions": {key: 1 for key in today.versions}})
    assert not is_current(found, today.versions)


def test_a_previous_release_run_of_an_unknown_commit_is_stale_with_its_reason():
    params = legacy_params(aggregator={"name": "krum"})
    found = run_identity(params, {"git_sha": "0123456789abcdef"})
    assert found.config_hash is None and found.config_key == identity(aggregator={"name": "krum"}).config_key
    assert not is_current(found, {})
    assert "previous release at commit 01234567" in found.why_stale({})


def test_a_param_cut_to_mlflows_limit_leaves_the_identity_unknown():
    params = legacy_params()
    params["dataset.partition_options"] = "x" * 497 + "..."
    assert legacy_identity(params) is None


def test_a_run_with_recorded_versions_is_current_only_at_todays_versions():
    versions = {"engine": 1, "aggregator/median": 1}
    tags = {"config_hash": "h", "config_key": "k", "component_versions": json.dumps(versions)}
    found = run_identity({}, tags)
    assert is_current(found, {"engine": 1, "aggregator/median": 1})
    assert not is_current(found, {"engine": 1, "aggregator/median": 2})
    assert found.why_stale({"engine": 1, "aggregator/median": 2}) == "aggregator/median v1 -> v2"


def test_a_plugin_not_loaded_is_current_at_the_newest_version_the_store_recorded():
    old, new = {"aggregator/mine": "1+src:aa"}, {"aggregator/mine": "1+src:bb"}
    today = current_versions([(old, 10), (new, 20)])
    assert today == {"aggregator/mine": "1+src:bb"}


@pytest.mark.parametrize("text,value", [("None", None), ("True", True), ("0.5", 0.5), ("[64]", [64]),
                                        ("digits", "digits"), ('{"min_size": 20}', {"min_size": 20})])
def test_params_read_back_as_they_were_written(text, value):
    assert parse_param(text) == value
