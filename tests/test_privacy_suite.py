"""A suite's privacy axis: parsed, expanded into the grid (labels, names, rules), its runs tagged; the shipped
privacy suite at the smoke scale through Ray and MLflow to its table, figure and report section."""

import math

import pytest
import yaml

from fedarena.suites import SUITES
from fedarena.suites.grid import expand
from fedarena.suites.parse import load_suite
from fedarena.suites.spec import SuiteError

TINY = {"rounds": 2, "eval_every": 1, "clients_per_round": 5, "local_steps": 1, "sampling": "uniform"}
DIGITS = {"label": "digits", "dataset": {"name": "digits", "num_clients": 10}, "model": {"name": "mlp", "hidden": [8]}}


def suite_file(tmp_path, **changes):
    data = {
        "name": "dp",
        "methods": [{"label": "global", "method": {"name": "global"}}, {"label": "local", "method": {"name": "local"}}],
        "attacks": [{"label": "clean", "attack": {"name": "none"}, "levels": [0.0]}],
        "privacy": [{"label": "none", "privacy": {"name": "none"}},
                    {"label": "eps5", "privacy": {"name": "central", "target_epsilon": 5.0}}],
        "exclude": [{"method": "local", "privacy": "eps5"}],
        "scales": {"smoke": {"fixed": TINY, "datasets": [DIGITS], "seeds": [0]}},
    }
    data.update(changes)
    path = tmp_path / "dp.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_the_privacy_axis_multiplies_the_grid_and_its_rules_name_it(tmp_path):
    # Execute
    trials = expand(load_suite(suite_file(tmp_path)), "smoke")
    # Assert: global at none and eps5, local at none only (excluded by privacy label)
    seen = {(t.method_label, t.privacy_label, t.name) for t in trials}
    assert seen == {("global", "none", "global digits clean s0"), ("global", "eps5", "global digits clean eps5 s0"),
                    ("local", "none", "local digits clean s0")}
    private = next(t for t in trials if t.privacy_label == "eps5")
    assert private.config.privacy["target_epsilon"] == 5.0 and private.versions["privacy/central"] == 2
    assert private.versions["accountant/rdp"] == 1


def test_a_suite_without_a_privacy_axis_has_one_entry_none(tmp_path):
    path = suite_file(tmp_path)
    data = yaml.safe_load(path.read_text())
    del data["privacy"], data["exclude"]
    path.write_text(yaml.safe_dump(data))
    trials = expand(load_suite(path), "smoke")
    assert {t.privacy_label for t in trials} == {"none"} and all(t.config.privacy_is_default() for t in trials)


@pytest.mark.parametrize("change, where, message", [
    ({"privacy": [{"label": "eps5", "noise": 1}]}, "privacy[0]", "a privacy entry needs a `privacy: {name: ...}`"),
    ({"privacy": [{"label": "eps5", "privacy": {"name": "centrl"}}]}, "privacy[0].privacy",
     "unknown privacy 'centrl'"),
    ({"exclude": [{"privacy": "eps9"}]}, "exclude[0].privacy", "unknown privacy label 'eps9'"),
])
def test_a_bad_privacy_entry_names_its_key(tmp_path, change, where, message):
    with pytest.raises(SuiteError) as err:
        load_suite(suite_file(tmp_path, **change))
    assert where in str(err.value) and message in str(err.value)


def test_a_trial_dp_cannot_run_is_refused_before_ray(tmp_path):
    path = suite_file(tmp_path)
    data = yaml.safe_load(path.read_text())
    del data["exclude"]  # local training under central DP
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SuiteError, match="method 'local' has no global aggregation"):
        expand(load_suite(path), "smoke")


@pytest.mark.integration
def test_the_privacy_suite_reaches_its_table_figure_and_report(ray_cluster, tmp_path):
    import fedarena
    from fedarena.bench.progress import Printer
    from fedarena.leaderboards.build import build_leaderboards
    from fedarena.report.compose import build_report

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    # Execute: the shipped suite at the smoke scale (FedAvg and Ditto, none and eps10, clean and BadNets)
    fedarena.benchmark("privacy", scale="smoke", tracking_uri=uri, storage=tmp_path / "ray",
                       printer=Printer(lambda line: None))
    paths = build_leaderboards("privacy", uri, str(tmp_path / "lb"), "markdown")
    runs = fedarena.runs("privacy", tracking_uri=uri)
    # Assert: every private run reports the epsilon it was calibrated to; the table lays the axis out
    private = runs[runs["privacy_label"] == "eps10"]
    assert len(private) == 4 and all(e == pytest.approx(10.0, rel=0.01) for e in private["epsilon"])
    assert runs.loc[runs["privacy_label"].isna(), "epsilon"].isna().all() if "epsilon" in runs else True
    table = (tmp_path / "lb" / "privacy.md").read_text()
    assert "| method | none | eps10 (δ = 1e-05) |" in table and "**digits badnets 20%**" in table
    assert "digits, eps10: ε = 10 at δ = 1e-05" in table
    assert {p.name for p in paths} >= {"privacy.md", "privacy_digits.png", "privacy_audit.md"}
    # the audited rows (every device and 100 canaries each round): claimed beside measured, in their own table
    audited = runs[runs["privacy_label"] == "audit_eps10"]
    assert len(audited) == 2 and audited["epsilon_empirical_final"].notna().all()
    assert (audited["epsilon_add_remove"] < audited["epsilon_add_remove_rdp"]).all()  # exact (PLD) below RDP's
    assert (audited["epsilon_add_remove_rdp"] < audited["epsilon"]).all() and (audited["audit_canaries"] == 100).all()
    assert audited["epsilon_equal_variance_final_low"].notna().all()
    audit_table = (tmp_path / "lb" / "privacy_audit.md").read_text()
    assert "ε̂ equal-variance (final) [interval] K" in audit_table and "K=100" in audit_table
    assert "claimed ε add/remove: exact / RDP" in audit_table and "flagged" in audit_table
    assert "digits, audit_eps10: 100 canaries" in table
    page = build_report("privacy", uri, tmp_path / "report").read_text()
    assert 'id="privacy"' in page and 'alt="privacy_digits"' in page
    assert not math.isnan(float(private["noise_multiplier"].iloc[0]))
    assert "privacy" in SUITES.names()
