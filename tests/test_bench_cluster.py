"""A benchmark on a real two-node Ray cluster on this machine: a head and a worker started with ``ray start``
(token authentication, as Ray sets it up), the driver ``fedarena bench run`` reaching it through
``RAY_ADDRESS``, checkpoints on a folder both nodes see. The worker node is killed (its raylet and its trial
worker) while a trial runs there; the trial must resume on the head node from its last checkpoint and end as
exactly one FINISHED MLflow run with every evaluation round logged once.

Each node is one CPU, so the two trials (the suite of ``test_bench_faults``: 3000 cheap rounds, checkpointed
every 250) run one per node. The cluster lives in its own process groups and temporary folder: the finalizer
ends those groups only (never ``ray stop``, which would end every Ray instance on the machine). The test is
skipped when the cluster cannot start here.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from local_ports import free_port
from test_bench_faults import Bench, children, cmdline, is_trial_worker, write_suite

pytestmark = pytest.mark.integration  # real processes: a two-node Ray cluster (`ray start`), the CLI, signals

RAY = str(Path(sys.executable).parent / "ray")
NODE_START_S = 120
RESUME_TIMEOUT_S = 420
ROUNDS = 1500  # evaluated every 50: about 10 s a trial here, so no trial ends before the node is killed
# The GCS declares a node dead after failed health checks (about 15 s by default): sooner here.
HEALTH = {"RAY_health_check_initial_delay_ms": "1000", "RAY_health_check_period_ms": "1000",
          "RAY_health_check_failure_threshold": "3"}


@dataclass
class Node:
    """One ``ray start --block`` in its own session: its raylet and Ray's workers are its descendants."""

    proc: subprocess.Popen
    log: Path

    def raylet(self) -> int | None:
        return next((pid for pid in children(self.proc.pid) if "/raylet/raylet " in cmdline(pid)), None)

    def trial_workers(self) -> list[int]:
        raylet = self.raylet()
        return [pid for pid in children(raylet) if is_trial_worker(pid)] if raylet else []

    def started(self) -> bool:
        return "Ray runtime started" in self.log.read_text()

    def stop(self) -> None:
        """End this node's process group: SIGTERM, then SIGKILL what is left after a few seconds."""
        for sig, wait_s in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                continue


@dataclass
class Cluster:
    address: str
    env: dict[str, str]
    head: Node
    worker: Node


def start_node(args: list[str], env: dict[str, str], log: Path) -> Node:
    with open(log, "w") as out:
        proc = subprocess.Popen([RAY, "start", "--block", "--num-cpus=1", "--object-store-memory=100000000",
                                 "--node-ip-address=127.0.0.1", "--disable-usage-stats",
                                 f"--dashboard-agent-listen-port={free_port()}", *args],
                                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    return Node(proc, log)


def wait_started(node: Node, nodes: list[Node]) -> None:
    """Wait for ``ray start`` to report the node up; skip the test (after stopping ``nodes``) if it cannot."""
    deadline = time.monotonic() + NODE_START_S
    while not node.started():
        if node.proc.poll() is not None or time.monotonic() > deadline:
            for started in nodes:
                started.stop()
            tail = "\n".join(node.log.read_text().splitlines()[-5:])
            pytest.skip(f"a local Ray cluster cannot start here:\n{tail}")
        time.sleep(0.5)


@pytest.fixture
def cluster(tmp_path):
    # Prepare: one token for both nodes and the driver (Ray reads RAY_AUTH_TOKEN before ~/.ray/auth_token);
    # a short temporary folder of our own (Ray's socket paths must stay under 108 characters)
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16), **HEALTH}
    env.pop("RAY_ADDRESS", None)
    temp = tempfile.mkdtemp(prefix="fa-ray-", dir="/tmp")
    port = free_port()
    head = start_node(["--head", f"--port={port}", f"--temp-dir={temp}", "--include-dashboard=false",
                       f"--dashboard-port={free_port()}"],
                      env, tmp_path / "head.log")
    nodes = [head]
    try:
        wait_started(head, nodes)
        worker = start_node([f"--address=127.0.0.1:{port}"], env, tmp_path / "worker.log")
        nodes.append(worker)
        wait_started(worker, nodes)
        yield Cluster(f"127.0.0.1:{port}", env, head, worker)
    finally:
        for node in reversed(nodes):
            node.stop()
        shutil.rmtree(temp, ignore_errors=True)


def bench_argv(folder: Path, suite: Path) -> list[str]:
    return [sys.executable, "-m", "fedarena.cli", "bench", "run", str(suite), "--scale", "smoke",
            "--tracking-uri", f"sqlite:///{folder}/store/mlflow.db", "--storage", str(folder / "ray"),
            "--checkpoint-every", "250", "--max-failures", "2"]


def store_runs(folder: Path) -> list[dict]:
    """Every run with its status, its tags and the rounds its ``acc_pooled`` history holds."""
    with sqlite3.connect(folder / "store" / "mlflow.db") as db:
        found = []
        for run_id, status in db.execute("SELECT run_uuid, status FROM runs").fetchall():
            tags = dict(db.execute("SELECT key, value FROM tags WHERE run_uuid = ?", (run_id,)).fetchall())
            steps = [s for (s,) in db.execute("SELECT step FROM metrics WHERE run_uuid = ? AND key = 'acc_pooled' "
                                              "ORDER BY step", (run_id,)).fetchall()]
            found.append({"status": status, "tags": tags, "steps": steps})
        return found


def wait_for_worker_trial(bench: Bench, node: Node) -> list[int]:
    """The trial workers on ``node`` once both trials are past their first checkpoint (round 250)."""
    bench.wait_for(f"s0: round 300/{ROUNDS}")
    bench.wait_for(f"s1: round 300/{ROUNDS}")
    workers = node.trial_workers()
    assert workers, f"no trial runs on the worker node:\n{bench.text()}"
    return workers


def test_killed_node_trial_resumes_on_the_other_node(cluster, tmp_path, monkeypatch):
    # Prepare: the driver joins the cluster (RAY_ADDRESS) with its token
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN"):
        monkeypatch.setenv(name, cluster.env[name])
    monkeypatch.setenv("RAY_ADDRESS", cluster.address)
    bench = Bench(tmp_path, bench_argv(tmp_path, write_suite(tmp_path, rounds=ROUNDS)))
    workers = wait_for_worker_trial(bench, cluster.worker)
    # Execute: the worker node dies: its raylet and its trial worker at once. Killing the raylet alone races
    # the worker, which notices its raylet is gone only after a while and may finish its trial first.
    for pid in (cluster.worker.raylet(), *workers):
        os.kill(pid, signal.SIGKILL)
    code = bench.wait(timeout=RESUME_TIMEOUT_S)
    # Assert: the trial on the dead node was retried from its checkpoint on the head, logged once per round
    found = store_runs(tmp_path)
    text = bench.text()
    assert code == 0, text
    assert "retrying from its checkpoint at round" in text, text
    assert len(found) == 2 and len({r["tags"]["config_hash"] for r in found}) == 2, found
    every = ROUNDS // 30  # the evaluation interval
    assert all(r["status"] == "FINISHED" and r["steps"] == list(range(every, ROUNDS + 1, every)) for r in found), found
    retried = [r for r in found if r["tags"].get("num_failures", "0") != "0"]
    assert len(retried) == 1 and int(retried[0]["tags"]["resumed_from_round"]) >= 250, found
    assert not any(is_trial_worker(pid) for pid in workers)
    assert cluster.head.raylet() is not None and cluster.worker.raylet() is None
    assert not list((tmp_path / "ray").rglob("checkpoint_*"))
