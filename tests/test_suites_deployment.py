"""The deployment axis of the suite language (fedarena.suites.deployment): entries, scale subsets and rules, the
declared f computed both ways, the grid points it excludes with their reasons, and the shipped deployment suite."""

import pytest
import yaml

from fedarena.bench.plan import excluded_lines
from fedarena.suites.grid import expand, expand_grid
from fedarena.suites.parse import load_suite
from fedarena.suites.spec import SCALES, SuiteError
from fedarena.tracking.runs import run_name

# 10 devices, 5 drawn a round: ALIE at 40% is 4 attackers, f = int(5 * 4 / 10) = 2; halved 1, doubled 4, where Krum
# (n - f - 2 = -1) is undefined; without attackers f = 0, and so are half and double of it
SMALL = {"rounds": 2, "eval_every": 1, "clients_per_round": 5, "local_steps": 1}
SYNTHETIC = {"label": "syn", "dataset": {"name": "synthetic", "num_clients": 10, "max_samples": 60, "dim": 5}}
DEPLOYMENT = [{"label": "synchronous"},
              {"label": "fail0.3", "system": {"name": "synchronous", "failure_rate": 0.3}},
              {"label": "f_half", "f_declared": "half"},
              {"label": "f_double", "f_declared": "double"}]


def suite_data(**changes) -> dict:
    data = {"name": "deployed",
            "methods": [{"label": "global", "method": {"name": "global"}},
                        {"label": "krum", "method": {"name": "global"}, "aggregator": {"name": "krum"}},
                        {"label": "local", "method": {"name": "local"}}],
            "attacks": [{"label": "clean", "attack": {"name": "none"}, "levels": [0.0]},
                        {"label": "alie", "attack": {"name": "alie"}, "levels": [0.4]}],
            "deployment": DEPLOYMENT,
            "scales": {scale: {"fixed": SMALL, "datasets": [SYNTHETIC], "seeds": [0]} for scale in SCALES}}
    data.update(changes)
    return data


def load(tmp_path, data: dict):
    path = tmp_path / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_suite(path)


def by_name(tmp_path, data: dict | None = None):
    grid = expand_grid(load(tmp_path, data or suite_data()), "smoke")
    return {t.name: t for t in grid.trials}, {e.name: e for e in grid.excluded}


def test_declared_f_is_half_and_double_of_the_trials_own(tmp_path):
    # Execute
    trials, _ = by_name(tmp_path)
    # Assert: f_half 1 and f_double 4 against Krum's 2; the mean (which ignores f) runs its declared f too
    assert trials["krum syn alie@0.4 s0"].config.aggregator.get("f") is None
    assert trials["krum syn alie@0.4 f_half s0"].config.aggregator["f"] == 1
    assert trials["global syn alie@0.4 f_double s0"].config.aggregator["f"] == 4
    assert trials["global syn alie@0.4 f_half s0"].config.aggregator["f"] == 1
    assert trials["krum syn alie@0.4 f_half s0"].tags == {"f_declared": "half"}
    assert trials["krum syn alie@0.4 fail0.3 s0"].config.system["failure_rate"] == 0.3


def test_a_doubled_f_where_the_rule_is_undefined_is_excluded_with_the_rules_reason(tmp_path):
    # Execute
    trials, excluded = by_name(tmp_path)
    # Assert: Krum needs n - f - 2 >= 1; at f = 4 of 5 it is undefined: excluded, not an error
    point = excluded["krum syn alie@0.4 f_double s0"]
    assert "krum syn alie@0.4 f_double s0" not in trials
    assert "needs n - f - 2 >= 1, got n=5, f=4" in point.reason and point.same_as == ""
    assert (point.method_label, point.attack_label, point.deployment_label) == ("krum", "alie", "f_double")


def test_a_declared_f_equal_to_the_trials_own_is_the_same_trial_as_the_synchronous_one(tmp_path):
    # Execute
    trials, excluded = by_name(tmp_path)
    # Assert: without attackers f = 0 = half = double; local training has no rule that reads f
    for name in ("global syn clean f_half s0", "krum syn clean f_double s0"):
        assert name not in trials and excluded[name].same_as == "synchronous"
        assert excluded[name].reason.startswith(f"f declared {name.split()[3][2:]} is 0, the f the trial assumes")
    local = excluded["local syn alie@0.4 f_double s0"]
    assert local.reason == ("method 'local' has no global aggregation, so no rule reads the declared f: the same "
                            "trial as 'local syn alie@0.4 s0'") and local.same_as == "synchronous"
    assert len(trials) + len(excluded) == 3 * 2 * 4


