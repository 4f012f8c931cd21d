"""The FederatedDataset container and the per-client train/val/test split.

Client data are plain tensors (no DataLoader per client) so the simulation can keep them on the
trial's device and index minibatches directly.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np
import torch

from fedarena.errors import ConfigError

SPLIT_FRACTIONS = (0.72, 0.08, 0.20)  # Ditto Appendix C: train / validation / test per device


class Split(NamedTuple):
    x: torch.Tensor
    y: torch.Tensor

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def to(self, device: torch.device | str) -> Split:
        return Split(self.x.to(device), self.y.to(device))


@dataclass(frozen=True)
class ClientData:
    train: Split
    val: Split
    test: Split

    def to(self, device: torch.device | str) -> ClientData:
        return ClientData(self.train.to(device), self.val.to(device), self.test.to(device))


@dataclass(frozen=True)
class FederatedDataset:
    """Clients with train/val/test tensors.

    ``task`` is ``classification`` (integer labels in [0, num_classes)), ``binary_pm1`` (labels -1/+1,
    for the linear SVM; num_classes = 2) or ``regression`` (real targets; num_classes = 1).
    ``fingerprint`` hashes the source and the partition/split indices: two trials with the same
    fingerprint saw the same data.
    """

    name: str
    clients: list[ClientData]
    num_classes: int
    input_shape: tuple[int, ...]
    fingerprint: str
    task: str = "classification"
    meta: dict = field(default_factory=dict)

    @property
    def num_clients(self) -> int:
        return len(self.clients)

    def train_sizes(self) -> np.ndarray:
        return np.array([len(c.train) for c in self.clients], dtype=np.int64)

    def to(self, device: torch.device | str) -> FederatedDataset:
        return replace(self, clients=[c.to(device) for c in self.clients])


def split_indices(
    indices: np.ndarray, rng: np.random.Generator, fractions: tuple[float, float, float] = SPLIT_FRACTIONS
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random train/val/test split of one client's sample indices (test gets the rounding remainder)."""
    n = len(indices)
    perm = rng.permutation(indices)
    n_train = int(round(fractions[0] * n))
    n_val = int(round(fractions[1] * n))
    n_train = min(n_train, n - n_val)
    return perm[:n_train], perm[n_train : n_train + n_val], perm[n_train + n_val :]


def fingerprint(source: str, parts: list[np.ndarray]) -> str:
    """sha256 over the source description and every index array, in order (first 16 hex digits)."""
    h = hashlib.sha256(source.encode())
    for arr in parts:
        a = np.ascontiguousarray(arr, dtype=np.int64)
        h.update(len(a).to_bytes(8, "little"))
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def from_partition(
    name: str,
    x: torch.Tensor,
    y: torch.Tensor,
    client_indices: list[np.ndarray],
    rng: np.random.Generator,
    *,
    num_classes: int,
    source: str,
    task: str = "classification",
    meta: dict | None = None,
    fractions: tuple[float, float, float] = SPLIT_FRACTIONS,
) -> FederatedDataset:
    """Split every client's indices 72/8/20 and gather the tensors. Errors if a client gets no test data."""
    clients, parts = [], []
    for k, idx in enumerate(client_indices):
        tr, va, te = split_indices(np.asarray(idx), rng, fractions)
        if len(tr) == 0 or len(te) == 0:
            raise ConfigError(
                f"dataset {name!r}: client {k} has {len(idx)} samples, which leaves it without "
                f"{'training' if len(tr) == 0 else 'test'} data after the {fractions} split; "
                "use fewer clients or a larger minimum client size"
            )
        clients.append(ClientData(*(Split(x[i], y[i]) for i in (tr, va, te))))
        parts += [tr, va, te]
    return FederatedDataset(
        name=name,
        clients=clients,
        num_classes=num_classes,
        input_shape=tuple(x.shape[1:]),
        fingerprint=fingerprint(source, parts),
        task=task,
        meta=dict(meta or {}, source=source, num_clients=len(clients)),
    )
