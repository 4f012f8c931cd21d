"""Partitioners: sample indices of a pooled dataset -> one index array per client.

Each is a pure function of the labels (or ids) and an explicit ``np.random.Generator``. No sample is
given to two clients.
"""

from __future__ import annotations

import numpy as np

from fedarena.errors import ConfigError
from fedarena.registry import Registry

PARTITIONERS: Registry = Registry("partition")


def partitioner(name: str, *, version: int = 1):
    """Register ``fn(labels, num_clients, rng, *, **options) -> [index array per client]`` as partitioner ``name``."""
    return PARTITIONERS.register(name, version=version)


@PARTITIONERS.register("iid")
def iid(labels: np.ndarray, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Uniformly random, (almost) equal-size shards."""
    _check_enough(len(labels), num_clients)
    return [np.sort(part) for part in np.array_split(rng.permutation(len(labels)), num_clients)]


@PARTITIONERS.register("dirichlet")
def dirichlet(
    labels: np.ndarray, num_clients: int, rng: np.random.Generator, *, alpha: float = 0.5, min_size: int = 5
) -> list[np.ndarray]:
    """Per class, split its samples across clients with proportions ~ Dirichlet(alpha) (Hsu et al. 2019).

    Redraws (at most 100 times) until every client holds at least ``min_size`` samples.
    """
    if alpha <= 0:
        raise ConfigError(f"dirichlet alpha must be > 0, got {alpha}")
    _check_enough(len(labels), num_clients * min_size)
    for _ in range(100):
        parts: list[list[int]] = [[] for _ in range(num_clients)]
        for c in np.unique(labels):
            idx = rng.permutation(np.flatnonzero(labels == c))
            cuts = (np.cumsum(rng.dirichlet(np.full(num_clients, alpha))) * len(idx)).astype(int)[:-1]
            for k, chunk in enumerate(np.split(idx, cuts)):
                parts[k].extend(chunk.tolist())
        if min(len(p) for p in parts) >= min_size:
            return [np.sort(np.array(p, dtype=np.int64)) for p in parts]
    raise ConfigError(f"dirichlet(alpha={alpha}) left a client below {min_size} samples in 100 draws")


@PARTITIONERS.register("k_classes")
def k_classes(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    *,
    classes_per_client: int = 5,
    sizes: str = "lognormal",
    total: int | None = None,
    min_size: int = 10,
) -> list[np.ndarray]:
    """Client u holds classes (u + j) mod C for j < classes_per_client (Ditto's Fashion-MNIST recipe).

    ``sizes="lognormal"``: client sizes lognormal(3, 1) + 10 rescaled to ``total`` samples (default: all),
    class proportions within a client lognormal(1, 1) normalised. ``sizes="equal"``: equal sizes and equal
    class shares (FedTilt's "2 classes per client"). Where a class is asked for more samples than it has,
    every client's share of that class is scaled down, so no sample is used twice.
    """
    classes = np.unique(labels)
    num_classes = len(classes)
    if not 1 <= classes_per_client <= num_classes:
        raise ConfigError(f"classes_per_client must be in [1, {num_classes}], got {classes_per_client}")
    if sizes not in ("lognormal", "equal"):
        raise ConfigError(f"k_classes sizes must be 'lognormal' or 'equal', got {sizes!r}")
    total = len(labels) if total is None else min(total, len(labels))
    _check_enough(total, num_clients * min_size)
    demand = _class_demand(num_clients, num_classes, classes_per_client, sizes, total, min_size, rng)
    supply = np.array([np.sum(labels == c) for c in classes])
    owned = demand > 0
    demand = np.floor(demand * np.minimum(1.0, supply / np.maximum(demand.sum(0), 1))).astype(np.int64)
    demand[owned] = np.maximum(demand[owned], 1)  # every client keeps at least one sample of each own class
    for ci in np.flatnonzero(demand.sum(0) > supply):
        demand[:, ci] = _trim_to_supply(demand[:, ci], int(supply[ci]), num_clients)
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for ci, c in enumerate(classes):
        pool = rng.permutation(np.flatnonzero(labels == c))
        for k, chunk in enumerate(np.split(pool[: demand[:, ci].sum()], np.cumsum(demand[:, ci])[:-1])):
            parts[k].append(chunk)
    return [np.sort(np.concatenate(p)) for p in parts]


def _trim_to_supply(column: np.ndarray, supply: int, num_clients: int) -> np.ndarray:
    """Take the excess of one class (left by raising shares to 1) from its largest shares, keeping each >= 1."""
    owners = int((column > 0).sum())
    if owners > supply:
        raise ConfigError(f"k_classes: a class has {supply} samples but {owners} of the {num_clients} clients hold it")
    column = column.copy()
    while column.sum() > supply:
        top = np.argsort(-column)[: int(column.sum() - supply)]
        column[top] -= np.minimum(column[top] - 1, 1)
    return column


def _class_demand(
    num_clients: int, num_classes: int, k: int, sizes: str, total: int, min_size: int, rng: np.random.Generator
) -> np.ndarray:
    """[clients, classes] array of how many samples each client wants of each class."""
    if sizes == "lognormal":
        size = rng.lognormal(3.0, 1.0, num_clients) + 10
    else:
        size = np.ones(num_clients)
    size = np.maximum(size / size.sum() * total, min_size)
    demand = np.zeros((num_clients, num_classes))
    for u in range(num_clients):
        own = (u + np.arange(k)) % num_classes
        share = rng.lognormal(1.0, 1.0, k) if sizes == "lognormal" else np.ones(k)
        demand[u, own] = size[u] * share / share.sum()
    return demand


@PARTITIONERS.register("natural")
def natural(ids: np.ndarray, num_clients: int | None, rng: np.random.Generator) -> list[np.ndarray]:
    """One client per distinct id (writer, celebrity, sensor, user); a random subset if num_clients is set."""
    unique = np.unique(ids)
    if num_clients is not None:
        if num_clients > len(unique):
            raise ConfigError(f"num_clients={num_clients} but the data has only {len(unique)} natural clients")
        unique = np.sort(rng.choice(unique, size=num_clients, replace=False))
    return [np.flatnonzero(ids == u) for u in unique]


def _check_enough(available: int, needed: int) -> None:
    if needed > available:
        raise ConfigError(f"partition needs at least {needed} samples but only {available} are available")
