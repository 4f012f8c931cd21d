"""Faults through the real CLI, as a user meets them: each test runs ``fedarena bench run`` as a real process
(real Ray, a real SQLite store in a temporary folder), injects a fault (a corrupt or read-only store, an
impossible trial, SIGTERM, Ctrl+C, SIGKILL of the driver, a second benchmark of the same suite, a full disk)
and checks what the user sees (exit status, one line naming the cause, no traceback) and what is left in
the store (no run lost, duplicated or left RUNNING). Trials are 2 seeds x 1200 cheap rounds on synthetic
data, checkpointed every 100 rounds, so a fault lands in the middle of a trial.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from fedarena.tracking.location import check_sqlite_file

pytestmark = pytest.mark.integration  # real processes: `fedarena bench run` (Ray), signals

SCALE = {"datasets": [{"label": "synthetic", "dataset": {"name": "synthetic", "num_clients": 8, "max_samples": 60,
                                                           "dim": 20}, "model": {"name": "mlp", "hidden": [500, 500]}}],
         "seeds": [0, 1]}
SUITE = {"name": "faults", "fixed": {"clients_per_round": 4, "local_steps": 4, "batch_size": 16, "lr": 0.05},
         "methods": [{"label": "global", "method": {"name": "global"}}],
         "attacks": [{"label": "clean", "attack": {"name": "none"}, "levels": [0.0]}]}
START_TIMEOUT_S = 240
# About 5 ms a round here (an MLP of 500-500, 4 local steps; the default logistic regression takes 0.2 ms and
# a whole trial ended within a second), so a trial seen at round 160 runs 6-7 s more: still running when a
# signal or a kill reaches it, with the other trial started a few seconds later, on a CPU a few times faster
ROUNDS = 1200


def write_suite(folder: Path, rounds: int = ROUNDS, **changes) -> Path:
    """The suite with trials of ``rounds`` rounds, evaluated 30 times."""
    scale = {**SCALE, "fixed": {"rounds": rounds, "eval_every": rounds // 30}}
    path = folder / "faults.yaml"
    path.write_text(yaml.safe_dump({**SUITE, "scales": {s: scale for s in ("smoke", "quick", "paper")}, **changes}))
    return path


def bench_argv(folder: Path, suite: Path, *extra: str, uri: str | None = None) -> list[str]:
    """``bench run`` of ``suite`` at scale smoke, checkpointed every 100 rounds, tracked in ``uri`` (by default
    the SQLite store ``folder/store/mlflow.db``)."""
    return [sys.executable, "-m", "fedarena.cli", "bench", "run", str(suite), "--scale", "smoke",
            "--tracking-uri", uri or f"sqlite:///{folder}/store/mlflow.db", "--storage", str(folder / "ray"),
            "--num-cpus", "2", "--checkpoint-every", "100", *extra]


class Bench:
    """A benchmark driver process whose output goes to files (read while it runs)."""

    def __init__(self, folder: Path, argv: list[str], new_session: bool = False, name: str = "bench"):
        (folder / "store").mkdir(exist_ok=True)
        self.out, self.err = folder / f"{name}.out", folder / f"{name}.err"
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=err, start_new_session=new_session)

    def text(self) -> str:
        return self.out.read_text() + self.err.read_text()

    def wait_for(self, fragment: str, timeout: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while fragment not in self.out.read_text():
            assert self.proc.poll() is None, f"ended before {fragment!r}:\n{self.text()}"
            assert time.monotonic() < deadline, f"no {fragment!r} within {timeout} s:\n{self.text()}"
            time.sleep(0.5)

    def wait(self, timeout: float = START_TIMEOUT_S) -> int:
        return self.proc.wait(timeout=timeout)


def run_cli(folder: Path, argv: list[str]) -> subprocess.CompletedProcess:
    (folder / "store").mkdir(exist_ok=True)
    return subprocess.run(argv, capture_output=True, text=True, timeout=600)


def runs(folder: Path) -> list[tuple[str, str, int]]:
    """(config hash, status, logged evaluation rounds) of every run in the store."""
    with sqlite3.connect(folder / "store" / "mlflow.db") as db:
        return db.execute(
            "SELECT t.value, r.status, (SELECT COUNT(*) FROM metrics m WHERE m.run_uuid = r.run_uuid "
            "AND m.key = 'acc_pooled') FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid "
            "AND t.key = 'config_hash'").fetchall()


def assert_complete(folder: Path, trials: int = 2) -> None:
    """Every trial has exactly one run, FINISHED, with all 30 evaluation rounds logged."""
    found = runs(folder)
    assert len({h for h, _, _ in found}) == trials and len(found) == trials, found
    assert all(status == "FINISHED" and rounds == 30 for _, status, rounds in found), found
    assert not list((folder / "ray").rglob("checkpoint_*"))  # removed once the runs were FINISHED


def assert_clean(output: str) -> None:
    assert "Traceback" not in output, output
    assert "Tuner.restore" not in output and "Could not fetch metrics" not in output, output


def test_corrupt_store_file_is_one_line_before_ray(tmp_path):
    # Prepare
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "mlflow.db").write_bytes(os.urandom(20000))
    # Execute
    result = run_cli(tmp_path, bench_argv(tmp_path, write_suite(tmp_path)))
    # Assert: exit 2, one line naming the file and what to do; Ray never started (no plan line)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert "mlflow.db is not a usable SQLite database" in lines[0] and "move it aside" in lines[0]
    assert result.stdout == ""


def test_read_only_store_is_one_line(tmp_path):
    # Prepare: a read-only bind mount where the test may make one (root), a read-only folder otherwise
    store = tmp_path / "store"
    store.mkdir()
    if os.geteuid() != 0:
        store.chmod(0o555)
    elif subprocess.run(["mount", "--bind", "-o", "ro", str(store), str(store)], capture_output=True).returncode:
        pytest.skip("cannot make a read-only file system here (mount --bind -o ro failed)")
    try:
        # Execute
        result = run_cli(tmp_path, bench_argv(tmp_path, write_suite(tmp_path)))
    finally:
        store.chmod(0o755) if os.geteuid() != 0 else subprocess.run(["umount", str(store)], check=True)
    # Assert
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert "is read-only here" in lines[0] and str(store) in lines[0]


def test_a_store_left_mid_transaction_by_a_killed_writer_is_recovered_not_refused(tmp_path):
    # Prepare: 1,000 committed rows; a writer that spills an unfinished transaction to its journal, then dies
    db = tmp_path / "mlflow.db"
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("create table t (x)")
        conn.executemany("insert into t values (?)", [(i,) for i in range(1000)])
        conn.commit()
    writer = (f"import os, sqlite3\nc = sqlite3.connect({str(db)!r}, isolation_level=None)\n"
              "c.execute('pragma cache_size=1')\nc.execute('begin')\nc.execute('update t set x = x + 1')\n"
              "c.executemany('insert into t values (?)', [(i,) for i in range(20000)])\nos._exit(9)\n")
    subprocess.run([sys.executable, "-c", writer], check=False)
    assert (tmp_path / "mlflow.db-journal").exists()  # a hot journal: a read-only connection cannot roll it back
    # Execute
    check_sqlite_file(db)
    # Assert: accepted, the journal rolled back, the committed rows as they were
    assert not (tmp_path / "mlflow.db-journal").exists()
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("select count(*), sum(x) from t").fetchone() == (1000, 499500)


def test_impossible_trial_is_refused_before_ray_and_listed_by_dry_run(tmp_path):
    # Prepare: attack a1 at 1% of 8 clients corrupts none (it passes the suite's name and range checks)
    suite = write_suite(tmp_path, attacks=[{"label": "a1", "attack": {"name": "a1"}, "levels": [0.01]}])
    # Execute
    dry = run_cli(tmp_path, bench_argv(tmp_path, suite, "--dry-run"))
    real = run_cli(tmp_path, bench_argv(tmp_path, suite))
    # Assert: the dry run marks both trials, the real run refuses in one line; no run was created
    assert dry.returncode == 2 and dry.stdout.count("CANNOT RUN") == 2, dry.stdout
    lines = real.stderr.strip().splitlines()
    assert real.returncode == 2 and len(lines) == 1, real.stderr
    assert "2 of 2 trials cannot run" in lines[0] and "corrupts no client" in lines[0]
    assert runs(tmp_path) == []


def test_sigterm_is_ctrl_c_and_a_second_benchmark_is_refused_then_the_rerun_completes(tmp_path):
    # Prepare: the first benchmark holds the suite's lock from its plan line on (before Ray starts)
    suite = write_suite(tmp_path)
    first = Bench(tmp_path, bench_argv(tmp_path, suite))
    first.wait_for("suite 'faults' at scale 'smoke'")
    # Execute: a second benchmark of the same suite on the same store, then SIGTERM to the first mid-trial
    second = run_cli(tmp_path, bench_argv(tmp_path, suite))
    first.wait_for(f"round 160/{ROUNDS}")
    first.proc.send_signal(signal.SIGTERM)
    code = first.wait()
    stopped = runs(tmp_path)
    rerun = run_cli(tmp_path, bench_argv(tmp_path, suite))
    # Assert
    assert second.returncode == 2 and "another benchmark of this suite is running" in second.stderr
    assert f"pid {first.proc.pid}" in second.stderr and len(second.stderr.strip().splitlines()) == 1
    assert code == 143, first.text()
    assert "done: 0 finished, 0 failed, 2 interrupted" in first.text() and "run the same command again" in \
        first.text().lower()
    assert_clean(first.text())
    assert sorted(status for _, status, _ in stopped) == ["KILLED", "KILLED"]
    assert rerun.returncode == 0 and "2 to resume" in rerun.stdout, rerun.stdout + rerun.stderr
    assert_complete(tmp_path)


def test_ctrl_c_shows_the_summary_and_fedarenas_hint_only(tmp_path):
    # Prepare: its own session, so that Ctrl+C reaches the whole process group as in a terminal
    bench = Bench(tmp_path, bench_argv(tmp_path, write_suite(tmp_path)), new_session=True)
    bench.wait_for(f"round 160/{ROUNDS}")
    # Execute
    os.killpg(bench.proc.pid, signal.SIGINT)
    code = bench.wait()
    # Assert
    assert code == 1
    assert "2 interrupted" in bench.text() and "Run the same command again to resume" in bench.text()
    assert_clean(bench.text())
    assert bench.err.read_text().strip() == ""
    assert sorted(status for _, status, _ in runs(tmp_path)) == ["KILLED", "KILLED"]


def trial_workers(root: int) -> list[int]:
    """Pids of the trial workers under a driver (its descendants running Tune's function trainable; Ray's
    dashboard and runtime-env agents end on their own within about a minute)."""
    found, queue = [], [root]
    while queue:
        for child in children(queue.pop()):
            queue.append(child)
            if is_trial_worker(child):
                found.append(child)
    return found


def children(pid: int) -> list[int]:
    """The pids of ``pid``'s children (none once it has ended)."""
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def is_trial_worker(pid: int) -> bool:
    return cmdline(pid).startswith("ray::ImplicitFunc")


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_sigkilled_driver_then_a_full_disk_lose_nothing(tmp_path):
    # Prepare (one scenario: each benchmark costs a Ray start)
    suite = write_suite(tmp_path)
    bench = Bench(tmp_path, bench_argv(tmp_path, suite))
    bench.wait_for(f"round 160/{ROUNDS}")
    workers = trial_workers(bench.proc.pid)
    leftover = tmp_path / "ray" / ".fedarena" / "tmp" / "faults" / "fedarena-ckpt-left"
    # Execute: SIGKILL the driver
    bench.proc.kill()
    bench.wait()
    deadline = time.monotonic() + 10
    while any(map(is_trial_worker, workers)) and time.monotonic() < deadline:
        time.sleep(0.5)
    alive = [pid for pid in workers if is_trial_worker(pid)]
    leftover.mkdir(parents=True, exist_ok=True)  # what a checkpoint being written at the kill leaves
    killed = runs(tmp_path)
    # Execute: the rerun resumes; then its store file may not grow any more (a file-size limit on the driver:
    # EFBIG, as a full disk); then the same command once more
    resumed = Bench(tmp_path, bench_argv(tmp_path, suite), name="rerun")
    resumed.wait_for(f"/{ROUNDS} acc")  # training again (from wherever the killed trials had checkpointed)
    size = (tmp_path / "store" / "mlflow.db").stat().st_size
    resource.prlimit(resumed.proc.pid, resource.RLIMIT_FSIZE, (size, size))
    full_code = resumed.wait()
    last = run_cli(tmp_path, bench_argv(tmp_path, suite))
    # Assert: workers gone within 10 s; the runs were RUNNING and the rerun resumed both
    assert workers and not alive, (workers, alive)
    assert sorted(status for _, status, _ in killed) == ["RUNNING", "RUNNING"]
    assert "2 to resume" in resumed.text(), resumed.text()
    # Assert: the full disk is one line, and the last rerun completes every trial, leftover folder removed
    lines = resumed.err.read_text().strip().splitlines()
    assert full_code == 2 and len(lines) == 1, resumed.text()
    assert "a write failed for lack of space" in lines[0] and "mlflow.db" in lines[0] and "it resumes" in lines[0]
    assert_clean(resumed.text())
    assert last.returncode == 0, last.stdout + last.stderr
    assert_complete(tmp_path)
    assert not leftover.exists()
