"""``perf_concurrent``: k trials started together in their own processes (what ``make perf-paper`` prints for
trials sharing a machine). Figures are never asserted; what the processes return, and a failing one, are."""

import pytest

from fedarena.config import ExperimentConfig
from fedarena.perf.concurrent import run_together


def tiny(**dataset) -> ExperimentConfig:
    return ExperimentConfig.from_dict({"dataset": {"name": "synthetic", "num_clients": 6, "max_samples": 40,
                                                   "dim": 10, **dataset}, "rounds": 3, "clients_per_round": 3,
                                       "local_steps": 1, "batch_size": 8, "eval_every": 3})


@pytest.mark.integration  # trial processes
def test_each_of_k_trials_reports_its_setup_and_round_time():
    # Execute
    found = run_together(tiny(), k=2, rounds=2, threads="share")
    # Assert: one (set-up s, ms per round) per process, both measured
    assert len(found) == 2
    assert all(setup > 0 and ms > 0 for setup, ms in found), found


@pytest.mark.integration  # trial processes
def test_a_failing_trial_process_is_an_error_not_a_hang(tmp_path):
    # Prepare: a dataset folder without the files the loader needs
    cfg = ExperimentConfig.from_dict({"dataset": {"name": "fmnist", "data_dir": str(tmp_path)}, "rounds": 3})
    # Execute / Assert
    with pytest.raises(RuntimeError, match=r"[12] of 2 trial processes failed"):
        run_together(cfg, k=2, rounds=1)


def test_thread_policy_is_checked():
    with pytest.raises(ValueError, match="'share' or 'all'"):
        run_together(tiny(), k=1, rounds=1, threads="many")
