"""A submission's code runs in processes of its own, under a time and a memory limit.

The command starts in a new session (its own process group); every process it starts (Ray's raylet, GCS and
workers among them) is its descendant. Every half second the memory of all of them is added up (proportional set
size: a library mapped by many processes counts once); past the memory limit, or past the time limit, the whole
tree is killed and the outcome says which limit it hit; so is it when the builder itself is interrupted. The
command gets its own working folder and an environment without the site builder's store, Ray cluster or plugins,
with a Ray temporary folder of its own (a local ``ray start`` cluster is not joined), so what it writes is its own
runs (``build``: a store per submission). This alone is process isolation with resource limits, not a security
boundary: ``placement`` adds the sandbox (a wrapper that runs the whole command under bubblewrap) or the isolated
rule processes, and where neither can start the site rejects submissions unless it is
built with ``--trust-submissions``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fedarena.isolation.tree import descendants, memory_mib_of

POLL = 0.5  # seconds between two looks at the process tree
# the builder's cluster, plugins, store, and the isolated rules' secret (a trusted rerun could read it)
STRIPPED = ("RAY_ADDRESS", "FEDARENA_INCLUDE", "MLFLOW_TRACKING_URI", "FEDARENA_ISOLATION_KEY")


@dataclass(frozen=True)
class Outcome:
    returncode: int | None  # None: killed at a limit
    limit: str  # "" or why it was killed: "time limit of 10 s" / "memory limit of 512 MiB"
    output: str  # the last lines of its standard output and error

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.limit


def run_limited(command: list[str], cwd: Path, log: Path, *, seconds: float, memory_mib: int,
                wrapper: Callable[[list[str], Path], list[str]] | None = None,
                extra_env: dict[str, str] | None = None) -> Outcome:
    """Run ``command`` in ``cwd`` (its output to ``log``) until it exits or reaches a limit; ``wrapper`` (argv, Ray's
    temporary folder) -> argv runs it inside a sandbox (``placement``); ``extra_env``: variables the command gets
    besides the builder's (less ``STRIPPED``)."""
    ray_tmp = tempfile.mkdtemp(prefix="fa-ray-")  # short: Ray's socket paths must fit in 107 characters
    env = {k: v for k, v in os.environ.items() if k not in STRIPPED} | dict(extra_env or {}) | {"RAY_TMPDIR": ray_tmp}
    try:
        argv = wrapper(command, Path(ray_tmp)) if wrapper is not None else command
        with open(log, "wb") as out:
            process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                limit = _watch(process, seconds, memory_mib)
            finally:
                _kill_group(process)  # what it left behind, or all of it when the builder is interrupted
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    return Outcome(None if limit else process.returncode, limit, _tail(log))


def _watch(process: subprocess.Popen, seconds: float, memory_mib: int) -> str:
    deadline = time.monotonic() + seconds
    while process.poll() is None:
        tree = descendants(process.pid)
        if time.monotonic() > deadline:
            _kill_tree(process, tree)
            return f"time limit of {seconds:g} s"
        if memory_mib_of(tree) > memory_mib:
            _kill_tree(process, tree)
            return f"memory limit of {memory_mib} MiB"
        time.sleep(POLL)
    return ""


def _kill_tree(process: subprocess.Popen, tree: set[int]) -> None:
    """Kill ``tree`` (looked at while its root still ran, so no pid in it is reused yet) and the group."""
    for pid in tree:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass  # exited between the look and the kill
    _kill_group(process)


def _kill_group(process: subprocess.Popen) -> None:
    """Kill the command's process group (a pgid is not reused while a member lives) and reap the command."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # no member left
    process.wait()


def _tail(log: Path, lines: int = 20) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
