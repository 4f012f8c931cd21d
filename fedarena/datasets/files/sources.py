"""What files each downloaded dataset needs, how to check them, and how to get them.

A ``Source`` is one upstream distribution (torchvision's Fashion-MNIST files, LEAF's FEMNIST JSON...).
Several registered datasets may share one (``fmnist`` and ``fmnist_fedtilt``): a dataset names its source
when it registers (``register_dataset(..., source=...)``, ``DatasetSpec.source``). ``check`` lists every
expected file with its status; with ``verify=True`` known checksums are computed too (slower, used by
``fedarena data info``). Builders call ``require`` before reading anything.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fedarena.datasets.files.storage import md5sum, missing_error

MISSING, PRESENT, OK, MISMATCH = "missing", "present", "ok (checksum verified)", "checksum mismatch"


@dataclass(frozen=True)
class FileStatus:
    path: str  # relative to the data directory
    status: str  # MISSING, PRESENT, OK or MISMATCH
    detail: str = ""


@dataclass(frozen=True)
class Source:
    """One upstream distribution: its files' layout, how to get them and (if possible) a downloader."""

    name: str
    how: str  # how to get the files: the fetch command, or where to place them by hand
    check: Callable[[Path, bool], list[FileStatus]]  # check(root, verify)
    urls: tuple[str, ...] = ()
    download: Callable[[Path], None] | None = None  # download(root); raises on network failure


def require(dataset: str, source: Source, root: Path) -> list[FileStatus]:
    """The dataset's file statuses; DataNotFoundError if any expected file is missing."""
    rows = source.check(root, False)
    missing = [r.path for r in rows if r.status == MISSING]
    if missing:
        raise missing_error(dataset, root, missing, source.how)
    return rows


def check_file(root: Path, rel: str, md5: str | None, verify: bool) -> FileStatus:
    """Status of one file; its md5 is computed only when ``verify`` and a checksum is known."""
    path = root / rel
    if not path.is_file():
        return FileStatus(rel, MISSING)
    if not (verify and md5):
        return FileStatus(rel, PRESENT, f"{path.stat().st_size} bytes")
    got = md5sum(path)
    if got == md5:
        return FileStatus(rel, OK, f"md5 {got}")
    return FileStatus(rel, MISMATCH, f"md5 {got}, expected {md5}")


def check_glob(root: Path, folder: str, pattern: str) -> FileStatus:
    """Status of a folder that must hold at least one file matching ``pattern``."""
    found = sorted((root / folder).glob(pattern)) if (root / folder).is_dir() else []
    if not found:
        return FileStatus(f"{folder}/{pattern}", MISSING)
    return FileStatus(f"{folder}/{pattern}", PRESENT, f"{len(found)} file(s)")
