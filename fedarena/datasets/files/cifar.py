"""CIFAR-10 "python version" batches as torchvision stores them: ``<root>/cifar-10-batches-py/``.

Each of ``data_batch_1..5`` and ``test_batch`` is a pickled dict (written by Python 2, hence read with
``encoding="latin1"``) with ``data`` (uint8 [n, 3072], channel-major 3x32x32) and ``labels`` (n ints
in 0..9); ``batches.meta`` holds ``label_names``. The unpickler only admits what these files contain
(dicts, lists, strings and numpy arrays), so a foreign pickle cannot run code.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from fedarena.datasets.files.storage import corrupt_error

FOLDER = "cifar-10-batches-py"
TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCH = "test_batch"
META = "batches.meta"
ALLOWED_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
}


class _ArrayUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) not in ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(f"unexpected object {module}.{name} in a CIFAR batch")
        return super().find_class(module, name)


def read_pickle(dataset: str, path: Path, how: str) -> dict:
    """The batch dict; DataCorruptError for truncated or foreign pickles."""
    try:
        with open(path, "rb") as f:
            obj = _ArrayUnpickler(f, encoding="latin1").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError) as err:
        raise corrupt_error(
            dataset, path, f"not a readable CIFAR pickle ({type(err).__name__}: {err})", how
        ) from None
    if not isinstance(obj, dict):
        raise corrupt_error(dataset, path, f"expected a pickled dict, got {type(obj).__name__}", how)
    return obj


def read_batch(dataset: str, path: Path, how: str) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 [n, 3, 32, 32], labels int64 [n]) of one batch file."""
    batch = read_pickle(dataset, path, how)
    if "data" not in batch or "labels" not in batch:
        raise corrupt_error(dataset, path, f"keys {sorted(map(str, batch))} lack 'data' and 'labels'", how)
    data, labels = np.asarray(batch["data"]), np.asarray(batch["labels"])
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise corrupt_error(
            dataset, path, f"data must be uint8 [n, 3072], got {data.dtype} {data.shape}", how
        )
    if labels.shape != (len(data),) or (len(labels) and (labels.min() < 0 or labels.max() > 9)):
        raise corrupt_error(
            dataset, path, f"labels must be {len(data)} ints in 0..9, got {labels.shape}", how
        )
    return data.reshape(-1, 3, 32, 32), labels.astype(np.int64)


def load_pooled(dataset: str, root: Path, how: str,
                train_only: bool = False) -> tuple[np.ndarray, np.ndarray, list[Path]]:
    """All 60,000 images (5 training batches, then the test batch), or the 50,000 training images alone:
    (x, y, files read)."""
    files = [root / FOLDER / name for name in (TRAIN_BATCHES if train_only else (*TRAIN_BATCHES, TEST_BATCH))]
    meta = read_pickle(dataset, root / FOLDER / META, how)
    if len(meta.get("label_names", ())) != 10:
        raise corrupt_error(dataset, root / FOLDER / META, "label_names must list the 10 classes", how)
    xs, ys = zip(*(read_batch(dataset, p, how) for p in files), strict=True)
    return np.concatenate(xs), np.concatenate(ys), [*files, root / FOLDER / META]
