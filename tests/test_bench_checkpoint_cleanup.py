"""A finished trial's checkpoints are removed: its own, the same trial's in the suite's earlier Tune experiments
(interrupted benchmarks) and the one it resumed from; other trials' and other suites' stay."""

from fedarena.bench.callback import remove_checkpoints


def make(path):
    path.mkdir(parents=True)
    (path / "state.pt").write_text("x")
    return path


def test_a_finished_trials_checkpoints_go_and_every_other_stays(tmp_path):
    now = tmp_path / "robustness-quick-2026-11-27_08-00-00"
    before = tmp_path / "robustness-quick-2026-11-26_09-00-00"
    other_suite = tmp_path / "backdoor-quick-2026-11-26_09-00-00"
    mine = make(now / "0001_abc123" / "checkpoint_000002").parent
    earlier = make(before / "0017_abc123" / "checkpoint_000001")
    resumed = make(before / "0017_abc123" / "checkpoint_000003")
    kept = [make(now / "0002_def456" / "checkpoint_000001"), make(before / "0009_def456" / "checkpoint_000001"),
            make(other_suite / "0001_abc123" / "checkpoint_000001")]
    remove_checkpoints(str(mine), str(resumed))
    assert not any(mine.glob("checkpoint_*")) and not earlier.exists() and not resumed.exists()
    assert all(path.exists() for path in kept)
