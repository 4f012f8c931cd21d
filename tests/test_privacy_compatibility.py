"""Whether a row's server side runs under secure aggregation and central DP, as its method and rule declare it:
recorded with every benchmark run, so the tables' mark and the leaderboard's columns show it for a plugin's row
that this process never loaded."""

import pandas as pd
import pytest

from fedarena.battery.harness import recorded_privacy
from fedarena.bench.callback import identity_tags
from fedarena.leaderboards.server_rules import rule_facts
from fedarena.privacy.compatibility import CENTRAL_TAG, SECURE_TAG, privacy_tags, read_tag, runs_under
from fedarena.suites.grid import expand
from fedarena.suites.parse import load_suite


@pytest.mark.parametrize("method,aggregator,secure,central", [
    ({"name": "global"}, {"name": "mean"}, True, True),  # DP-FedAvg: the sum, sensitivity 2/n
    ({"name": "global"}, {"name": "median"}, False, True),  # needs each update; a declared sensitivity
    ({"name": "global"}, {"name": "fltrust"}, False, False),  # reads the server's root update: no sensitivity
    ({"name": "global"}, {"name": "mean", "pre": ["nnm"]}, False, False),  # a pre-aggregator couples the updates
    ({"name": "ditto", "lam": 0.1}, {"name": "mean"}, True, True),
    ({"name": "local"}, {"name": "mean"}, True, False),  # nothing aggregated: no central DP to speak of
])
def test_the_declarations_answer_for_built_in_rows(method, aggregator, secure, central):
    assert runs_under(method, aggregator) == {SECURE_TAG: secure, CENTRAL_TAG: central}


def test_the_tags_names_are_the_stored_schemas_and_a_section_without_a_rule_is_the_mean():
    assert (SECURE_TAG, CENTRAL_TAG) == ("runs_under_secure_aggregation", "runs_under_central_dp")  # in old stores
    assert runs_under({"name": "global"}, {}) == runs_under({"name": "global"}, {"name": "mean"})
    assert runs_under({"name": "global"}, {}) == {SECURE_TAG: True, CENTRAL_TAG: True}


def test_recorded_values_read_back_and_anything_else_is_unknown():
    assert [read_tag(v) for v in ("true", " FALSE ", True, None, "", "yes", float("nan"))] == [
        True, False, True, None, None, None, None]


def test_an_unregistered_component_is_unknown_not_guessed():
    assert runs_under({"name": "global"}, {"name": "not_registered_here"}) is None
    assert runs_under({"name": "not_registered_here"}, {"name": "mean"}) is None
    assert runs_under({}, {"name": "mean"}) is None
    assert privacy_tags({"method": {"name": "global"}, "aggregator": {"name": "not_registered_here"}}) == {}


def test_every_benchmark_run_records_both_tags():
    trial = next(t for t in expand(load_suite("robustness"), "quick", seeds=(0,)) if t.method_label == "median")
    tags = identity_tags(trial, {})
    assert (tags[SECURE_TAG], tags[CENTRAL_TAG]) == ("false", "true")


def test_a_plugin_rows_recorded_tag_marks_it_without_the_plugin():
    run = {"method.name": "global", "aggregator.name": "plugin_rule_not_loaded", "method_label": "aggregator.mine"}
    assert rule_facts(pd.DataFrame([run]))["needs_each_update"] is None  # a run recorded before the tags
    assert rule_facts(pd.DataFrame([{**run, SECURE_TAG: "false"}]))["needs_each_update"] is True
    assert rule_facts(pd.DataFrame([{**run, SECURE_TAG: "true"}]))["needs_each_update"] is False
    assert recorded_privacy(pd.DataFrame([{**run, SECURE_TAG: "true", CENTRAL_TAG: "false"}])) == (True, False)
    assert recorded_privacy(pd.DataFrame([run])) == (None, None)
    builtin = {"method.name": "global", "aggregator.name": "median"}  # no tag: today's registry answers
    assert recorded_privacy(pd.DataFrame([builtin])) == (False, True)
