"""Identity in a real MLflow store (SQLite, no Ray): a version bump makes exactly the affected trials run again,
and the tables show only runs of today's identity, counting the stale ones."""

import pytest
import yaml

from fedarena.bench.callback import identity_tags
from fedarena.bench.plan import plan_trials, stale_summary
from fedarena.leaderboards.build import suite_tables
from fedarena.methods.aggregators.base import AGGREGATORS
from fedarena.suites.grid import expand
from fedarena.suites.parse import load_suite
from fedarena.tracking.runs import FINISHED, RunStore, run_params
from fedarena.tracking.store import check_store, suite_experiment

pytestmark = pytest.mark.slow  # a real SQLite MLflow store

SYNTHETIC = {"label": "synthetic", "dataset": {"name": "synthetic", "num_clients": 10, "max_samples": 60, "dim": 20}}
SUITE = {
    "name": "versions",
    "methods": [{"label": "global", "method": {"name": "global"}},
                {"label": "median", "method": {"name": "global"}, "aggregator": {"name": "median"}}],
    "attacks": [{"label": "clean", "attack": {"name": "none"}, "levels": [0.0]},
                {"label": "a1", "attack": {"name": "a1"}, "levels": [0.2]}],
    "scales": {"smoke": {"fixed": {"rounds": 4, "eval_every": 2, "clients_per_round": 5},
                         "datasets": [SYNTHETIC], "seeds": [0, 1]}},
}


def record(store: RunStore, spec, acc: float) -> str:
    """A finished trial as the benchmark records it (identity tags, params, its last evaluation)."""
    tags = identity_tags(spec, {"git_sha": "test"})
    run_id = store.open(spec.name, run_params(spec.config.flat()), tags, spec.config.to_dict())
    store.finish(run_id, FINISHED, rounds={4: {"acc_pooled": acc, "acc_std": 0.1, "loss_mean": 1.0}},
                 tags={"dataset_fingerprint": "fp"})
    return run_id


@pytest.fixture
def store(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = check_store(uri)
    return RunStore(client, suite_experiment(client, uri, "versions")), uri


def test_a_rule_at_version_2_reruns_exactly_its_trials_and_the_table_shows_only_version_2(store, tmp_path,
                                                                                           monkeypatch):
    # Prepare: every trial finished with median at version 1 (accuracy .5)
    runs, uri = store
    path = tmp_path / "versions.yaml"
    path.write_text(yaml.safe_dump(SUITE))
    for spec in expand(load_suite(path), "smoke"):
        record(runs, spec, 0.5)
    # Execute: median's numbers change, its version is bumped
    monkeypatch.setitem(AGGREGATORS._versions, "median", 2)
    specs = expand(load_suite(path), "smoke")
    plan = plan_trials(specs, runs.runs())
    # Assert: exactly median's 4 trials (2 settings x 2 seeds) run again, and the plan says why
    assert sorted(p.spec.name for p in plan.pending.values()) == [
        "median synthetic a1@0.2 s0", "median synthetic a1@0.2 s1", "median synthetic clean s0",
        "median synthetic clean s1"]
    assert plan.skipped == 4
    assert stale_summary(plan.stale) == "4 finished run(s) are stale and run again: aggregator/median v1 -> v2 (4)"
    # Execute: the reruns finish (accuracy .8); Assert: the tables hold version 2 alone and count the stale runs
    for planned in plan.pending.values():
        record(runs, planned.spec, 0.8)
    tables, cells, _ = suite_tables("versions", uri)
    median = cells[cells["method_label"] == "median"]
    assert median["acc_pooled"].tolist() == pytest.approx([0.8, 0.8]) and (median["n_seeds"] == 2).all()
    full = next(t for t in tables if t.name == "full")
    assert "4 stale run(s), computed at other component versions than today's, are left out." in full.footnotes
    assert plan_trials(specs, runs.runs()).pending == {}
