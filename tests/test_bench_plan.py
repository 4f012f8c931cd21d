"""Pure parts of the runner: skip/resume planning, checkpoint spacing, progress lines."""

import pytest

from fedarena.bench.budget import CheckpointBudget
from fedarena.bench.plan import plan_trials
from fedarena.bench.progress import round_line, tally
from fedarena.bench.runner import checkpoint_spacing
from fedarena.bench.trainable import auto_checkpoint_every
from fedarena.config import ExperimentConfig
from fedarena.suites.grid import TrialSpec
from fedarena.tracking.runs import RunSummary
from fedarena.tracking.versions import RunIdentity


def spec(config_hash: str, key: str = "", versions: dict | None = None) -> TrialSpec:
    return TrialSpec(ExperimentConfig(), "s", "quick", "global", "fmnist", "clean", 0.0, 0, config_hash, "cell",
                     f"trial {config_hash}", config_key=key or f"k{config_hash}", versions=versions or {"engine": 1})


def stored(run_id: str, status: str, config_hash: str | None, start: int, tags: dict | None = None, key: str = "",
           versions: dict | None = None, legacy: bool = False) -> RunSummary:
    identity = RunIdentity(config_hash, key or (f"k{config_hash}" if config_hash else None),
                           versions if versions is not None else ({"engine": 1} if config_hash else None), legacy)
    return RunSummary(run_id, status, tags or {}, start, identity)


def test_plan_skips_finished_resumes_unfinished_and_adds_new():
    # Prepare: a has a FINISHED run (and an older FAILED one); b only a FAILED run with a checkpoint
    own = [stored("rb2", "KILLED", "b", 30, {"checkpoint": "/ck/b2"}), stored("ra2", "FINISHED", "a", 20),
           stored("ra1", "FAILED", "a", 10), stored("rb1", "FAILED", "b", 5)]
    # Execute
    plan = plan_trials([spec("a"), spec("b"), spec("c")], own)
    # Assert: the newest unfinished run of b is continued from its checkpoint
    assert plan.skipped == 1
    assert sorted(plan.pending) == ["b", "c"]
    assert (plan.pending["b"].run_id, plan.pending["b"].resume_from) == ("rb2", "/ck/b2")
    assert (plan.pending["c"].run_id, plan.pending["c"].resume_from) == (None, None)
    assert plan.resumed == 1 and plan.stale == [] and plan.reuse == []


def test_a_finished_run_at_other_versions_is_stale_and_its_trial_runs_again_saying_why():
    # Prepare: the trial's values ran at aggregator/krum v1; today krum is v2 (another identity, the same key)
    old = stored("r1", "FINISHED", "h-v1", 10, key="k", versions={"engine": 1, "aggregator/krum": 1})
    today = spec("h-v2", key="k", versions={"engine": 1, "aggregator/krum": 2})
    # Execute
    plan = plan_trials([today, spec("other")], [old])
    # Assert: exactly the affected trial is pending, with the stale run's reason
    assert sorted(plan.pending) == ["h-v2", "other"] and plan.skipped == 0
    assert [(s.config_hash, why) for s, _, why in plan.stale] == [("h-v2", "aggregator/krum v1 -> v2")]


def test_a_trial_another_suite_finished_is_reused_not_run():
    # Prepare: the identity finished in another suite's experiment; none in this one
    elsewhere = {"h": stored("x1", "FINISHED", "h", 5, {"suite": "robustness"})}
    # Execute
    plan = plan_trials([spec("h"), spec("new")], [], elsewhere)
    # Assert
    assert [(s.config_hash, r.run_id) for s, r in plan.reuse] == [("h", "x1")]
    assert sorted(plan.pending) == ["new"]


def test_a_previous_release_run_is_resumed_with_its_checkpoint_and_legacy_hash():
    # Prepare: an interrupted run a previous release wrote, of today's identity (version 1 everywhere)
    legacy = stored("old", "KILLED", "h", 5, {"checkpoint": "/ck/old", "checkpoint_round": "40"}, legacy=True)
    # Execute
    plan = plan_trials([spec("h")], [legacy])
    # Assert
    planned = plan.pending["h"]
    assert (planned.run_id, planned.resume_from, planned.resume_round, planned.resume_legacy) == (
        "old", "/ck/old", 40, True)


def test_auto_checkpoint_spacing_is_about_ten_per_trial_on_evaluation_rounds():
    assert auto_checkpoint_every(5000, 10) == 500
    assert auto_checkpoint_every(50, 10) == 10
    assert auto_checkpoint_every(6, 2) == 2
    assert auto_checkpoint_every(95, 4) == 8


def test_checkpoint_spacing_option_then_scale_then_about_ten_per_trial():
    assert checkpoint_spacing(20, 0, 5000, 10) == (20, None)  # --checkpoint-every: exactly those rounds
    assert checkpoint_spacing(None, 0, 5000, 10) == (0, None)  # the scale's: short trials, none before the end
    assert checkpoint_spacing(0, 100, 5000, 10) == (0, None)
    assert checkpoint_spacing(None, None, 5000, 10) == (500, 0.05)  # about ten, within 5% of the trial's time


def test_checkpoint_budget_waits_cost_over_fraction_of_training_since_the_last_one():
    # Prepare: a fake clock; the first checkpoint of a 1 GB state is predicted to take 2 s (500 MB/s)
    now = [0.0]
    budget = CheckpointBudget(0.05, clock=lambda: now[0])
    # Execute / Assert: 2 s / 5% = 40 s of training before the first one
    now[0] = 39.0
    assert not budget.allows(10**9)
    now[0] = 40.0
    assert budget.allows(10**9)
    budget.record(3.0)  # it took 3 s: the next one after 60 s more
    now[0] = 99.0
    assert not budget.allows(10**9)
    now[0] = 100.0
    assert budget.allows(10**9)
    with pytest.raises(ValueError, match=r"in \(0, 1\]"):
        CheckpointBudget(0.0)


def test_tally_counts_statuses_and_unseen_trials_as_pending():
    counts = tally(["TERMINATED", "RUNNING", "ERROR", "PENDING", "PAUSED"], total=7)
    assert (counts.done, counts.running, counts.pending, counts.failed) == (1, 1, 4, 1)
    assert counts.prefix() == "[1/7 done | 1 running | 4 pending | 1 failed]"


def test_round_line_shows_accuracy_only_at_evaluations():
    evaluated = {"round": 40, "rounds": 100, "evaluated": True, "acc_pooled": 0.8125, "acc_std": 0.1}
    assert round_line("ditto fmnist a1@0.5 s0", evaluated) == "ditto fmnist a1@0.5 s0: round 40/100 acc 0.812 (std 0.100)"
    assert round_line("x", {"round": 30, "rounds": 100, "evaluated": False}) == "x: round 30/100"
