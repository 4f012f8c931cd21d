"""Progress of a benchmark: the suite's ETA in the progress lines and the one-line end summary."""

import pytest
import yaml

from fedarena.bench.progress import Printer, Progress, Tally, duration
from fedarena.bench.runner import BenchOptions, run_bench


class Clock:
    """A hand-moved clock (seconds)."""

    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def report(round_: int, rounds: int = 10, **extra) -> dict:
    return {"round": round_, "rounds": rounds, **extra}


def test_duration_words():
    assert [duration(s) for s in (0.44, 9.96, 42, 187, 7500)] == ["0.4s", "10s", "42s", "3m07s", "2h05m"]


def test_no_eta_before_a_round_has_run():
    # Prepare
    clock = Clock()
    progress = Progress(clock)
    # Execute / Assert
    assert progress.eta(Tally(4, 0, 0, 4, 0)) is None
    progress.advance("a s0", report(2))  # its rounds ran before the clock started
    assert progress.eta(Tally(4, 0, 1, 3, 0)) is None
    clock.now += 5
    assert progress.eta(Tally(4, 0, 1, 3, 0)) is None


def test_eta_is_rounds_left_over_rounds_per_second_since_the_first_report():
    # Prepare: 4 trials of 10 rounds; the first report (a at round 1) starts the clock; 5 s later a is at
    # round 4 and b at round 2: 5 rounds in 5 s
    clock = Clock()
    progress = Progress(clock)
    progress.advance("a s0", report(1))
    clock.now += 5
    progress.advance("a s0", report(4))
    progress.advance("b s0", report(2))
    # Execute
    eta = progress.eta(Tally(4, 0, 2, 2, 0))
    # Assert: 1 round/s; left: 6 (a) + 8 (b) + 2 unseen trials x 10 rounds = 34 rounds
    assert eta == pytest.approx(34.0)


def test_a_resumed_trial_counts_only_the_rounds_run_now_and_finished_trials_none_left():
    # Prepare: a resumed at round 6, first reported round 7, finished 3 s later; one trial not seen yet
    clock = Clock()
    progress = Progress(clock)
    progress.advance("a s0", report(7, resumed_from_round=6))
    clock.now += 3
    progress.advance("a s0", report(10, resumed_from_round=6, done=True))
    # Execute
    eta = progress.eta(Tally(2, 1, 0, 1, 0))
    # Assert: 3 rounds in 3 s; left: the unseen trial's 10 rounds
    assert eta == pytest.approx(10.0)


def test_printer_puts_the_eta_in_the_prefix():
    # Prepare
    clock, lines = Clock(), []
    printer = Printer(lines.append, clock)
    printer.advance("a s0", report(1))
    clock.now += 2
    printer.advance("a s0", report(3))
    # Execute
    printer.event(Tally(1, 0, 1, 0, 0), "a s0: round 3/10")
    # Assert: 2 rounds in 2 s, 7 left
    assert lines == ["[0/1 done | 1 running | 0 pending | 0 failed | ETA 7.0s] a s0: round 3/10"]


def test_summary_has_wall_time_and_the_slowest_cells_summed_over_seeds():
    # Prepare
    clock, lines = Clock(), []
    printer = Printer(lines.append, clock)
    times = {"ditto d a1@0.5 s0": 50.0, "ditto d a1@0.5 s1": 70.0, "global d clean s0": 90.0, "median d clean s0": 5.0,
             "krum d clean s0": 30.0}
    for name, seconds in times.items():
        printer.advance(name, report(10, done=True, time_total_s=seconds))
    clock.now += 185
    # Execute
    printer.summary()
    printer.summary(cores=2)
    # Assert: the throughput where the cores are known, 5 trials / (185 s * 2 cores)
    assert lines == ["wall time 3m05s; slowest cells: ditto d a1@0.5 (2m00s, 2 seeds), global d clean (1m30s, 1 seed), "
                     "krum d clean (30s, 1 seed)",
                     "wall time 3m05s (5 trials: 0.0135 trials per core-second on 2 cores); slowest cells: ditto d a1@0.5 "
                     "(2m00s, 2 seeds), global d clean (1m30s, 1 seed), krum d clean (30s, 1 seed)"]


@pytest.mark.integration  # Ray
def test_a_real_benchmark_prints_an_eta_and_ends_with_the_summary(tmp_path):
    # Prepare: two 4-round trials on Ray (one CPU), reporting every round
    fixed = {"rounds": 4, "eval_every": 2, "clients_per_round": 2, "local_steps": 1}
    data = {"name": "etagrid", "methods": [{"label": "global", "method": {"name": "global"}}],
            "attacks": [{"label": "clean", "attack": {"name": "none"}, "levels": [0.0]}],
            "scales": {"smoke": {"fixed": fixed, "seeds": [0, 1], "datasets": [
                {"label": "syn", "dataset": {"name": "synthetic", "num_clients": 6, "max_samples": 40, "dim": 5}}]}}}
    path = tmp_path / "etagrid.yaml"
    path.write_text(yaml.safe_dump(data))
    lines = []
    options = BenchOptions(str(path), "smoke", tracking_uri=f"sqlite:///{tmp_path}/mlflow.db", storage=tmp_path / "ray",
                           num_cpus=1, checkpoint_every=2)
    # Execute
    summary = run_bench(options, Printer(lines.append))
    # Assert
    assert summary.finished == 2
    assert any("| ETA " in line and "global syn clean s1" in line for line in lines)
    assert lines[-2].startswith("done: 2 finished")
    assert lines[-1].startswith("wall time ") and "slowest cells: global syn clean (" in lines[-1]
    assert "(2 trials: " in lines[-1] and " trials per core-second on 1 core)" in lines[-1]
    assert lines[-1].endswith(", 2 seeds)")
