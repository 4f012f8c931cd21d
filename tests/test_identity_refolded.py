"""A store written before identities folded equal configs (an explicit backend equal to auto's pick, a data seed
equal to the seed) keeps working: its runs are read under today's identity, skipped when finished, and an
unfinished one resumes from a checkpoint that carries the hash it recorded (issue 58)."""

import json

import pandas as pd
import pytest

from fedarena.bench.plan import plan_trials
from fedarena.config import ExperimentConfig
from fedarena.sections import resolve_config
from fedarena.simulation.identity import trial_identity
from fedarena.suites.grid import TrialSpec
from fedarena.tracking.reading import RunSummary
from fedarena.tracking.runs import run_params
from fedarena.tracking.versions import run_identity

QUICK = {"dataset": {"name": "digits", "num_clients": 10}, "model": {"name": "mlp", "hidden": [16]}, "rounds": 2,
         "clients_per_round": 5, "backend": "batched", "seed": 1}  # a quick suite's row: auto picks batched


def recorded_before(cfg: ExperimentConfig) -> tuple[dict, dict]:
    """(params, tags) as the bench recorded the trial before folding (its unfolded identity)."""
    resolved = resolve_config(cfg)
    old = trial_identity(cfg).unfolded
    tags = {"config_hash": old.config_hash, "config_key": old.config_key, "cell_hash": old.cell_hash,
            "component_versions": json.dumps(old.versions, sort_keys=True), "checkpoint": "/ck/1",
            "checkpoint_round": "1"}
    return run_params(resolved.flat()), tags


def spec_of(cfg: ExperimentConfig, label: str = "global", seed: int = 1) -> TrialSpec:
    """The config's trial as a suite row ``label`` on digits (clean) would plan it."""
    today = trial_identity(cfg)
    return TrialSpec(resolve_config(cfg), "s", "quick", label, "digits", "clean", 0.0, seed, today.config_hash,
                     today.cell_hash, "t", config_key=today.config_key, versions=today.versions)


def folded_tags(today) -> dict:
    """The identity tags of a run recorded with folded identities."""
    return {"config_hash": today.config_hash, "component_versions": json.dumps(today.versions),
            "identity_folds": "true"}


@pytest.mark.parametrize("patch", [{}, {"data_seed": 1}])
def test_a_run_recorded_before_folding_is_read_under_todays_identity(patch):
    cfg = ExperimentConfig.from_dict({**QUICK, **patch})
    today = trial_identity(cfg)
    params, tags = recorded_before(cfg)
    assert today.config_hash != tags["config_hash"]  # the fold moved this config's hash
    identity = run_identity(params, tags)
    assert (identity.config_hash, identity.config_key, identity.cell_hash) == (
        today.config_hash, today.config_key, today.cell_hash)
    assert identity.recorded_hash == tags["config_hash"]


def test_a_finished_run_is_skipped_and_an_unfinished_one_resumes_from_its_recorded_hash():
    cfg = ExperimentConfig.from_dict(QUICK)
    today = trial_identity(cfg)
    params, tags = recorded_before(cfg)
    spec = spec_of(cfg)
    finished = RunSummary("r1", "FINISHED", tags, 10, run_identity(params, tags))
    assert plan_trials([spec], [finished]).skipped == 1
    killed = RunSummary("r2", "KILLED", tags, 10, run_identity(params, tags))
    planned = plan_trials([spec], [killed]).pending[today.config_hash]
    assert (planned.run_id, planned.resume_from, planned.resume_hash) == ("r2", "/ck/1", tags["config_hash"])


def test_a_run_that_recorded_todays_hash_or_another_is_read_as_recorded():
    cfg = ExperimentConfig.from_dict(QUICK)
    params, tags = recorded_before(cfg)
    today = trial_identity(cfg)
    for recorded in (today.config_hash, "0123456789abcdef"):
        identity = run_identity(params, {**tags, "config_hash": recorded})
        assert identity.config_hash == recorded and identity.recorded_hash == "" and identity.cell_hash is None


def test_the_tables_read_a_refolded_run_in_todays_cell():
    from fedarena.tracking.reading import runs_frame

    cfg = ExperimentConfig.from_dict(QUICK)
    params, tags = recorded_before(cfg)

    class Run:  # the parts of an MLflow run that runs_frame reads
        class info:
            run_id, status, start_time = "r1", "FINISHED", 1

        class data:
            pass

    Run.data.params, Run.data.tags, Run.data.metrics = params, tags, {"acc_pooled": 0.5}
    frame = runs_frame([Run])
    today = trial_identity(cfg)
    assert isinstance(frame, pd.DataFrame)
    assert frame.loc[0, ["config_hash", "cell_hash"]].tolist() == [today.config_hash, today.cell_hash]


