"""A benchmark tracked on a real MLflow tracking server (``mlflow server`` on 127.0.0.1 with its own SQLite
store and artifact folder, reached through ``--tracking-uri http://...``), as a team would share one.

Through the real CLI, in one scenario (each step costs a Ray start, so they share one): a server killed while
trials run stops the benchmark with one line soon (not after MLflow's minutes of retries); once the server is
back on the same store the same command resumes every trial from its recorded checkpoint (one FINISHED run
per trial, every evaluation round logged once); a second rerun skips every trial; and ``fedarena
leaderboard`` through the server gives the table it gives from the server's SQLite file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from local_ports import free_port
from mlflow.tracking import MlflowClient
from test_bench_faults import ROUNDS, Bench, assert_clean, bench_argv, run_cli, write_suite

pytestmark = pytest.mark.integration  # real processes: `mlflow server`, `fedarena bench run` (Ray), signals

MLFLOW = str(Path(sys.executable).parent / "mlflow")
SERVER_START_S = 120
STOPPED_WITHIN_S = 150  # MLflow's default retries took over 4 minutes; the benchmark allows about 20 s


class Server:
    """``mlflow server`` in its own process group (it starts uvicorn workers), on a fixed store and port."""

    def __init__(self, folder: Path):
        self.folder, self.port, self.proc = folder, free_port(), None
        self.uri = f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        argv = [MLFLOW, "server", "--backend-store-uri", f"sqlite:///{self.folder}/server.db", "--host", "127.0.0.1",
                "--port", str(self.port), "--artifacts-destination", str(self.folder / "artifacts"), "--workers", "1"]
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}  # no job runners: 2 cores here
        with open(self.folder / "server.log", "a") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + SERVER_START_S
        while not self.healthy():
            assert self.proc.poll() is None, (self.folder / "server.log").read_text()[-2000:]
            assert time.monotonic() < deadline, f"mlflow server not up within {SERVER_START_S} s"
            time.sleep(0.5)

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


@pytest.fixture
def server(tmp_path):
    folder = tmp_path / "server"
    folder.mkdir()
    running = Server(folder)
    running.start()
    yield running
    running.kill()


def leaderboard(folder: Path, uri: str, out: Path) -> str:
    result = run_cli(folder, [sys.executable, "-m", "fedarena.cli", "leaderboard", "faults", "--tracking-uri", uri,
                              "--format", "csv", "--no-figures", "--out", str(out)])
    assert result.returncode == 0, result.stdout + result.stderr
    return (out / "full.csv").read_text()


def server_runs(uri: str) -> list[dict]:
    """Every run of the suite on the server: status, tags, ``acc_pooled`` steps (in logged order), artifacts."""
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("faults")
    found = []
    for run in client.search_runs([experiment.experiment_id]):
        run_id = run.info.run_id
        steps = sorted(m.step for m in client.get_metric_history(run_id, "acc_pooled"))
        files = sorted(a.path for a in client.list_artifacts(run_id))
        found.append({"status": run.info.status, "tags": run.data.tags, "steps": steps, "files": files})
    return found


def assert_finished_once(found: list[dict], rounds: int) -> None:
    assert len(found) == 2 and len({r["tags"]["config_hash"] for r in found}) == 2, found
    for run in found:
        assert run["status"] == "FINISHED" and run["steps"] == list(range(rounds // 30, rounds + 1, rounds // 30)), run
        assert run["files"] == ["clients.csv", "config.json", "result.json"], run


def test_server_killed_mid_suite_stops_soon_the_rerun_loses_nothing_then_skips_and_tabulates(server, tmp_path):
    # Prepare: both trials past their first recorded checkpoint (round 100)
    suite = write_suite(tmp_path)
    bench = Bench(tmp_path, bench_argv(tmp_path, suite, uri=server.uri))
    bench.wait_for(f"s0: round 160/{ROUNDS}")
    bench.wait_for(f"s1: round 160/{ROUNDS}")
    # Execute: kill the server; once the benchmark has stopped, restart it on the same store and rerun; rerun
    # again (nothing left to do), and tabulate through the server and from its SQLite file
    server.kill()
    killed_at = time.monotonic()
    code = bench.wait(timeout=STOPPED_WITHIN_S)
    stopped_after = time.monotonic() - killed_at
    server.start()
    left = server_runs(server.uri)
    rerun = run_cli(tmp_path, bench_argv(tmp_path, suite, uri=server.uri))
    again = run_cli(tmp_path, bench_argv(tmp_path, suite, uri=server.uri))
    tables = (leaderboard(tmp_path, server.uri, tmp_path / "lb-server"),
              leaderboard(tmp_path, f"sqlite:///{server.folder}/server.db", tmp_path / "lb-file"))
    # Assert: one line naming the server; the runs were left RUNNING, and resumed from a checkpoint
    print(f"server killed: the benchmark stopped {stopped_after:.1f} s later")
    lines = bench.err.read_text().strip().splitlines()
    assert code == 2 and len(lines) == 1, bench.text()
    assert f"the tracking store {server.uri} failed (/api/2.0/mlflow/" in lines[0], lines[0]
    # refused once it is down; broken when it died while answering a request
    assert ("Connection refused" in lines[0] or "Connection broken" in lines[0]) and "nothing is lost" in lines[0], lines[0]
    assert_clean(bench.text())
    assert sorted(r["status"] for r in left) == ["RUNNING", "RUNNING"], left
    assert rerun.returncode == 0 and "2 to resume" in rerun.stdout, rerun.stdout + rerun.stderr
    found = server_runs(server.uri)
    assert_finished_once(found, rounds=ROUNDS)
    assert all(int(r["tags"]["resumed_from_round"]) >= 100 for r in found), [r["tags"] for r in found]
    assert not list((tmp_path / "ray").rglob("checkpoint_*"))
    # the second rerun skips both; the leaderboard read through the server is the one read from its store file
    assert again.returncode == 0 and f"2 already finished in {server.uri} (skipped), 0 to resume, 0 new" in \
        again.stdout, again.stdout + again.stderr
    assert tables[0] == tables[1] and "synthetic,global,clean" in tables[0]
