"""Vehicle: the SensIT acoustic/seismic data (Duarte & Hu 2004) as distributed for federated MTL.

MOCHA (Smith et al. 2017) and Ditto read ``vehicle.mat``: ``X`` a cell of 23 arrays [n_k, 100] (one
per sensor) and ``Y`` a cell of the matching labels in {-1, +1}. Read from ``vehicle/vehicle.mat`` of
the data directory. As Ditto's ``data/vehicle/create_dataset.py``: features standardised per device
(NaN from constant features -> 0), one device per sensor, labels kept as +-1 (task ``binary_pm1``).
Power-law training sizes (Ditto App. C, reference: ``int(lognormal(3, 1.2)) + 5`` training samples
per device): each device's samples are split 72/8/20, then its training part is cut down to that
size; validation and test parts are kept whole. ``split: reference`` tests, as Ditto's script does, on
every sample not used for training: the training samples the cut leaves out join the test part (the 8%
validation part stays held out, for dynamic lambda; the script has none).
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import scipy.io
import torch
from scipy.io.matlab import MatReadError

from fedarena.datasets.base import ClientData, FederatedDataset, Split, fingerprint, split_indices
from fedarena.datasets.catalog import register_dataset
from fedarena.datasets.files.sources import Source, check_file, require
from fedarena.datasets.files.storage import corrupt_error, data_root, size_digest
from fedarena.datasets.pipeline import partition_pool, seed_streams
from fedarena.errors import ConfigError

FILE = "vehicle/vehicle.mat"
HOW = (
    "Vehicle cannot be downloaded automatically. Place MOCHA's vehicle.mat (cells X: 23 arrays "
    "[n_k, 100], Y: 23 label arrays in {-1, +1}; the file Ditto's data/vehicle/create_dataset.py reads "
    "from raw_data/, see https://github.com/litian96/ditto and https://github.com/gingsmith/fmtl; raw "
    f"data: http://www.ecs.umass.edu/~mduarte/Software.html) at {FILE} of the data directory"
)
SOURCE = Source("Vehicle (MOCHA .mat)", HOW, lambda root, verify: [check_file(root, FILE, None, verify)])
READ_ERRORS = (
    MatReadError,
    ValueError,
    TypeError,
    IndexError,
    OSError,
    EOFError,
    NotImplementedError,
    zlib.error,
    struct.error,
)


def read_mat(dataset: str, path: Path) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per-device features [n_k, d] and labels [n_k] in {-1, +1}, checked."""
    try:
        mat = scipy.io.loadmat(path)
    except READ_ERRORS as err:
        raise corrupt_error(
            dataset, path, f"unreadable .mat file ({type(err).__name__}: {err})", HOW
        ) from None
    if "X" not in mat or "Y" not in mat:
        raise corrupt_error(
            dataset, path, f"expected variables X and Y, found {sorted(k for k in mat if k[0] != '_')}", HOW
        )
    cells_x, cells_y = np.asarray(mat["X"]).ravel(), np.asarray(mat["Y"]).ravel()
    if cells_x.dtype != object or len(cells_x) != len(cells_y) or len(cells_x) == 0:
        raise corrupt_error(dataset, path, "X and Y must be cells with one array per device", HOW)
    xs = [np.asarray(c, dtype=np.float64) for c in cells_x]
    ys = [np.asarray(c, dtype=np.float64).ravel() for c in cells_y]
    dims = {x.shape[1] if x.ndim == 2 else -1 for x in xs}
    if len(dims) != 1 or -1 in dims:
        raise corrupt_error(
            dataset, path, f"every X{{k}} must be [n_k, d] with one d, got {sorted(dims)}", HOW
        )
    for k, (x, y) in enumerate(zip(xs, ys, strict=True)):
        if len(y) != len(x) or not np.all(np.isin(y, (-1.0, 1.0))):
            raise corrupt_error(dataset, path, f"device {k}: Y must hold {len(x)} labels in {{-1, +1}}", HOW)
    return xs, ys