def test_a_finished_run_whose_cell_changed_is_skipped_and_moved_into_todays_cell():
    # Prepare: seed 0 finished with data_seed null; the suite now fixes data_seed 0 for its seeds (one identity
    # for seed 0, another cell)
    before = trial_identity(ExperimentConfig.from_dict({**QUICK, "seed": 0}))
    cfg = ExperimentConfig.from_dict({**QUICK, "seed": 0, "data_seed": 0})
    today = trial_identity(cfg)
    assert today.config_hash == before.config_hash and today.cell_hash != before.cell_hash
    spec = spec_of(cfg, seed=0)
    tags = {"config_hash": before.config_hash, "cell_hash": before.cell_hash,
            "component_versions": json.dumps(before.versions)}
    finished = RunSummary("r1", "FINISHED", tags, 10, run_identity({}, tags))
    # Execute
    plan = plan_trials([spec], [finished])
    # Assert: not run again, re-tagged into today's cell (where seeds 1 and 2 of data_seed 0 go)
    assert plan.skipped == 1 and [(run.run_id, s.cell_hash) for run, s in plan.recell] == [("r1", today.cell_hash)]
    assert plan_trials([spec], [RunSummary("r1", "FINISHED", {**tags, "cell_hash": today.cell_hash}, 10,
                                           run_identity({}, tags))]).recell == []


def test_a_run_recorded_before_folding_at_older_versions_is_stale_with_its_reason():
    cfg = ExperimentConfig.from_dict(QUICK)
    today = trial_identity(cfg)
    older = {**today.versions, "aggregator/mean": 0}
    unfolded_then = type(today)(today.values, older, today.folded).unfolded
    params, _ = recorded_before(cfg)
    tags = {"config_hash": unfolded_then.config_hash, "config_key": unfolded_then.config_key,
            "component_versions": json.dumps(older)}
    identity = run_identity(params, tags)
    assert identity.config_key == today.config_key and identity.config_hash != today.config_hash
    spec = spec_of(cfg)
    plan = plan_trials([spec], [RunSummary("r1", "FINISHED", tags, 10, identity)])
    assert [why for _, _, why in plan.stale] == ["aggregator/mean v0 -> v1"] and len(plan.pending) == 1


def test_a_run_recorded_with_folded_identities_is_never_recomputed_on_read():
    cfg = ExperimentConfig.from_dict(QUICK)
    params, tags = recorded_before(cfg)
    identity = run_identity(params, {**tags, "identity_folds": "true"})
    assert identity.config_hash == tags["config_hash"] and identity.recorded_hash == ""


def test_a_trial_finished_under_another_rows_label_is_copied_not_skipped():
    # a tuned row whose chosen values are the defaults: the default row's run is the same trial
    cfg = ExperimentConfig.from_dict(QUICK)
    today = trial_identity(cfg)
    spec = spec_of(cfg, label="krum+tuned8")
    tags = folded_tags(today)
    default = RunSummary("r1", "FINISHED", {**tags, "method_label": "krum"}, 10, run_identity({}, tags))
    plan = plan_trials([spec], [default])
    assert plan.skipped == 0 and [(s.method_label, r.run_id) for s, r in plan.reuse] == [("krum+tuned8", "r1")]
    copied = RunSummary("r2", "FINISHED", {**tags, "method_label": "krum+tuned8"}, 20, run_identity({}, tags))
    assert plan_trials([spec], [copied, default]).skipped == 1


def test_an_old_tuned_run_under_the_default_label_is_not_the_default_rows_and_a_rename_is_skipped():
    cfg = ExperimentConfig.from_dict(QUICK)
    today = trial_identity(cfg)
    spec = spec_of(cfg, label="krum")
    tags = folded_tags(today)
    old_tuned = RunSummary("r1", "FINISHED", {**tags, "method_label": "krum", "tuned_rows": "krum,median"}, 10,
                           run_identity({}, tags))
    plan = plan_trials([spec], [old_tuned])
    assert plan.skipped == 0 and [r.run_id for _, r in plan.reuse] == ["r1"]  # the same trial: copied, not computed
    renamed = RunSummary("r2", "FINISHED", {**tags, "method_label": "krum_old"}, 10, run_identity({}, tags))
    assert plan_trials([spec], [renamed]).skipped == 1  # another label, no tuned row: as before


def test_a_run_resumed_once_after_folding_resumes_again_from_its_old_checkpoint():
    from fedarena.bench.callback import identity_tags

    cfg = ExperimentConfig.from_dict(QUICK)
    today = trial_identity(cfg)
    params, tags = recorded_before(cfg)
    spec = spec_of(cfg)
    first = plan_trials([spec], [RunSummary("r1", "KILLED", tags, 10, run_identity(params, tags))]).pending
    # the first resume rewrites the run's identity tags (as on_trial_start does) and keeps the checkpoint's hash
    retagged = {**tags, **identity_tags(spec, {}), "checkpoint_config_hash": first[today.config_hash].resume_hash}
    second = plan_trials([spec], [RunSummary("r1", "KILLED", retagged, 10, run_identity(params, retagged))]).pending
    assert second[today.config_hash].resume_hash == tags["config_hash"] == first[today.config_hash].resume_hash
