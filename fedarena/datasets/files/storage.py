"""Where downloaded datasets live, and the errors raised when their files are missing or damaged.

One data directory holds every source in its own usual layout (torchvision's ``FashionMNIST/raw/``,
``cifar-10-batches-py/``, LEAF's ``femnist/train/``...) and the partition cache (``partitions/``).
It is, first match wins: the builder option ``data_dir``, ``$FEDARENA_DATA_DIR``,
``$XDG_CACHE_HOME/fedarena``, ``~/.cache/fedarena``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

from fedarena.errors import ConfigError

ENV_VAR = "FEDARENA_DATA_DIR"


class DataError(ConfigError):
    """A dataset's files cannot be used. The message says which files, where, and how to get them."""


class DataNotFoundError(DataError):
    """Expected files are absent from the data directory."""


class DataCorruptError(DataError):
    """A file is present but truncated, malformed or fails its checksum."""


class DataFetchError(DataError):
    """Downloading failed (offline, server error, checksum mismatch after download)."""


def data_root(data_dir: str | os.PathLike | None = None) -> Path:
    """``data_dir``, else $FEDARENA_DATA_DIR, else $XDG_CACHE_HOME/fedarena, else ~/.cache/fedarena."""
    if data_dir:
        return Path(data_dir).expanduser()
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache).expanduser() / "fedarena"


def fetch_hint(dataset: str) -> str:
    return (
        f"`fedarena data fetch {dataset}` downloads what can be downloaded (else it prints these steps); "
        f"`fedarena data info {dataset}` lists what is present. The data directory is the dataset option "
        f"data_dir (CLI: --data-dir), else ${ENV_VAR}, else $XDG_CACHE_HOME/fedarena or ~/.cache/fedarena"
    )


def missing_error(dataset: str, root: Path, missing: Iterable[str], how: str) -> DataNotFoundError:
    """DataNotFoundError naming the dataset, the directory searched, the missing files and the remedy."""
    listing = "\n".join(f"  - {root / m}" for m in missing)
    return DataNotFoundError(
        f"dataset {dataset!r}: files not found in the data directory {root}:\n{listing}\n"
        f"To get them: {how}.\nCommands: {fetch_hint(dataset)}."
    )


def corrupt_error(dataset: str, path: Path, problem: str, how: str) -> DataCorruptError:
    """DataCorruptError naming the dataset, the damaged file, what is wrong and how to replace it."""
    return DataCorruptError(
        f"dataset {dataset!r}: file {path} is unusable: {problem}.\n"
        f"Delete it and get it again: {how}.\nCommands: {fetch_hint(dataset)}."
    )


def file_signature(paths: Iterable[Path], root: Path) -> list[tuple[str, int, int]]:
    """(path relative to root, size, mtime in ns) of each file, sorted: changes when a file is replaced."""
    rows = []
    for p in paths:
        st = p.stat()
        rows.append(
            (str(p.relative_to(root)) if p.is_relative_to(root) else str(p), st.st_size, st.st_mtime_ns)
        )
    return sorted(rows)


def size_digest(paths: Iterable[Path], root: Path) -> str:
    """Digest of the source files' relative names and sizes (machine-independent, for fingerprints)."""
    rows = [(name, size) for name, size, _ in file_signature(paths, root)]
    return hashlib.sha256(repr(rows).encode()).hexdigest()[:12]


def md5sum(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()
