"""FedTilt's two-client Gaussian toy problem (FedTilt paper, Section IV-A and Table IV).

Two clients, binary classification in 2-D, every class ("group") of a client an isotropic Gaussian with
the centre and standard deviation of Table IV. Sample counts per class (Section IV-A):
experiment 1 (client fairness): 100 training and 20 test points per class;
experiments 2 (client and class fairness) and 3 (outliers): 150 / 50 training and 30 / 10 test points
for class 0 / class 1 (Table IV's groups 1 / 2). In experiment 3 the first class has the large spread
and ``outlier_fraction`` (10%) of its training points get extra N(0, outlier_std^2) noise (0.15).
Validation sets are drawn like the test sets (the paper uses none). The model is logistic regression.
"""

from __future__ import annotations

import numpy as np
import torch

from fedarena.datasets.base import ClientData, FederatedDataset, Split, fingerprint
from fedarena.datasets.catalog import register_dataset
from fedarena.errors import ConfigError

# experiment -> client -> class -> (centre, std)   (FedTilt Table IV; group g is class g - 1)
TABLE_IV = {
    1: [[((0.5, 2.0), 0.5), ((2.5, 1.0), 0.5)], [((1.0, 2.2), 0.5), ((2.2, 0.8), 0.5)]],
    2: [[((0.5, 2.0), 0.35), ((2.0, 1.0), 0.25)], [((0.5, 2.0), 0.35), ((2.5, 1.8), 0.25)]],
    3: [[((1.0, 2.0), 1.0), ((2.5, 1.0), 0.3)], [((1.0, 2.0), 1.0), ((2.5, 1.0), 0.3)]],
}
# experiment -> (train per class, test per class)
COUNTS = {1: ((100, 100), (20, 20)), 2: ((150, 50), (30, 10)), 3: ((150, 50), (30, 10))}


def gaussian_classes(rng: np.random.Generator, spec: list, counts: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Points [sum(counts), 2] and labels of one client's classes, class by class."""
    xs = [rng.normal(centre, std, size=(n, 2)) for (centre, std), n in zip(spec, counts, strict=True)]
    ys = [np.full(n, label) for label, n in enumerate(counts)]
    return np.concatenate(xs), np.concatenate(ys)


def add_outliers(rng: np.random.Generator, x: np.ndarray, y: np.ndarray, fraction: float, std: float) -> np.ndarray:
    """Adds N(0, std^2) noise to round(fraction * count) random class-0 points (FedTilt experiment 3)."""
    first = np.flatnonzero(y == 0)
    chosen = rng.choice(first, size=int(round(fraction * len(first))), replace=False)
    x = x.copy()
    x[chosen] += rng.normal(0.0, std, size=(len(chosen), 2))
    return x


def _split(x: np.ndarray, y: np.ndarray) -> Split:
    return Split(torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.long))


@register_dataset("fedtilt_toy", model="logreg")
def fedtilt_toy(rng: np.random.Generator, *, experiment: int = 1, outlier_fraction: float = 0.1,
                outlier_std: float = 0.15) -> FederatedDataset:
    """FedTilt Table IV, ``experiment`` 1, 2 or 3 (outliers only in 3)."""
    if experiment not in TABLE_IV:
        raise ConfigError(f"fedtilt_toy experiment must be one of {sorted(TABLE_IV)}, got {experiment!r}")
    if not 0 <= outlier_fraction <= 1 or outlier_std < 0:
        raise ConfigError(f"fedtilt_toy needs outlier_fraction in [0, 1] and outlier_std >= 0, got "
                          f"{outlier_fraction}, {outlier_std}")
    train_counts, test_counts = COUNTS[experiment]
    clients, arrays = [], []
    for spec in TABLE_IV[experiment]:
        x_tr, y_tr = gaussian_classes(rng, spec, train_counts)
        if experiment == 3:
            x_tr = add_outliers(rng, x_tr, y_tr, outlier_fraction, outlier_std)
        splits = [(x_tr, y_tr), gaussian_classes(rng, spec, test_counts), gaussian_classes(rng, spec, test_counts)]
        clients.append(ClientData(*(_split(x, y) for x, y in splits)))
        arrays += [np.round(x * 1e6).astype(np.int64).ravel() for x, _ in splits]
    source = f"fedtilt_toy|experiment={experiment}|outliers={outlier_fraction},{outlier_std}"
    meta = {"experiment": experiment, "train_counts": list(train_counts), "test_counts": list(test_counts)}
    return FederatedDataset("fedtilt_toy", clients, num_classes=2, input_shape=(2,),
                            fingerprint=fingerprint(source, arrays), meta=dict(meta, source=source, num_clients=2))
