"""Metrics from per-client, per-class counts (definitions: reference/semantics.md).

Every metric is registered with its direction, so leaderboards never guess whether higher is better.
Robustness and fairness are measured on benign clients only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# name -> True if higher is better
METRIC_DIRECTIONS: dict[str, bool] = {
    "acc_pooled": True,  # sum correct / sum test samples over benign clients (Ditto's "test accuracy")
    "acc_mean": True,  # unweighted mean of benign clients' accuracies
    "acc_std": False,  # population std (ddof 0) of benign clients' accuracies (Ditto's fairness)
    "acc_worst10": True,  # mean accuracy of the worst 10% of benign clients (at least one client)
    "class_std_mean": False,  # FedTilt mu_sigma: mean over benign clients of the std of per-class accuracy
    "class_std_std": False,  # FedTilt sigma_sigma: std of those per-client stds
    "acc_malicious": True,  # pooled accuracy of the malicious clients (NaN when there are none)
    "loss_mean": False,  # mean over benign clients of the mean test loss
    "diverged": False,  # 1 if a non-finite model appeared during training
    "val_acc_pooled": True,  # acc_pooled on the benign clients' validation data (hyperparameter selection)
}


@dataclass(frozen=True)
class Counts:
    """Evaluation of every client: correct[k, c], total[k, c] per class, and summed loss[k]."""

    correct: np.ndarray
    total: np.ndarray
    loss_sum: np.ndarray

    def client_accuracy(self) -> np.ndarray:
        return self.correct.sum(1) / np.maximum(self.total.sum(1), 1)

    def client_loss(self) -> np.ndarray:
        return self.loss_sum / np.maximum(self.total.sum(1), 1)

    def class_std(self) -> np.ndarray:
        """Per client: population std of its per-class accuracies over the classes in its test set."""
        present = self.total > 0
        acc = np.where(present, self.correct / np.maximum(self.total, 1), 0.0)
        n = np.maximum(present.sum(1), 1)
        mean = acc.sum(1) / n
        var = (np.where(present, acc - mean[:, None], 0.0) ** 2).sum(1) / n
        return np.sqrt(var)


def worst_fraction_mean(values: np.ndarray, fraction: float = 0.1) -> float:
    k = max(1, math.ceil(fraction * len(values)))
    return float(np.sort(values)[:k].mean())


def pooled_accuracy(counts: Counts, clients: np.ndarray) -> float:
    """Sum of correct / sum of samples over the given clients (bool mask); 0 when they hold no sample."""
    return float(counts.correct[clients].sum() / max(counts.total[clients].sum(), 1))


def compute_metrics(counts: Counts, malicious: np.ndarray, diverged: bool,
                    val: Counts | None = None) -> dict[str, float]:
    """The registered metrics from the test counts (and ``val``, the validation counts; NaN without)."""
    benign = ~malicious
    if not benign.any():
        raise ValueError("metrics need at least one benign client")
    acc = counts.client_accuracy()[benign]
    class_std = counts.class_std()[benign]
    mal_total = counts.total[malicious].sum()
    return {
        "acc_pooled": pooled_accuracy(counts, benign),
        "acc_mean": float(acc.mean()),
        "acc_std": float(acc.std()),
        "acc_worst10": worst_fraction_mean(acc),
        "class_std_mean": float(class_std.mean()),
        "class_std_std": float(class_std.std()),
        "acc_malicious": float(counts.correct[malicious].sum() / mal_total) if mal_total else float("nan"),
        "loss_mean": float(counts.client_loss()[benign].mean()),
        "diverged": float(diverged),
        "val_acc_pooled": pooled_accuracy(val, benign) if val is not None else float("nan"),
    }


def client_table(counts: Counts, malicious: np.ndarray) -> list[dict]:
    """One row per client: the per-client table written to the result file and MLflow."""
    acc, loss, cstd = counts.client_accuracy(), counts.client_loss(), counts.class_std()
    return [
        {"client": k, "malicious": bool(malicious[k]), "test_samples": int(counts.total[k].sum()),
         "accuracy": float(acc[k]), "loss": float(loss[k]), "class_std": float(cstd[k])}
        for k in range(len(acc))
    ]
