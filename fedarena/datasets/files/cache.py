"""Partition cache: client index arrays stored under ``<data dir>/partitions/<key>.npz``.

A benchmark grid builds the same partition for many trials (same dataset, options and seed). The key
hashes everything the partition depends on: dataset name, partitioner and its options, number of
clients, the seed token drawn from the trial's generator, the source files (relative name, size,
mtime) and a digest of the partitioned array itself (labels or client ids). A damaged or unreadable
cache entry is ignored and rebuilt; a read-only data directory only disables the cache (a warning).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

CACHE_VERSION = 1  # bump when a partitioner's output changes for the same inputs


def partition_key(fields: dict, keys: np.ndarray) -> str:
    """sha256 of the JSON of ``fields`` and the bytes of the partitioned array ``keys``."""
    h = hashlib.sha256(json.dumps({"v": CACHE_VERSION, **fields}, sort_keys=True, default=repr).encode())
    arr = np.ascontiguousarray(keys)
    h.update(str(arr.dtype).encode())
    h.update(arr.tobytes())
    return h.hexdigest()[:32]


def load_partition(path: Path) -> list[np.ndarray] | None:
    """The cached client index arrays, or None if the entry is absent or unreadable."""
    if not path.is_file():
        return None
    try:
        with np.load(path) as z:
            indices, lengths = z["indices"], z["lengths"]
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None
    if lengths.sum() != len(indices) or np.any(lengths < 0):
        return None
    return np.split(indices.astype(np.int64), np.cumsum(lengths)[:-1])


def save_partition(path: Path, parts: list[np.ndarray]) -> None:
    """Write atomically (temporary file + rename) so parallel trials never read half a file."""
    lengths = np.array([len(p) for p in parts], dtype=np.int64)
    indices = np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            np.savez(f, indices=indices, lengths=lengths)
        os.replace(tmp, path)
    except OSError as err:
        warnings.warn(f"partition cache disabled: cannot write {path}: {err}", stacklevel=2)


def cached_partition(
    cache_dir: Path, fields: dict, keys: np.ndarray, compute: Callable[[], list[np.ndarray]]
) -> list[np.ndarray]:
    """``compute()`` once per key; later calls with the same key read ``cache_dir/partitions/<key>.npz``."""
    path = cache_dir / "partitions" / f"{partition_key(fields, keys)}.npz"
    parts = load_partition(path)
    if parts is None:
        parts = [np.asarray(p, dtype=np.int64) for p in compute()]
        save_partition(path, parts)
    return parts
