"""Trials two benchmarks on one store would both compute: whoever claims a trial first computes it, the other
waits for its run and reuses it (``RunStore.link``), so a trial shared by two suites is computed once even
when both run at the same time.

Each benchmark holding its suite's lock (``guard.SuiteLock``) writes the identities (``config_hash``) it is
about to compute to ``<lock folder>/claims-<store>/<suite>.json``. A benchmark plans holding one exclusive
``flock`` per store (``planning``): it reads the store, reads the others' claims and writes its own, so
two benchmarks planning at once see each other, and a claim is never released (``release`` takes the same
lock) between another benchmark's reading of the store and its reading of the claims.
A claim counts while its benchmark lives, i.e. while its suite lock is held (the kernel releases it when the
holder dies, even by SIGKILL); a dead benchmark's claims are ignored and its unfinished trials run here.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path


def lock_held(path: Path) -> bool:
    """Whether another open file holds an ``flock`` on ``path`` (a live benchmark's suite lock)."""
    try:
        handle = open(path, "a", encoding="utf-8")  # noqa: SIM115 (closed below)
    except OSError:
        return False
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False
    finally:
        handle.close()


class Claims:
    """This benchmark's claims on a store, beside its suite lock ``suite_lock`` (see the module)."""

    def __init__(self, folder: Path, suite: str, store_uri: str, suite_lock: Path):
        digest = hashlib.sha256(store_uri.encode()).hexdigest()[:12]
        self.folder = folder / f"claims-{digest}"
        self.guard = folder / f"claims-{digest}.lock"
        self.path = self.folder / f"{suite}.json"
        self.suite, self.suite_lock = suite, suite_lock
        self._depth = 0

    def planning(self) -> _Flock:
        """Hold the store's claims lock while planning (reading the store, then claiming)."""
        return self._guarded()

    def claim(self, hashes: Iterable[str]) -> dict[str, str]:
        """Claim ``hashes`` but those a live benchmark of another suite claimed; returns those (hash -> suite)."""
        wanted = list(hashes)
        with self._guarded():
            taken = self.others()
            mine = sorted({h for h in wanted if h not in taken} | set(self._read(self.path).get("hashes", [])))
            self._write(mine)
        return {h: taken[h] for h in wanted if h in taken}

    def others(self) -> dict[str, str]:
        """hash -> suite of every live benchmark's claims but this one's."""
        taken: dict[str, str] = {}
        for path in sorted(self.folder.glob("*.json")) if self.folder.is_dir() else ():
            if path == self.path:
                continue
            data = self._read(path)
            if data and lock_held(Path(data.get("lock", ""))):
                taken.update({h: str(data.get("suite", path.stem)) for h in data.get("hashes", [])})
        return taken

    def release(self) -> None:
        with self._guarded():
            self.path.unlink(missing_ok=True)

    def _write(self, hashes: list[str]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"suite": self.suite, "lock": str(self.suite_lock), "pid": os.getpid(),
                                   "hashes": hashes}))
        tmp.replace(self.path)

    @staticmethod
    def _read(path: Path) -> dict:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return {}

    def _guarded(self) -> _Flock:
        return _Flock(self)


class _Flock:
    """The claims' exclusive, blocking ``flock`` for the duration of a ``with`` block (nested blocks of one
    ``Claims`` share it)."""

    def __init__(self, claims: Claims):
        self.claims = claims

    def __enter__(self) -> None:
        claims = self.claims
        if claims._depth == 0:
            claims.guard.parent.mkdir(parents=True, exist_ok=True)
            claims._handle = open(claims.guard, "a", encoding="utf-8")  # noqa: SIM115 (closed in __exit__)
            fcntl.flock(claims._handle, fcntl.LOCK_EX)
        claims._depth += 1

    def __exit__(self, *exc) -> None:
        claims = self.claims
        claims._depth -= 1
        if claims._depth == 0:
            fcntl.flock(claims._handle, fcntl.LOCK_UN)
            claims._handle.close()