def test_the_same_trial_keeps_the_entry_without_a_declared_f_whatever_the_order(tmp_path):
    # Prepare: the declared f listed before the synchronous entry
    data = suite_data(deployment=[DEPLOYMENT[3], DEPLOYMENT[0]])
    # Execute
    trials, excluded = by_name(tmp_path, data)
    # Assert
    assert "global syn clean s0" in trials and excluded["global syn clean f_double s0"].same_as == "synchronous"


def test_a_rule_undefined_without_the_deployment_too_stays_the_suites_error(tmp_path):
    # Prepare: 2 drawn a round: Krum is undefined at the synchronous f already
    data = suite_data(scales={s: {"fixed": {**SMALL, "clients_per_round": 2}, "datasets": [SYNTHETIC], "seeds": [0]}
                              for s in SCALES})
    # Execute / Assert
    with pytest.raises(SuiteError, match=r"trial 'krum syn clean s0'.*needs n - f - 2 >= 1"):
        expand(load(tmp_path, data), "smoke")


def test_two_deployments_with_one_config_and_no_declared_f_are_still_an_error(tmp_path):
    data = suite_data(deployment=[{"label": "synchronous"}, {"label": "lab", "system": {"name": "synchronous"}}])
    with pytest.raises(SuiteError, match="same config as trial 'global syn clean s0'"):
        expand(load(tmp_path, data), "smoke")


def test_two_method_entries_with_one_config_under_a_declared_f_are_still_an_error(tmp_path):
    data = suite_data(deployment=[DEPLOYMENT[2]])
    data["methods"].append({"label": "krum2", "method": {"name": "global"}, "aggregator": {"name": "krum"}})
    with pytest.raises(SuiteError, match="same config as trial 'krum syn clean f_half s0'"):
        expand(load(tmp_path, data), "smoke")


def test_a_scale_subsets_the_axis_and_rules_match_it(tmp_path):
    # Prepare: the smoke scale keeps two deployments; a rule leaves fail0.3 out for krum
    data = suite_data(exclude=[{"method": "krum", "deployment": "fail0.3"}])
    data["scales"]["smoke"]["deployment"] = ["synchronous", "fail0.3"]
    data["overrides"] = [{"when": {"deployment": "fail0.3", "method": "global"},
                          "set": {"system": {"failure_rate": 0.5}}}]
    # Execute
    trials, excluded = by_name(tmp_path, data)
    # Assert
    assert {t.deployment_label for t in trials.values()} == {"synchronous", "fail0.3"} and not excluded
    assert not [name for name in trials if name.startswith("krum") and "fail0.3" in name]
    assert trials["global syn clean fail0.3 s0"].config.system["failure_rate"] == 0.5


def test_a_suite_without_the_axis_has_one_synchronous_entry_and_names_as_before(tmp_path):
    # Execute
    data = suite_data()
    del data["deployment"]
    trials, excluded = by_name(tmp_path, data)
    # Assert
    assert not excluded and {t.deployment_label for t in trials.values()} == {"synchronous"}
    assert all(t.config.system_is_default() for t in trials.values())
    assert run_name("krum", "syn", "alie", 0.4, 0) == run_name("krum", "syn", "alie", 0.4, 0, "none", "synchronous")
    assert run_name("krum", "syn", "alie", 0.4, 0, "eps10", "fail0.3") == "krum syn alie@0.4 eps10 fail0.3 s0"


@pytest.mark.parametrize("entry, where, message", [
    ({"label": "x", "aggregator": {"f": 3}}, "deployment[0].aggregator",
     "unknown key; a deployment entry has label, system, f_declared (the server rule and its other settings are a "
     "method entry's)"),
    ({"label": "x", "f_declared": "triple"}, "deployment[0].f_declared",
     "f_declared is the server's f relative to the trial's: one of half, exact, double; got 'triple'"),
    ({"label": "x", "system": {"failure_rate": 0.3}}, "deployment[0].system",
     "a deployment entry names its system: `system: {name: synchronous, ...}` or `{name: asynchronous, ...}`"),
    ({"f_declared": "half"}, "deployment[0]", "missing key 'label'"),
])
def test_a_bad_deployment_entry_is_one_line_naming_the_key(tmp_path, entry, where, message):
    with pytest.raises(SuiteError) as err:
        load(tmp_path, suite_data(deployment=[entry]))
    assert str(err.value) == f"{tmp_path / 'deployed.yaml'}: {where}: {message}"


