"""The order labels are shown in comes from the suites' lists (fedarena.suites.order)."""

import os

import pytest
import yaml

from fedarena.config import read_yaml_file
from fedarena.leaderboards.tables import WORST, sort_key
from fedarena.suites import SUITES
from fedarena.suites.order import AXES, label_order, listed_labels, merged_order


def test_lists_that_agree_keep_every_order():
    # Prepare: two suites, the second places "local" between labels the first lists
    lists = [["global", "ditto"], ["global", "local", "ditto"]]
    # Execute
    order = merged_order(lists)
    # Assert
    assert order == ("global", "local", "ditto")


def test_lists_that_disagree_follow_the_first_mention():
    assert merged_order([["krum", "median"], ["median", "krum"], ["median", "dnc"]]) == ("krum", "median", "dnc")


def test_a_dataset_of_several_scales_takes_its_place_in_the_paper_scale():
    data = {"scales": {"smoke": {"datasets": [{"label": "digits"}]},
                       "paper": {"datasets": [{"label": "femnist"}, {"label": "cifar10"}]},
                       "quick": {"datasets": [{"label": "digits"}, {"label": "mnist_5k"}]}}}
    assert listed_labels(data, "datasets") == ["femnist", "cifar10", "digits", "mnist_5k"]


@pytest.mark.parametrize("name", SUITES.names())
def test_every_shipped_suite_is_shown_in_its_own_order(name):
    data = read_yaml_file(SUITES.get(name))
    for key, axis in AXES.items():
        listed = listed_labels(data, axis)
        shown = sorted(listed, key=lambda value, key=key: sort_key(key, value))
        assert shown == listed, f"{name}.yaml {axis}: the shipped suites disagree on the order of {listed}"


def test_a_registered_suite_places_its_labels_and_unlisted_ones_come_last(tmp_path):
    # Prepare: a suite listing a new method before global and a new attack after a1
    path = tmp_path / "ordering.yaml"
    path.write_text(yaml.safe_dump({"name": "ordering", "methods": [{"label": "zeta_rule"}, {"label": "global"}],
                                    "attacks": [{"label": "a1"}, {"label": "aaa_attack"}, {"label": "a2"}]}))
    SUITES.add("ordering", path)
    try:
        # Execute
        methods = sorted(["global", "zeta_rule", "unlisted_b", "unlisted_a"], key=lambda m: sort_key("method_label", m))
        attacks = sorted([WORST, "a2", "aaa_attack", "a1"], key=lambda a: sort_key("attack_label", a))
    finally:
        SUITES.remove("ordering")
    # Assert: the suite's order (alphabetically zeta_rule would come last), unlisted labels alphabetically after
    assert methods == ["zeta_rule", "global", "unlisted_a", "unlisted_b"]
    assert attacks == ["a1", "aaa_attack", "a2", WORST]
    assert "zeta_rule" not in label_order("method_label")  # read again once the suite is gone


def test_a_malformed_suite_adds_no_label_and_breaks_no_order():
    data = {"methods": "global", "attacks": [{"label": 3}, {"attack": {"name": "a1"}}, {"label": "a2"}],
            "scales": {"quick": ["not a mapping"], "paper": {"datasets": {"label": "x"}}}}
    assert [listed_labels(data, axis) for axis in ("methods", "attacks", "datasets")] == [[], ["a2"], []]


def test_a_suite_file_is_read_once_by_the_parser_and_the_tables_order(tmp_path, monkeypatch):
    import fedarena.suites as suites
    from fedarena.suites.parse import read_suite

    path = tmp_path / "readonce.yaml"
    path.write_text(yaml.safe_dump({"name": "readonce", "methods": [{"label": "global"}],
                                    "attacks": [{"label": "clean", "attack": {"name": "none"}, "levels": [0.0]}],
                                    "scales": {"smoke": {"datasets": [{"label": "digits",
                                                                       "dataset": {"name": "digits"}}], "seeds": [0]}}}))
    reads = []
    monkeypatch.setattr(suites, "read_yaml_file", lambda p: reads.append(p) or read_yaml_file(p))
    SUITES.add("readonce", path)
    try:
        assert read_suite(path).name == "readonce" and "global" in label_order("method_label")
        read_suite(path)
    finally:
        SUITES.remove("readonce")
    assert reads.count(path.resolve()) == 1
    before = path.stat().st_mtime_ns
    path.write_text(path.read_text().replace("global", "local"))  # an edited file is read again
    os.utime(path, ns=(before + 10**9, before + 10**9))
    assert [m.label for m in read_suite(path).methods] == ["local"] and reads.count(path.resolve()) == 2
