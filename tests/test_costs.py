"""What a run cost (``fedarena.simulation.costs``): phases counted and summed, in the result record of a run."""

import math

import pytest
import torch

from fedarena.config import ExperimentConfig
from fedarena.simulation import work
from fedarena.simulation.costs import CostMeter, cost_metrics
from fedarena.simulation.engine import simulate
from fedarena.simulation.experiment import run_experiment
from fedarena.simulation.setup import build_trial


def test_meter_counts_and_sums_each_phase():
    # Prepare
    meter = CostMeter("cpu")
    # Execute: three rounds and one evaluation
    for _ in range(3):
        with meter.phase("round"):
            sum(range(1000))
    with meter.phase("eval"):
        pass
    cost = meter.summary()
    # Assert
    assert (cost["round_calls"], cost["eval_calls"]) == (3, 1)
    assert cost["round_ms"] == pytest.approx(1000 * cost["round_s"] / 3)
    assert cost["total_s"] >= cost["round_s"] + cost["eval_s"] > 0
    assert "peak_round_mb" not in cost  # device memory is measured on CUDA only
    assert cost_metrics({"round_ms": 2})["cost_round_ms"] == 2.0


def test_run_record_says_what_each_phase_cost():
    # Prepare: 4 rounds, evaluated every 2
    cfg = ExperimentConfig.from_dict({**ExperimentConfig().to_dict(), "rounds": 4, "eval_every": 2, "clients_per_round": 3,
                                      "dataset": {"name": "synthetic", "num_clients": 6, "max_samples": 40}})
    # Execute
    cost = run_experiment(cfg)["cost"]
    # Assert: one set-up, 4 training rounds, 2 evaluations, no checkpoints outside a benchmark
    assert (cost["setup_calls"], cost["round_calls"], cost["eval_calls"]) == (1, 4, 2)
    assert "checkpoint_calls" not in cost and cost["peak_rss_mb"] > 0


def test_server_ms_is_per_round_the_rule_ran_and_each_clock_waits_for_the_device(monkeypatch):
    # Prepare: a fake clock and a fake CUDA device that record the order of their calls
    events, ticks = [], iter([0.0, 0.002, 1.0, 1.004, 2.0, 2.001, 3.0, 3.010])
    monkeypatch.setattr(work.time, "perf_counter", lambda: events.append("clock") or next(ticks))
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *device: events.append("sync"))
    meter = work.Work()
    # Execute: two server steps (2 and 4 ms), a round input the server computes (1 ms), the attacker's 10 ms
    for role, step in ((work.SERVER, True), (work.SERVER, True), (work.SERVER, False), (work.ATTACK, False)):
        with meter.measured(role, step=step):
            pass
    cost = meter.summary(rounds=5)
    # Assert: 7 ms over the 2 rounds the rule ran; the attacker's over the 5 rounds run; every clock read after a sync
    assert cost["server_ms"] == pytest.approx(3.5)
    assert cost["attack_ms"] == pytest.approx(2.0)
    assert events == ["sync", "clock", "sync", "clock"] * 4
    assert math.isnan(work.Work().summary(rounds=5)["server_ms"])  # a rule that never ran costs no ms per round


def test_a_run_counts_the_server_steps_of_the_rounds_it_aggregated(small_config):
    # Krum with f following the reports needs 3 of the 5 drawn; at failure rate 0.7 some rounds are skipped
    trial = build_trial(small_config(system={"name": "synchronous", "failure_rate": 0.7}, aggregator={"name": "krum"},
                                     attack={"name": "a1", "level": 0.3}, rounds=16, eval_every=16))
    state, _ = simulate(trial)
    skipped = int(state.parts["system"]["skipped"])
    assert 0 < skipped < 16 and trial.work.steps[work.SERVER] == 16 - skipped