def standardize_device(x: np.ndarray) -> np.ndarray:
    """(x - mean) / std per feature within one device; constant features become 0 (Ditto's script)."""
    std = x.std(axis=0)
    out = (x - x.mean(axis=0)) / np.where(std > 0, std, 1.0)
    return np.where(std > 0, out, 0.0)


def split_device(
    k: int, idx: np.ndarray, rng: np.random.Generator, keep: int | None, split: str = "paper"
) -> tuple[np.ndarray, ...]:
    """72/8/20 split of device k's samples; the training part cut to its first ``keep`` samples, the rest of
    it dropped (``paper``) or tested on (``reference``)."""
    tr, va, te = split_indices(idx, rng)
    if keep is not None:
        tr, left_out = tr[:keep], tr[keep:]
        te = np.concatenate([left_out, te]) if split == "reference" else te
    if len(tr) == 0 or len(te) == 0:
        raise ConfigError(
            f"dataset 'vehicle': device {k} has {len(idx)} samples, too few for a train/test split"
        )
    return tr, va, te


def split_clients(
    x: torch.Tensor, y: torch.Tensor, devices: list[np.ndarray], rng: np.random.Generator, power_law: bool,
    split: str = "paper",
) -> tuple[list[ClientData], list[np.ndarray]]:
    """Every device's ClientData and its (train, val, test) index arrays, in order, for the fingerprint."""
    # drawn first, in both modes, so that "full" and "power_law" share the same random splits
    keep = (rng.lognormal(3.0, 1.2, len(devices)).astype(int) + 5).tolist()
    clients, parts = [], []
    for k, idx in enumerate(devices):
        arrays = split_device(k, idx, rng, keep[k] if power_law else None, split)
        clients.append(ClientData(*(Split(x[i], y[i]) for i in arrays)))
        parts += list(arrays)
    return clients, parts


@register_dataset("vehicle", model="svm", source=SOURCE)
def vehicle(
    rng: np.random.Generator,
    *,
    data_dir: str | None = None,
    num_clients: int = 23,
    train_sizes: str = "power_law",
    split: str = "paper",
) -> FederatedDataset:
    """Vehicle, 23 devices (sensors; ``num_clients`` < 23 samples a subset), 100 features, labels +-1.

    ``train_sizes``: ``power_law`` (Ditto) or ``full`` (every device keeps its whole 72% training part).
    ``split``: ``paper`` (test on the 20% part) or ``reference`` (test on every sample not trained or
    validated on, as Ditto's data/vehicle/create_dataset.py; the same as ``paper`` with ``full``).
    """
    if train_sizes not in ("power_law", "full"):
        raise ConfigError(f"vehicle train_sizes must be 'power_law' or 'full', got {train_sizes!r}")
    if split not in ("paper", "reference"):
        raise ConfigError(f"vehicle split must be 'paper' or 'reference', got {split!r}")
    root = data_root(data_dir)
    require("vehicle", SOURCE, root)
    path = root / FILE
    xs, ys = read_mat("vehicle", path)
    x = torch.tensor(np.concatenate([standardize_device(v) for v in xs]), dtype=torch.float32)
    y = torch.tensor(np.concatenate(ys), dtype=torch.float32)
    ids = np.repeat(np.arange(len(xs)), [len(v) for v in ys])
    token, part_rng, split_rng = seed_streams(rng)
    devices = partition_pool(
        "vehicle", ids, num_clients, "natural", {}, token=token, rng=part_rng, root=root, files=[path]
    )
    clients, parts = split_clients(x, y, devices, split_rng, train_sizes == "power_law", split)
    source = f"vehicle|files={size_digest([path], root)}|natural|train_sizes={train_sizes}"
    source += "|split=reference" if split == "reference" else ""  # paper: the fingerprints of before
    return FederatedDataset(
        "vehicle",
        clients,
        num_classes=2,
        input_shape=(x.shape[1],),
        fingerprint=fingerprint(source, parts),
        task="binary_pm1",
        meta={
            "partition": "natural",
            "train_sizes": train_sizes,
            "split": split,
            "source": source,
            "num_clients": len(clients),
            "devices_in_file": len(xs),
        },
    )
