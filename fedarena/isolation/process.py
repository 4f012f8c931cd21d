"""The trial's side of an isolated rule: its sandboxed process, the calls to it, and the watch over it.

``RuleProcess(plugin)`` starts ``python -m fedarena.isolation.server`` under bubblewrap (``bwrap.wrap``) with the
plugin's files as its only readable folder of the submission's, reads the registration it answers with, and
then serves ``scope()``s: a trial's (its calls in a fresh child of the rule's process) or a one-off call's. A
watcher thread kills the whole sandbox when its processes together pass the memory limit or their number passes
the process limit (a fork without end); a call that does not answer within the call limit kills it too. A killed
or broken rule process is an ``IsolatedRuleError`` (a RuntimeError: the trial fails), never a hang.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedarena.errors import ConfigError
from fedarena.isolation.bwrap import available, limits, wrap
from fedarena.isolation.tree import descendants, memory_mib_of
from fedarena.isolation.wire import Shared, WireError, decode, encode, write_frame

POLL = 0.1  # seconds between two looks at the sandbox's processes


class IsolatedRuleError(RuntimeError):
    """The isolated rule's process failed, passed a limit or broke the wire format."""


@dataclass(frozen=True)
class RuleLimits:
    call_seconds: float = 600.0  # one call
    memory_mib: int = 4096  # the sandbox's processes together
    processes: int = 8  # the sandbox's processes: its init, the rule's process and a scope's child
    load_seconds: float = 600.0  # the plugin's import and registration (torch and fedarena's rules: seconds)

    @classmethod
    def from_env(cls) -> RuleLimits:
        """Limits the builder set for its workers (``FEDARENA_RULE_LIMITS``: call seconds,MiB,processes)."""
        text = os.environ.get("FEDARENA_RULE_LIMITS", "")
        if not text:
            return cls()
        seconds, memory, processes = text.split(",")
        return cls(float(seconds), int(memory), int(processes))

    def env(self) -> str:
        return f"{self.call_seconds:g},{self.memory_mib},{self.processes}"


class RuleProcess:
    """One sandboxed process serving a plugin's rules (see the module docstring)."""

    def __init__(self, files: tuple[tuple[str, str], ...], entry: str, limits_: RuleLimits | None = None):
        reason = available()
        if reason:
            raise ConfigError(f"an isolated rule needs bubblewrap: {reason}")
        self.limits = limits_ or RuleLimits.from_env()
        self.folder = tempfile.TemporaryDirectory(prefix="fedarena-isolated-")
        for relative, text in files:
            target = Path(self.folder.name) / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        self.shared = Shared.create()
        command = wrap([sys.executable, "-I", "-B", "-m", "fedarena.isolation.server",
                        str(Path(self.folder.name) / entry), str(self.shared.fd), str(self.shared.size)],
                       readable=[self.folder.name])
        self.log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                        preexec_fn=limits(self.limits.memory_mib), start_new_session=True,
                                        pass_fds=(self.shared.fd,))
        self.killed = ""
        self.seq = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._watch, daemon=True).start()
        self.registration = self._first_answer()

    def _first_answer(self) -> dict:
        """The registration the plugin's import gave, or why it gave none (one line)."""
        try:
            answer = self._read(self.limits.load_seconds)
        except IsolatedRuleError:  # it ended, passed a limit or broke the wire while importing
            try:
                code = self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                code = None
            why = self.killed or f"its import ended the process (exit {code}) before it answered"
            self.close()  # the reason names no output of the plugin's: two builds give the same text
            raise ConfigError(f"the submission does not load in its sandbox: {why}") from None
        if "error" in answer or not isinstance(answer.get("registration"), dict):
            self.close()
            raise ConfigError(f"the submission does not load in its sandbox: {answer.get('error', 'no registration')}")
        return answer["registration"]

    def _watch(self) -> None:
        while self.process.poll() is None:
            tree = descendants(self.process.pid)
            if len(tree) > self.limits.processes + 1:  # bubblewrap itself is one more
                self.kill(f"it started more than {self.limits.processes} processes")
            elif memory_mib_of(tree) > self.limits.memory_mib:
                self.kill(f"its processes passed the memory limit of {self.limits.memory_mib} MiB")
            time.sleep(POLL)

    def kill(self, why: str) -> None:
        self.killed = self.killed or why
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # its session: bubblewrap and everything below it
        except (ProcessLookupError, PermissionError):
            pass

    def call(self, request: dict[str, Any]) -> Any:
        """Send one request and wait for its answer (``value``), raising the rule's error as its kind."""
        with self.lock:
            if self.process.poll() is not None:
                raise IsolatedRuleError(self._ended())
            self.seq += 1
            seq = self.seq
            try:
                write_frame(self.process.stdin, encode({**request, "seq": seq}, self.shared))
            except (BrokenPipeError, OSError):
                raise IsolatedRuleError(self._ended()) from None
            answer = self._read(self.limits.call_seconds)
            if answer.get("seq") == -1:
                raise IsolatedRuleError(f"the rule's process ended mid-call (exit {answer.get('ended')})")
            if answer.get("seq") != seq:
                self.kill(f"it answered call {answer.get('seq')!r} to call {seq}")
                raise IsolatedRuleError(self._ended())
            if request.get("op") == "close":  # the scope's child ends: its parent's notice follows
                self._read(self.limits.call_seconds)
        if not answer.get("ok"):
            kind, text = answer.get("kind"), str(answer.get("error", ""))[:600]
            raise (ConfigError if kind == "ConfigError" else IsolatedRuleError)(f"{text}" if kind == "ConfigError"
                                                                                else f"{kind}: {text}")
        return answer.get("value")

    def _read(self, seconds: float) -> dict:
        """One answer, within ``seconds`` (the process is killed past them)."""
        try:
            payload = _read_frame(self.process.stdout.fileno(), time.monotonic() + seconds)
        except TimeoutError:
            self.kill(f"a call did not answer within {seconds:g} s")
            raise IsolatedRuleError(self._ended()) from None
        except (EOFError, OSError, WireError) as err:
            raise IsolatedRuleError(self._ended(str(err))) from None
        try:
            answer = decode(payload, self.shared)
        except WireError as err:
            self.kill(f"it broke the wire format ({err})")
            raise IsolatedRuleError(self._ended()) from None
        if not isinstance(answer, dict):
            self.kill("it answered something other than a mapping")
            raise IsolatedRuleError(self._ended())
        return answer

    def _ended(self, detail: str = "") -> str:
        time.sleep(POLL)  # let the watcher's verdict land
        why = self.killed or detail or f"exit {self.process.poll()}"
        self.log.seek(0)
        tail = " ".join(self.log.read()[-300:].decode(errors="replace").split())
        return f"the isolated rule's process stopped: {why}" + (f" ({tail})" if tail else "")

    def close(self) -> None:
        self.kill("closed")
        self.process.wait()
        self.folder.cleanup()
        self.shared.close()


def _read_frame(fd: int, deadline: float) -> bytes:
    head = _read_exactly(fd, 8, deadline)
    size = int.from_bytes(head, "big")
    if size > 1 << 31:
        raise WireError(f"a frame of {size} bytes")
    return _read_exactly(fd, size, deadline)


def _read_exactly(fd: int, size: int, deadline: float) -> bytes:
    chunks, left = [], size
    while left:
        wait = deadline - time.monotonic()
        if wait <= 0 or not select.select([fd], [], [], wait)[0]:
            raise TimeoutError
        chunk = os.read(fd, min(left, 1 << 24))
        if not chunk:
            raise EOFError("closed its pipe")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
