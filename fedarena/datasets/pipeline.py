"""The steps every downloaded dataset shares: seed streams, the cached partition, gathering the tensors.

Random streams. A builder draws ONE integer (the seed token) from the trial's generator and derives two
independent generators from it (``np.random.SeedSequence(token).spawn(2)``): one for the partition,
one for the 72/8/20 split. A cached partition therefore leaves the split (and the caller's generator)
exactly where a freshly computed one would: cached and fresh builds have the same fingerprint.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from fedarena.datasets.base import FederatedDataset, fingerprint, from_partition
from fedarena.datasets.files.cache import cached_partition
from fedarena.datasets.files.storage import file_signature
from fedarena.datasets.offline import partition_labels
from fedarena.errors import ConfigError


def seed_streams(rng: np.random.Generator) -> tuple[int, np.random.Generator, np.random.Generator]:
    """(seed token, partition generator, split generator); consumes one draw of ``rng``."""
    token = int(rng.integers(2**63))
    part_seed, split_seed = np.random.SeedSequence(token).spawn(2)
    return token, np.random.default_rng(part_seed), np.random.default_rng(split_seed)


def partition_pool(
    dataset: str,
    keys: np.ndarray,
    num_clients: int | None,
    partition: str,
    options: dict,
    *,
    token: int,
    rng: np.random.Generator,
    root: Path,
    files: list[Path],
    max_samples: int | None = None,
) -> list[np.ndarray]:
    """Run the registered partitioner on ``keys`` (labels, or client ids for ``natural``), cached.

    ``max_samples`` first keeps a uniformly random subset of that many samples (to scale a run down).
    """
    if max_samples is not None and max_samples < 1:
        raise ConfigError(f"dataset {dataset!r}: max_samples must be a positive count, got {max_samples}")

    def compute() -> list[np.ndarray]:
        if max_samples is None or max_samples >= len(keys):
            return partition_labels(keys, num_clients, rng, partition, options)
        keep = np.sort(rng.choice(len(keys), size=max_samples, replace=False))
        return [keep[p] for p in partition_labels(keys[keep], num_clients, rng, partition, options)]

    fields = {
        "dataset": dataset,
        "partition": partition,
        "options": sorted(options.items()),
        "num_clients": num_clients,
        "max_samples": max_samples,
        "seed": token,
        "files": file_signature(files, root),
    }
    return cached_partition(root, fields, keys, compute)


def gather(parts: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
    """(pool indices used, in client order; the same partition re-indexed into that selection)."""
    order = np.concatenate(parts).astype(np.int64)
    local = np.split(np.arange(len(order)), np.cumsum([len(p) for p in parts])[:-1])
    return order, local


def assemble(
    dataset: str,
    parts: list[np.ndarray],
    load_x: Callable[[np.ndarray], torch.Tensor],
    labels: np.ndarray,
    rng: np.random.Generator,
    *,
    num_classes: int,
    source: str,
    task: str = "classification",
    meta: dict | None = None,
) -> FederatedDataset:
    """Load only the samples the clients hold (``load_x(pool indices)``), then split them 72/8/20.

    The fingerprint covers ``source``, the partition in pool indices and the split.
    """
    order, local = gather(parts)
    x = load_x(order)
    y = torch.as_tensor(np.asarray(labels)[order])
    source = f"{source}|partition={fingerprint('', parts)}"
    return from_partition(
        dataset, x, y, local, rng, num_classes=num_classes, source=source, task=task, meta=meta
    )
