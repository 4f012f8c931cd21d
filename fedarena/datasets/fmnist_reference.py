"""Fashion-MNIST as Ditto's reference script builds it (``pool="reference"`` of the ``fmnist`` dataset).

The script that produced the published numbers (litian96/ditto, ``data/fmnist/create_dataset.py``) differs
from the paper's text and from our default partition (``partition.k_classes`` on the pooled files):

- sizes lognormal(3, 1) + 10 per device, rescaled to the number of training images (60,000);
- device u holds classes (u + j) mod 10, j < 5, with proportions p_j ~ lognormal(1, 1) normalised, and
  takes ``int(p_j * n_u) + 1`` training images of class (u + j) mod 10 from the training file and
  ``int(p_j * n_u / 6) + 1`` test images from the test file;
- each class is consumed in file order, device after device; where a device asks for more than is left,
  that class starts again from its first image (images are reused across devices);
- pixels are standardised with the training file's per-pixel mean and std: (x - mu) / (sigma + 0.001).

A device's training images are shuffled and, as the reference client does under dynamic lambda, the last
10% become its validation set (``flearn/models/client.py``: the first int(0.9 n) train). The reference
trains fixed-lambda runs on all of them and validates on the test set; we always hold the 10% out, so no
choice made on validation data sees test data. Every random number comes from the builder's generator
(one draw of it seeds the partition stream and the shuffle stream, as ``pipeline.seed_streams``).
"""

from __future__ import annotations

import numpy as np
import torch

from fedarena.datasets.base import ClientData, FederatedDataset, Split, fingerprint
from fedarena.datasets.files import idx
from fedarena.datasets.files.sources import Source, require
from fedarena.datasets.files.storage import data_root, size_digest
from fedarena.datasets.pipeline import seed_streams
from fedarena.datasets.pixels import PIXELS, PixelScale
from fedarena.errors import ConfigError

CLASSES_PER_DEVICE = 5
NUM_CLASSES = 10
TEST_DIVISOR = 6  # test images per class: int(p * n / 6) + 1
VAL_FRACTION = 0.1  # the last 10% of a device's shuffled training images
SIGMA_EPS = 0.001


def draw_shares(rng: np.random.Generator, num_clients: int) -> tuple[np.ndarray, np.ndarray]:
    """(raw sizes lognormal(3, 1) + 10 [K], class proportions lognormal(1, 1) normalised [K, 5]), drawn in
    the script's order: all sizes first, then each device's proportions."""
    sizes = rng.lognormal(3.0, 1.0, num_clients) + 10
    props = np.stack([rng.lognormal(1.0, 1.0, CLASSES_PER_DEVICE) for _ in range(num_clients)])
    return sizes, props / props.sum(1, keepdims=True)


def device_counts(sizes: np.ndarray, props: np.ndarray, total: int) -> tuple[np.ndarray, np.ndarray]:
    """([K, 10] training counts, [K, 10] test counts): sizes rescaled to ``total``, then per class
    int(p * n) + 1 training and int(p * n / 6) + 1 test images."""
    n = total * sizes / sizes.sum()
    train = np.zeros((len(sizes), NUM_CLASSES), dtype=np.int64)
    test = np.zeros_like(train)
    for u in range(len(sizes)):
        for j in range(props.shape[1]):
            c = (u + j) % NUM_CLASSES
            train[u, c] = int(props[u, j] * n[u]) + 1
            test[u, c] = int(props[u, j] * n[u] / TEST_DIVISOR) + 1
    return train, test


def take_in_order(counts: np.ndarray, available: int, what: str) -> list[np.ndarray]:
    """Positions within one class taken by each device in turn: consecutive, from a cursor that goes back
    to 0 where the rest of the class is too short (the script's reuse)."""
    if counts.max(initial=0) > available:
        raise ConfigError(f"fmnist pool=reference: a device asks for {counts.max()} {what} images of a class "
                          f"that has {available}; use more images or fewer, smaller devices")
    cursor, taken = 0, []
    for count in counts:
        cursor = 0 if cursor + count > available else cursor
        taken.append(np.arange(cursor, cursor + count))
        cursor += count
    return taken


def assign(labels: np.ndarray, counts: np.ndarray, what: str) -> list[np.ndarray]:
    """Per device, indices into ``labels`` (a file's labels) for its [10] class counts, class by class."""
    per_class = [np.flatnonzero(labels == c) for c in range(NUM_CLASSES)]
    taken = [take_in_order(counts[:, c], len(per_class[c]), what) for c in range(NUM_CLASSES)]
    return [np.concatenate([per_class[c][taken[c][u]] for c in range(NUM_CLASSES)])
            for u in range(counts.shape[0])]


def standardize_by_train(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray, PixelScale]:
    """(x - mu) / (sigma + 0.001) per pixel, mu and sigma over the training images (float32, as the script), of
    both files, and that normalisation as a ``PixelScale`` (raw values 0-255)."""
    flat_train = train.reshape(len(train), -1).astype(np.float32)
    mu, sigma = flat_train.mean(0), flat_train.std(0)

    def scale(x: np.ndarray) -> np.ndarray:
        return ((x.reshape(len(x), -1).astype(np.float32) - mu) / (sigma + SIGMA_EPS)).reshape(x.shape)

    shape = (1, *train.shape[1:])
    pixels = PixelScale(mu.reshape(shape), (sigma + SIGMA_EPS).reshape(shape), float(train.max()), "pixel")
    return scale(train), scale(test), pixels


def split_train_val(idx_train: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The device's shuffled training indices: the first int(0.9 n) train, the rest validate."""
    shuffled = rng.permutation(idx_train)
    cut = int(len(shuffled) * (1 - VAL_FRACTION))
    return shuffled[:cut], shuffled[cut:]


def build_reference(rng: np.random.Generator, source: Source, *, data_dir: str | None,
                    num_clients: int) -> FederatedDataset:
    """The ``fmnist`` dataset with ``pool="reference"`` (see the module docstring)."""
    root = data_root(data_dir)
    require("fmnist", source, root)
    folder = root / f"{source.name}/raw"
    (train_x, train_y), (test_x, test_y) = (idx.load_split("fmnist", folder, img, lab, source.how)
                                            for img, lab in idx.SPLIT_FILES)
    _, part_rng, split_rng = seed_streams(rng)
    sizes, props = draw_shares(part_rng, num_clients)
    counts = device_counts(sizes, props, total=len(train_y))
    train_parts, test_parts = assign(train_y, counts[0], "training"), assign(test_y, counts[1], "test")
    *images, pixels = standardize_by_train(train_x, test_x)
    xs = [torch.from_numpy(np.ascontiguousarray(a)[:, None]) for a in images]
    ys = [torch.from_numpy(train_y), torch.from_numpy(test_y)]
    clients, parts = [], []
    for tr_all, te in zip(train_parts, test_parts, strict=True):
        tr, va = split_train_val(tr_all, split_rng)
        clients.append(ClientData(*(Split(xs[f][i], ys[f][i]) for f, i in ((0, tr), (0, va), (1, te)))))
        parts += [tr, va, te]
    files = [idx.locate(folder, base) for pair in idx.SPLIT_FILES for base in pair]
    text = f"fmnist|files={size_digest(files, root)}|reference|K={num_clients}"
    meta = {"partition": "reference", "pool": "reference", "source": text, "num_clients": num_clients,
            PIXELS: pixels}  # the script standardises by the training file's pixels
    return FederatedDataset("fmnist", clients, num_classes=NUM_CLASSES, input_shape=(1, *train_x.shape[1:]),
                            fingerprint=fingerprint(text, parts), meta=meta)
