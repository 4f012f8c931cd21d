"""A1 label poisoning (Ditto Definition 1 / Section 4): malicious devices train on corrupted labels.

Only the training labels of malicious devices change; validation and test data stay clean, and the
input tensors are never modified (a new ``FederatedDataset`` is returned).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from fedarena.attacks.base import Effect, attack
from fedarena.datasets.base import FederatedDataset, Split
from fedarena.errors import ConfigError

LABELLED_TASKS = ("classification", "binary_pm1", "multilabel")  # tasks whose labels an attacker can poison


def poisoned_labels(y: torch.Tensor, task: str, num_classes: int, rng: np.random.Generator) -> torch.Tensor:
    """The A1 labels of one device, as in the reference code (``flearn/trainers_MTL/ditto.py``).

    - ``binary_pm1`` (Vehicle SVM): y -> -y;
    - 2-class ``classification`` (CelebA): y -> 1 - y;
    - multi-class ``classification`` (FEMNIST, Fashion-MNIST): labels drawn uniformly from
      [0, num_classes), independently of the true label (so about 1/C of them keep their class);
    - ``multilabel`` (StackOverflow tags): as many labels as the sample had, drawn uniformly without
      replacement from the num_classes labels (the multi-label analogue of uniform random labels).
    """
    if task == "binary_pm1":
        return -y
    if task == "multilabel":
        return random_label_sets(y, rng)
    if task != "classification":
        raise ConfigError(f"label poisoning (a1) needs a classification task; this dataset's is {task!r}")
    if num_classes == 2:
        return 1 - y
    drawn = rng.integers(0, num_classes, size=len(y))
    return torch.as_tensor(drawn, dtype=y.dtype, device=y.device)


def random_label_sets(y: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
    """[n, C] 0/1 rows with the same number of ones as ``y``'s rows, at uniformly random positions."""
    counts = y.sum(-1).long().tolist()
    rows = np.zeros(tuple(y.shape), dtype=np.float32)
    for i, count in enumerate(counts):
        rows[i, rng.choice(y.shape[-1], size=count, replace=False)] = 1.0
    return torch.as_tensor(rows, dtype=y.dtype, device=y.device)


def poison_dataset(dataset: FederatedDataset, malicious: np.ndarray,
                   rng: np.random.Generator) -> FederatedDataset:
    """A copy of ``dataset`` whose malicious clients hold A1 training labels (clients in index order)."""
    if dataset.task not in LABELLED_TASKS:
        raise ConfigError(f"label poisoning needs a classification dataset; {dataset.name!r} has task "
                          f"{dataset.task!r} (use a model attack such as a2 or a3 instead)")
    clients = []
    for k, client in enumerate(dataset.clients):
        if malicious[k]:
            y = poisoned_labels(client.train.y, dataset.task, dataset.num_classes, rng)
            client = dataclasses.replace(client, train=Split(client.train.x, y))
        clients.append(client)
    return dataclasses.replace(dataset, clients=clients)


@attack("a1", device_reads=())
def label_poisoning(dataset: FederatedDataset, malicious: np.ndarray, rng: np.random.Generator) -> Effect:
    """A1 (Ditto): training labels of the malicious devices flipped (binary) or uniformly random
    (multi-class), once before training."""
    return Effect(poison_dataset(dataset, malicious, rng))
