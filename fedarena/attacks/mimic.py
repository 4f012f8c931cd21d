"""Mimic (Karimireddy, He and Jaggi, ICLR 2022, Section 5 "Mimic attack"): the malicious devices copy one
honest device's update, so that a robust rule over-represents that device's data and the model drifts to it.

The paper's attackers pick the honest worker furthest along the honest updates' top principal direction once,
after a warm-up, and copy it from then on (every worker takes part in every step there). Here devices are
sampled, so the choice is a fixed ranking of the honest devices, made once from the data: by how far a device's
data lie from the pooled data (the total variation between its training label histogram and the pooled one for
a classification task; for other tasks, the L1 distance between its mean training input and the pooled mean;
ties to the lower id). Each round the malicious devices copy the update of the highest-ranked honest device
among the round's rows: the paper's outlier when it is sampled, the next outlier when not. A round without an
honest row is left as it is.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch

from fedarena.attacks.base import Effect, attack, with_rows
from fedarena.datasets.base import FederatedDataset


def data_summary(dataset: FederatedDataset) -> np.ndarray:
    """[clients, k]: each device's training label histogram (classification with integer labels) or mean
    input, and a last row: the pooled one (weighted by sample counts)."""
    rows, counts = [], []
    for client in dataset.clients:
        x, y = client.train
        if dataset.task == "classification" and y.dim() == 1:
            rows.append(np.bincount(y.cpu().numpy().astype(np.int64), minlength=dataset.num_classes) / max(len(y), 1))
        else:
            rows.append(x.reshape(len(x), -1).double().mean(dim=0).cpu().numpy() if len(x) else None)
        counts.append(len(y))
    width = next(r.shape[0] for r in rows if r is not None)
    table = np.stack([np.zeros(width) if r is None else r for r in rows])
    weights = np.asarray(counts, dtype=np.float64)
    pooled = weights @ table / max(weights.sum(), 1.0)
    return np.vstack([table, pooled])


def outlier_ranking(dataset: FederatedDataset, malicious: np.ndarray) -> np.ndarray:
    """[clients]: each device's rank among the honest ones, 0 = furthest from the pooled data; malicious
    devices rank last (never copied)."""
    summary = data_summary(dataset)
    distance = np.abs(summary[:-1] - summary[-1]).sum(axis=1)
    distance[malicious] = -np.inf
    order = np.lexsort((np.arange(len(distance)), -distance))  # furthest first, ties to the lower id
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return rank


def mimicked_updates(updates: torch.Tensor, bad: torch.Tensor, gen: torch.Generator, *, ids: torch.Tensor,
                     rank: torch.Tensor) -> torch.Tensor:
    """Every malicious row becomes the update of the round's highest-ranked honest device."""
    honest = torch.nonzero(~bad).reshape(-1)
    if honest.numel() == 0:
        return updates
    chosen = honest[torch.argmin(rank[ids[honest.cpu()]])]
    return with_rows(updates, bad, updates[chosen])


@attack("mimic", device_reads=("honest_updates", "device_data"))  # copies an honest row; ranks by every device's data
def mimic(dataset: FederatedDataset, malicious: np.ndarray, rng: np.random.Generator) -> Effect:
    """Mimic: malicious devices send a copy of the round's most outlying honest device's update."""
    rank = torch.from_numpy(outlier_ranking(dataset, malicious))
    return Effect(dataset, tamper=partial(mimicked_updates, rank=rank), needs_ids=True)
