"""What a run cost (``fedarena.simulation.costs``): phases counted and summed, in the result record of a run."""

import pytest

from fedarena.config import ExperimentConfig
from fedarena.simulation.costs import CostMeter, cost_metrics
from fedarena.simulation.experiment import run_experiment


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
