"""Offline data sources: scikit-learn's digits, Synthetic(alpha, beta), Ditto's point estimation.

They need no download, so the tests and the ``smoke``/``quick`` scales run anywhere.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from fedarena.datasets.base import FederatedDataset, from_partition
from fedarena.datasets.catalog import register_dataset
from fedarena.datasets.partition import PARTITIONERS
from fedarena.datasets.pixels import PIXELS, PixelScale, check_normalization, standardize_images
from fedarena.errors import ConfigError
from fedarena.params import resolve


def partition_labels(
    labels: np.ndarray, num_clients: int, rng: np.random.Generator, partition: str, options: dict
) -> list[np.ndarray]:
    """Run a registered partitioner by name with its options checked against its signature."""
    fn = PARTITIONERS.get(partition)
    return fn(labels, num_clients, rng, **resolve("partition", partition, fn, options))


@register_dataset("digits", model="mlp", version=2)
def digits(
    rng: np.random.Generator,
    *,
    num_clients: int = 30,
    partition: str = "k_classes",
    partition_options: dict | None = None,
    normalize: str = "channel",
) -> FederatedDataset:
    """scikit-learn's 1,797 8x8 handwritten digits (real data that ships with scikit-learn), 10 classes.

    Default partition: Ditto's Fashion-MNIST recipe scaled down (5 classes per client, lognormal sizes).
    Pixels standardised over all of them (``normalize: channel``, the backdoor papers' convention; version 1
    standardised them one by one, ``normalize: pixel``), raw values 0-16 (``datasets.pixels``).
    """
    features, labels, scale = digits_arrays(check_normalization("digits", normalize))
    x = torch.tensor(features, dtype=torch.float32)
    y = torch.tensor(labels, dtype=torch.long)
    options = {"min_size": 20} if partition == "k_classes" else {}
    options.update(partition_options or {})
    parts = partition_labels(labels, num_clients, rng, partition, options)
    source = f"sklearn.load_digits|{partition}|{sorted(options.items())}|normalize={normalize}"
    return from_partition("digits", x, y, parts, rng, num_classes=10, source=source,
                          meta={"partition": partition, **options, "image_shape": (8, 8), PIXELS: scale})


@lru_cache(maxsize=2)
def digits_arrays(normalize: str = "channel") -> tuple[np.ndarray, np.ndarray, PixelScale]:
    """The standardised digit images [1797, 64], their labels and their ``PixelScale`` (raw values 0-16), all
    read-only: parsed once per process (a benchmark worker builds hundreds of digits trials; scikit-learn parses
    its CSV file on every load)."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    features, scale = standardize_images(bunch.data, normalize, channel_axis=None)
    return read_only(features, bunch.target, scale)


def read_only(images: np.ndarray, labels: np.ndarray, scale: PixelScale) -> tuple[np.ndarray, np.ndarray, PixelScale]:
    """The arrays of a per-process cache made read-only (the scale's too), so that no trial's poisoning can write
    into what the next trial of the process reads: a trial builds its tensors from copies."""
    for array in (images, labels, scale.mean, scale.std):
        array.setflags(write=False)
    return images, labels, scale


@register_dataset("synthetic", model="logreg")
def synthetic(
    rng: np.random.Generator,
    *,
    num_clients: int = 30,
    alpha: float = 1.0,
    beta: float = 1.0,
    dim: int = 60,
    num_classes: int = 10,
    max_samples: int = 200,
) -> FederatedDataset:
    """Synthetic(alpha, beta) of FedProx (Li et al. 2020) / LEAF.

    Client k: u_k ~ N(0, alpha), B_k ~ N(0, beta); W_k, b_k ~ N(u_k, 1); v_k ~ N(B_k, 1) per feature;
    x ~ N(v_k, diag(j^-1.2)); y = argmax(W_k x + b_k). Sizes lognormal(4, 2) + 50, capped at max_samples.
    """
    if alpha < 0 or beta < 0:
        raise ConfigError(f"synthetic alpha and beta must be >= 0, got {alpha}, {beta}")
    sizes = np.minimum(rng.lognormal(4, 2, num_clients).astype(int) + 50, max_samples)
    cov_diag = np.arange(1, dim + 1) ** -1.2
    xs, ys, ids = [], [], []
    for k, n in enumerate(sizes):
        u, b_mean = rng.normal(0, np.sqrt(alpha)), rng.normal(0, np.sqrt(beta))
        w, b = rng.normal(u, 1, (dim, num_classes)), rng.normal(u, 1, num_classes)
        v = rng.normal(b_mean, 1, dim)
        x = rng.normal(v, np.sqrt(cov_diag), (n, dim))
        xs.append(x)
        ys.append(np.argmax(x @ w + b, axis=1))
        ids.append(np.full(n, k))
    ids_all = np.concatenate(ids)
    parts = [np.flatnonzero(ids_all == k) for k in range(num_clients)]
    x_t = torch.tensor(np.concatenate(xs), dtype=torch.float32)
    y_t = torch.tensor(np.concatenate(ys), dtype=torch.long)
    source = f"synthetic|alpha={alpha}|beta={beta}|dim={dim}|C={num_classes}|max={max_samples}"
    return from_partition("synthetic", x_t, y_t, parts, rng, num_classes=num_classes, source=source,
                          meta={"alpha": alpha, "beta": beta})


@register_dataset("point_estimation", model="mean")
def point_estimation(
    rng: np.random.Generator,
    *,
    num_clients: int = 20,
    num_adversaries: int = 5,
    samples_per_client: int = 50,
    theta: float = 0.0,
    tau: float = 0.5,
    tau_adv: float = 3.0,
    sigma: float = 1.0,
) -> FederatedDataset:
    """Ditto Section 3.3: device k's mean v_k ~ N(theta, tau^2) (N(theta, tau_adv^2) for adversaries),
    samples x_{k,i} = v_k + N(0, sigma^2). Regression of the device mean: features are a constant 1,
    targets the samples. The adversarial devices are listed in ``meta["malicious"]`` (not benign)."""
    if not 0 <= num_adversaries < num_clients:
        raise ConfigError(f"num_adversaries must be in [0, num_clients), got {num_adversaries}")
    adversaries = np.sort(rng.choice(num_clients, size=num_adversaries, replace=False))
    spread = np.where(np.isin(np.arange(num_clients), adversaries), tau_adv, tau)
    means = rng.normal(theta, spread)
    y = rng.normal(np.repeat(means, samples_per_client), sigma)
    parts = [np.arange(k * samples_per_client, (k + 1) * samples_per_client) for k in range(num_clients)]
    x_t = torch.ones(len(y), 1)
    source = f"point_estimation|K={num_clients}|Ka={num_adversaries}|n={samples_per_client}|{theta},{tau},{tau_adv},{sigma}"
    meta = {"malicious": adversaries.tolist(), "true_means": means.tolist(), "sigma": sigma, "tau": tau,
            "tau_adv": tau_adv}
    return from_partition("point_estimation", x_t, torch.tensor(y, dtype=torch.float32), parts, rng,
                          num_classes=1, source=source, task="regression", meta=meta)
