"""IDX files (LeCun's MNIST format, also Fashion-MNIST) in torchvision's layout ``<Name>/raw/``.

torchvision downloads ``train-images-idx3-ubyte.gz`` etc. into ``<root>/<Name>/raw/`` and unpacks each
next to it. We read the unpacked file if present, else the ``.gz``. Every check is explicit: gzip
CRC and truncation, the magic number, the element type, and the exact byte count the header implies.
"""

from __future__ import annotations

import gzip
import math
import struct
import zlib
from pathlib import Path

import numpy as np

from fedarena.datasets.files.storage import corrupt_error

IDX_DTYPES = {
    0x08: np.dtype("u1"),
    0x09: np.dtype("i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
SPLIT_FILES = (
    ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
)


def read_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped if it ends in .gz; ValueError if the gzip stream is damaged."""
    if path.suffix != ".gz":
        return path.read_bytes()
    try:
        with gzip.open(path, "rb") as f:
            return f.read()
    except (OSError, EOFError, zlib.error) as err:  # BadGzipFile, CRC failure, truncated stream
        raise ValueError(f"damaged gzip stream ({err})") from None


def parse_idx(raw: bytes) -> np.ndarray:
    """Decode IDX bytes: magic 0x0000 <type> <ndim>, ndim big-endian uint32 sizes, then the data."""
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in IDX_DTYPES:
        raise ValueError(f"not an IDX file (magic bytes {raw[:4].hex() or 'none'})")
    dtype, ndim = IDX_DTYPES[raw[2]], raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"header truncated: {len(raw)} bytes, {header} needed for {ndim} dimensions")
    dims = struct.unpack(f">{ndim}I", raw[4:header])
    expected = header + math.prod(dims) * dtype.itemsize
    if len(raw) != expected:
        raise ValueError(
            f"size mismatch: header says {dims} ({expected} bytes), file has {len(raw)} bytes "
            "(truncated or wrong file)"
        )
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(dims).astype(dtype.newbyteorder("="))


def locate(folder: Path, base: str) -> Path | None:
    """The unpacked file if torchvision extracted it, else the published .gz, else None."""
    for candidate in (folder / base, folder / f"{base}.gz"):
        if candidate.is_file():
            return candidate
    return None


def read_idx_file(dataset: str, path: Path, how: str) -> np.ndarray:
    try:
        return parse_idx(read_bytes(path))
    except ValueError as err:
        raise corrupt_error(dataset, path, str(err), how) from None


def load_split(
    dataset: str, folder: Path, images: str, labels: str, how: str
) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 [n, 28, 28], labels int64 [n]) of one split, with shape and label checks."""
    paths = [locate(folder, images), locate(folder, labels)]
    x, y = (read_idx_file(dataset, p, how) for p in paths)
    if x.ndim != 3 or x.dtype != np.uint8:
        raise corrupt_error(
            dataset, paths[0], f"expected uint8 images [n, h, w], got {x.dtype} {x.shape}", how
        )
    if y.ndim != 1 or len(y) != len(x):
        raise corrupt_error(dataset, paths[1], f"expected {len(x)} labels, got shape {y.shape}", how)
    if len(y) and (y.min() < 0 or y.max() > 9):
        raise corrupt_error(dataset, paths[1], f"labels outside 0..9 (min {y.min()}, max {y.max()})", how)
    return x, y.astype(np.int64)


def load_pooled(dataset: str, folder: Path, how: str,
                train_only: bool = False) -> tuple[np.ndarray, np.ndarray, list[Path]]:
    """Training and test images pooled (train first), or the training images alone:
    (x [n, 28, 28], y [n], files read)."""
    splits = SPLIT_FILES[:1] if train_only else SPLIT_FILES
    xs, ys = zip(*(load_split(dataset, folder, img, lab, how) for img, lab in splits), strict=True)
    files = [locate(folder, base) for pair in splits for base in pair]
    return np.concatenate(xs), np.concatenate(ys), files
