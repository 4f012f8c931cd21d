"""What the benchmark driver does about its surroundings: signals, Ray's console noise, a second benchmark of
the same suite, scratch folders, and a full disk.

- SIGTERM (a batch scheduler, ``timeout``) is handled as Ctrl+C: Ray Tune stops the trials, the runs are
  marked KILLED and the summary line is printed; the command then exits 143.
- Ray's own log lines (shutdown warnings, its ``Tuner.restore`` hint, which is wrong for a fedarena user) go
  to ``<storage>/.fedarena/logs/driver-<time>.log``; the console shows fedarena's lines.
- One benchmark per (suite, store) at a time: ``SuiteLock`` (an ``flock``, released by the kernel when the
  holder dies, even by SIGKILL) refuses a second one with a line naming the running one.
- Scratch: trials write their temporary checkpoint folders under ``<storage>/.fedarena/tmp/<suite>``; the
  next benchmark of the suite (holding the lock) removes what a killed one left there.
- A full disk or a file-size limit becomes ``StorageFullError``: one line naming the path, what the suite
  needs, and that a rerun resumes.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import re
import shutil
import signal
import socket
import threading
import time
from pathlib import Path

from fedarena.errors import ConfigError

FULL_ERRNOS = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT}
FULL_MESSAGES = ("database or disk is full", "disk i/o error", "file too large", "no space left on device",
                 "disk quota exceeded")
SIGTERM_EXIT = 128 + signal.SIGTERM


class StorageFullError(ConfigError):
    """A write failed for lack of space (or a file-size limit); nothing is lost, a rerun resumes."""


class SuiteBusyError(ConfigError):
    """Another benchmark of the same suite runs on the same store."""


def meta_dir(storage: str | Path) -> Path | None:
    """``<storage>/.fedarena`` for a local storage path (None for remote storage such as s3://)."""
    return None if "://" in str(storage) else Path(storage).resolve() / ".fedarena"


class TermAsInterrupt:
    """Within the block, SIGTERM acts as SIGINT (Ctrl+C) and is remembered in ``received``.

    A SIGTERM sent to the whole process group (``timeout``, a batch scheduler) also ends Ray's own processes,
    and Ray's clean-up then waits for them for a minute before aborting. So ``on_stuck`` (close the runs,
    print the summary, exit) runs if the benchmark has not ended ``grace_s`` after the signal."""

    def __init__(self, on_stuck=None, grace_s: float = 12.0):
        self.received = False
        self._old = None
        self._timer = threading.Timer(grace_s, on_stuck) if on_stuck else None
        if self._timer is not None:
            self._timer.daemon = True

    def _handle(self, signum, frame) -> None:
        if not self.received and self._timer is not None:
            self._timer.start()
        self.received = True
        signal.raise_signal(signal.SIGINT)

    def done(self) -> None:
        """The benchmark ended normally: no ``on_stuck``."""
        if self._timer is not None:
            self._timer.cancel()

    def install(self) -> None:
        """(Re)install the handler: Ray installs its own when it starts in this process."""
        previous = signal.signal(signal.SIGTERM, self._handle)
        if self._old is None:
            self._old = previous

    def __enter__(self) -> TermAsInterrupt:
        self.install()
        return self

    def __exit__(self, *exc) -> None:
        signal.signal(signal.SIGTERM, self._old if self._old is not None else signal.SIG_DFL)


@contextlib.contextmanager
def ray_logs_to_file(folder: Path | None):
    """Send the ``ray`` and ``mlflow`` loggers and Python warnings to a log file in ``folder`` (console
otherwise): fedarena reports their failures itself, in one line."""
    if folder is None:
        yield None
        return
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"driver-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    loggers = [logging.getLogger(name) for name in ("ray", "ray.tune", "ray.train", "py.warnings", "mlflow")]
    saved = [(lg, lg.handlers[:], lg.propagate) for lg in loggers]
    logging.captureWarnings(True)
    for lg in loggers:
        lg.handlers, lg.propagate = [handler], False
    try:
        yield path
    finally:
        for lg, handlers, propagate in saved:
            lg.handlers, lg.propagate = handlers, propagate
        logging.captureWarnings(False)
        handler.close()


class SuiteLock:
    """An exclusive, non-blocking ``flock`` on ``<folder>/<suite>-<store hash>.lock``; the file says who holds
    it (host, pid, start time, command) so a refused benchmark can name the running one."""

    def __init__(self, folder: Path, suite: str, store_uri: str):
        digest = hashlib.sha256(store_uri.encode()).hexdigest()[:12]
        self.path = folder / f"{suite}-{digest}.lock"
        self._file = None

    def acquire(self, store_label: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 (held until release)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown process"
            handle.close()
            raise SuiteBusyError(f"another benchmark of this suite is running on {store_label} ({holder}); wait for "
                                 f"it to end or stop it (its trials resume on the next run), then run this again"
                                 ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} on {socket.gethostname()}, started {time.strftime('%Y-%m-%d %H:%M:%S')}")
        handle.flush()
        self._file = handle

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None


def clear_scratch(folder: Path | None) -> int:
    """Remove what killed benchmarks left in a suite's scratch folder (call it holding the suite's lock);
    returns the number of entries removed."""
    if folder is None or not folder.is_dir():
        return 0
    entries = list(folder.iterdir())
    for entry in entries:
        shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)
    return len(entries)


def is_storage_full(err: BaseException) -> bool:
    """True for a write that failed for lack of space or a file-size limit (also when wrapped by SQLAlchemy
    or MLflow, which keep only the message)."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in FULL_ERRNOS:
            return True
        if any(text in str(err).lower() for text in FULL_MESSAGES):
            return True
        err = err.__cause__ or err.__context__
    return False


def storage_full_message(err: BaseException, paths: dict[str, str | Path | None], needed: int | None) -> str:
    """One line: what failed, the free space of each local path, what the suite needs, that a rerun resumes."""
    first = re.sub(r"\s*\(Background on this error at: [^)]*\)", "", " ".join(str(err).split()))[:200]
    spaces = []
    for label, path in paths.items():
        free = free_bytes(path) if path is not None else None
        if free is not None:
            spaces.append(f"{label} {path}: {human(free)} free")
    need = f"; the suite's checkpoints need about {human(needed)}" if needed else ""
    return (f"a write failed for lack of space ({first}); {'; '.join(spaces) or 'check the storage and store'}"
            f"{need}. Free space (or raise the file-size limit), then run the same command again: it resumes")


def free_bytes(path: str | Path) -> int | None:
    """Free bytes on the file system of ``path`` (its nearest existing parent); None for remote paths."""
    if "://" in str(path):
        return None
    probe = Path(path).resolve()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free


def human(count: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if count < 1024 or unit == "GB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} TB"