def test_an_unknown_deployment_label_in_a_scale_or_a_rule_lists_the_suites(tmp_path):
    data = suite_data()
    data["scales"]["quick"]["deployment"] = ["synchronous", "fail9"]
    with pytest.raises(SuiteError, match=r"scales.quick.deployment\[1\]: unknown deployment label 'fail9'; the suite "
                                         r"defines: f_double, f_half, fail0.3, synchronous$"):
        load(tmp_path, data)
    with pytest.raises(SuiteError, match=r"exclude\[0\].deployment: unknown deployment label 'nosuch'"):
        load(tmp_path, suite_data(exclude=[{"deployment": "nosuch"}]))


def test_a_system_option_out_of_range_is_the_suites_error_not_an_exclusion(tmp_path):
    data = suite_data(deployment=[{"label": "fail2", "system": {"name": "synchronous", "failure_rate": 2}}])
    with pytest.raises(SuiteError, match=r"trial 'global syn clean fail2 s0' \(.*, deployment\[0\]\): system "
                                         r"'synchronous': failure_rate must be a number in \[0, 1\), got 2.0$"):
        expand(load(tmp_path, data), "smoke")
    with pytest.raises(SuiteError, match=r"deployment\[0\].system: unknown system 'synchronus'"):
        load(tmp_path, suite_data(deployment=[{"label": "x", "system": {"name": "synchronus"}}]))


def test_the_plan_lists_every_excluded_point_with_its_reason_or_counts_them_by_reason(tmp_path):
    # Prepare
    excluded = expand_grid(load(tmp_path, suite_data()), "smoke").excluded
    # Execute
    each, grouped = excluded_lines(excluded, each=True), excluded_lines(excluded, each=False)
    # Assert
    assert each[0].startswith(f"{len(excluded)} grid point(s) excluded") and len(each) == len(excluded) + 1
    assert any(line.startswith("  excluded krum syn alie@0.4 f_double s0: krum scores") for line in each)
    assert "  2 of f_half: f declared half is 0, the f the trial assumes: the same trial as synchronous's (e.g. " \
           "global syn clean f_half s0)" in grouped
    assert len(grouped) < len(each)


def test_the_shipped_deployment_suite_expands_at_smoke_and_quick():
    # Execute
    suite = load_suite("deployment")
    smoke, quick = expand_grid(suite, "smoke"), expand_grid(suite, "quick")
    # Assert: smoke's doubled f leaves Krum undefined under ALIE at 40%; quick's clean f_half / f_double are the
    # synchronous trials (8 rows x 2 x 3 seeds)
    assert (len(smoke.trials), len(smoke.excluded)) == (13, 3)
    assert (len(quick.trials), len(quick.excluded)) == (1584, 48) and all(e.same_as for e in quick.excluded)
    assert {t.deployment_label for t in quick.trials} == {e.label for e in suite.deployment}
    assert {t.config.local_steps for t in quick.trials} == {5}  # a straggler's {1, ..., 4} steps: less than all
    assert {t.config.aggregator.get("f") for t in quick.trials if t.deployment_label == "f_double"} == {4}


def test_every_failure_and_straggler_deployment_has_its_control_beside_it():
    # the plain label: attackers stay online; label_all: they fail or straggle at the same rate as honest devices
    entries = {e.label: e.patch.get("system", {}) for e in load_suite("deployment").deployment}
    varied = [label for label, system in entries.items() if system.get("failure_rate") or system.get("stragglers")]
    plain = [label for label in varied if not label.endswith("_all")]
    assert len(plain) == 6
    for label in plain:
        control = entries[f"{label}_all"]
        assert {k: v for k, v in control.items() if not k.startswith("attackers_")} == entries[label]
        assert control.get("attackers_fail" if entries[label].get("failure_rate") else "attackers_straggle") is True
        assert not any(k.startswith("attackers_") for k in entries[label])
