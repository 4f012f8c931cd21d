"""FEMNIST from LEAF's JSON (Caldas et al. 2018): 62 classes (digits, upper and lower case letters).

LEAF stores each 28x28 image as 784 floats (``1 - pixel / 255`` rows, as written by LEAF's
``data_to_json.py``); they are used as given, shaped [1, 28, 28].
- ``femnist``: Ditto's natural partition: one device per writer, ``num_clients`` writers sampled
  uniformly (paper: 205).
- ``femnist_skewed``: Ditto's "FEMNIST (skewed)": every sample of the files pooled, then 100 devices
  with 5 classes each, device u holding classes (u + j) mod 62 with Ditto's lognormal sizes (the
  Fashion-MNIST recipe; ``k_classes`` partitioner).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from fedarena.datasets.base import FederatedDataset
from fedarena.datasets.catalog import register_dataset
from fedarena.datasets.files import leaf
from fedarena.datasets.files.sources import Source, require
from fedarena.datasets.files.storage import corrupt_error, data_root, size_digest
from fedarena.datasets.pipeline import assemble, partition_pool, seed_streams

NUM_CLASSES = 62
LEAF_CMD = "./preprocess.sh -s niid --sf 1.0 -k 0 -t sample"
HOW = (
    "FEMNIST cannot be downloaded automatically. Generate LEAF's JSON files: `git clone "
    f"https://github.com/TalwalkarLab/leaf && cd leaf/data/femnist && {LEAF_CMD}` (about 1 hour; "
    "--sf 0.05 for a small version), then copy the folders data/train and data/test (or data/all_data) "
    "into femnist/ of the data directory. Ditto's exact 205-writer train/test folders are linked from "
    "data/femnist/README.md of https://github.com/litian96/ditto"
)
SOURCE = Source("FEMNIST (LEAF JSON)", HOW, lambda root, verify: leaf.check_layout(root, "femnist"),
                urls=("https://github.com/TalwalkarLab/leaf",))


def pixels(dataset: str):
    """A LEAF ``convert``: each user's x must be rows of 784 finite numbers -> float32 [n, 1, 28, 28]."""

    def convert(x: list, path: Path, user: str) -> np.ndarray:
        if not x:
            return np.zeros((0, 1, 28, 28), dtype=np.float32)
        try:
            arr = np.asarray(x, dtype=np.float32).reshape(len(x), -1)
        except (TypeError, ValueError):
            raise corrupt_error(
                dataset, path, f"user {user!r}: x rows are not equal-length number lists", HOW
            ) from None
        if arr.shape[1:] != (784,) or not np.all(np.isfinite(arr)):
            raise corrupt_error(
                dataset, path, f"user {user!r}: x rows must be 784 finite numbers, got {arr.shape[1:]}", HOW
            )
        return arr.reshape(-1, 1, 28, 28)

    return convert


def load(dataset: str, root: Path) -> leaf.LeafPool:
    require(dataset, SOURCE, root)
    files = leaf.leaf_files(root, "femnist")
    return leaf.load_pool(dataset, files, HOW, pixels(dataset), leaf.int_labels(dataset, HOW, NUM_CLASSES))


def build(
    dataset: str,
    rng: np.random.Generator,
    root: Path,
    keys: str,
    num_clients: int,
    partition: str,
    options: dict,
    max_samples: int | None = None,
) -> FederatedDataset:
    """Partition the pooled writers' samples by writer id (``keys="ids"``) or by label."""
    pool = load(dataset, root)
    token, part_rng, split_rng = seed_streams(rng)
    parts = partition_pool(
        dataset,
        getattr(pool, keys),
        num_clients,
        partition,
        options,
        token=token,
        rng=part_rng,
        root=root,
        files=pool.files,
        max_samples=max_samples,
    )
    source = (
        f"{dataset}|files={size_digest(pool.files, root)}|{partition}|{sorted(options.items())}"
        f"|max={max_samples}"
    )
    meta = {"partition": partition, **options, "writers_in_files": len(pool.users)}
    return assemble(
        dataset,
        parts,
        lambda order: torch.from_numpy(pool.take(order, np.stack)),
        pool.labels,
        split_rng,
        num_classes=NUM_CLASSES,
        source=source,
        meta=meta,
    )


@register_dataset("femnist", model="cnn_femnist", source=SOURCE)
def femnist(
    rng: np.random.Generator, *, data_dir: str | None = None, num_clients: int = 205
) -> FederatedDataset:
    """FEMNIST, natural partition: ``num_clients`` writers sampled uniformly from the files (Ditto: 205)."""
    return build("femnist", rng, data_root(data_dir), "ids", num_clients, "natural", {})


@register_dataset("femnist_skewed", model="cnn_femnist", source=SOURCE)
def femnist_skewed(
    rng: np.random.Generator,
    *,
    data_dir: str | None = None,
    num_clients: int = 100,
    classes_per_client: int = 5,
    max_samples: int | None = None,
) -> FederatedDataset:
    """FEMNIST (skewed), Ditto App. C: 100 devices with 5 classes each (k_classes, lognormal sizes)."""
    options = {"classes_per_client": classes_per_client, "sizes": "lognormal"}
    return build(
        "femnist_skewed", rng, data_root(data_dir), "labels", num_clients, "k_classes", options, max_samples
    )
