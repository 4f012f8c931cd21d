"""Metrics from per-client, per-class counts (definitions: docs/semantics.md).

Every metric is registered (``@metric``) with its function and its direction, so leaderboards never guess
whether higher is better.
Robustness and fairness are measured on benign clients only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fedarena.registry import Registry


@dataclass(frozen=True)
class Counts:
    """Evaluation of every client: correct[k, c], total[k, c] per class, and summed loss[k]."""

    correct: np.ndarray
    total: np.ndarray
    loss_sum: np.ndarray
    backdoor: Counts | None = None  # a targeted attack's triggered test samples relabelled to its target

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


def attack_success(e: Evaluated) -> np.ndarray | None:
    """Per benign client with eligible samples: the fraction of its triggered test samples its model
    predicted as the target; None without a targeted attack."""
    backdoor = e.counts.backdoor
    if backdoor is None:
        return None
    eligible = e.benign & (backdoor.total.sum(1) > 0)
    return backdoor.client_accuracy()[eligible]


def pooled_accuracy(counts: Counts, clients: np.ndarray) -> float:
    """Sum of correct / sum of samples over the given clients (bool mask); 0 when they hold no sample."""
    return float(counts.correct[clients].sum() / max(counts.total[clients].sum(), 1))


@dataclass(frozen=True)
class Evaluated:
    """What every metric is computed from: test counts of every client, the malicious mask, the divergence
    flag and the validation counts (None where validation was not evaluated)."""

    counts: Counts
    malicious: np.ndarray
    diverged: bool
    val: Counts | None

    @property
    def benign(self) -> np.ndarray:
        return ~self.malicious


@dataclass(frozen=True)
class Metric:
    higher_is_better: bool
    compute: Callable[[Evaluated], float]


METRICS: Registry[Metric] = Registry("metric")


def metric(name: str, higher_is_better: bool, *, version: int = 1):
    """Register ``fn(evaluated) -> float`` as metric ``name`` with its direction and version (bump it with
    any change of its values)."""

    def decorator(fn: Callable[[Evaluated], float]) -> Callable[[Evaluated], float]:
        METRICS.add(name, Metric(higher_is_better, fn), version=version)
        return fn

    return decorator


@metric("acc_pooled", higher_is_better=True)
def acc_pooled(e: Evaluated) -> float:
    """Sum correct / sum test samples over benign clients (Ditto's "test accuracy")."""
    return pooled_accuracy(e.counts, e.benign)


@metric("acc_mean", higher_is_better=True)
def acc_mean(e: Evaluated) -> float:
    """Unweighted mean of benign clients' accuracies."""
    return float(e.counts.client_accuracy()[e.benign].mean())


@metric("acc_std", higher_is_better=False)
def acc_std(e: Evaluated) -> float:
    """Population std (ddof 0) of benign clients' accuracies (Ditto's fairness)."""
    return float(e.counts.client_accuracy()[e.benign].std())


@metric("acc_worst10", higher_is_better=True)
def acc_worst10(e: Evaluated) -> float:
    """Mean accuracy of the worst 10% of benign clients (at least one client)."""
    return worst_fraction_mean(e.counts.client_accuracy()[e.benign])


@metric("class_std_mean", higher_is_better=False)
def class_std_mean(e: Evaluated) -> float:
    """FedTilt mu_sigma: mean over benign clients of the std of their per-class accuracies."""
    return float(e.counts.class_std()[e.benign].mean())


@metric("class_std_std", higher_is_better=False)
def class_std_std(e: Evaluated) -> float:
    """FedTilt sigma_sigma: std of those per-client stds."""
    return float(e.counts.class_std()[e.benign].std())


@metric("acc_malicious", higher_is_better=True)
def acc_malicious(e: Evaluated) -> float:
    """Pooled accuracy of the malicious clients (NaN when there are none)."""
    return pooled_accuracy(e.counts, e.malicious) if e.counts.total[e.malicious].sum() else float("nan")


@metric("loss_mean", higher_is_better=False)
def loss_mean(e: Evaluated) -> float:
    """Mean over benign clients of the mean test loss."""
    return float(e.counts.client_loss()[e.benign].mean())


@metric("diverged", higher_is_better=False)
def diverged(e: Evaluated) -> float:
    """1 if a non-finite model appeared during training."""
    return float(e.diverged)


@metric("asr_pooled", higher_is_better=False)
def asr_pooled(e: Evaluated) -> float:
    """Attack success rate over the benign clients' triggered test samples, pooled (NaN without a targeted
    attack): the fraction predicted as the attacker's target."""
    backdoor = e.counts.backdoor
    if backdoor is None or not backdoor.total[e.benign].sum():
        return float("nan")
    return pooled_accuracy(backdoor, e.benign)


@metric("asr_mean", higher_is_better=False)
def asr_mean(e: Evaluated) -> float:
    """Mean over benign clients of their attack success rate (NaN without a targeted attack)."""
    rates = attack_success(e)
    return float(rates.mean()) if rates is not None and len(rates) else float("nan")


@metric("asr_worst10", higher_is_better=False)
def asr_worst10(e: Evaluated) -> float:
    """Mean attack success rate of the 10% benign clients where it is highest (NaN without a targeted attack)."""
    rates = attack_success(e)
    return -worst_fraction_mean(-rates) if rates is not None and len(rates) else float("nan")


@metric("val_acc_pooled", higher_is_better=True)
def val_acc_pooled(e: Evaluated) -> float:
    """acc_pooled on the benign clients' validation data (hyperparameter selection); NaN without it."""
    return pooled_accuracy(e.val, e.benign) if e.val is not None else float("nan")


# name -> True if higher is better, for readers of the registry (the leaderboards)
def metric_directions() -> dict[str, bool]:
    """name -> higher is better, of every metric registered now (a plugin's too), in registration order: the one
    list of metric names that the engine computes, the store logs and the tables read."""
    return {name: METRICS.get(name).higher_is_better for name in METRICS.registered()}


METRIC_DIRECTIONS: dict[str, bool] = metric_directions()  # the built-in ones (at import, before any plugin)


def plugin_metric_directions() -> dict[str, bool]:
    """name -> higher is better, of the metrics plugins registered (a run records them: the tables read them
    without importing the plugin)."""
    return {name: METRICS.get(name).higher_is_better for name in METRICS.registered()
            if METRICS.origin(name) is not None}


def compute_metrics(counts: Counts, malicious: np.ndarray, diverged: bool,
                    val: Counts | None = None) -> dict[str, float]:
    """Every registered metric from the test counts (and ``val``, the validation counts)."""
    if not (~malicious).any():
        raise ValueError("metrics need at least one benign client")
    evaluated = Evaluated(counts, malicious, diverged, val)
    return {name: METRICS.get(name).compute(evaluated) for name in METRICS.registered()}


def client_table(counts: Counts, malicious: np.ndarray) -> list[dict]:
    """One row per client: the per-client table written to the result file and MLflow."""
    acc, loss, cstd = counts.client_accuracy(), counts.client_loss(), counts.class_std()
    rows = [
        {"client": k, "malicious": bool(malicious[k]), "test_samples": int(counts.total[k].sum()),
         "accuracy": float(acc[k]), "loss": float(loss[k]), "class_std": float(cstd[k])}
        for k in range(len(acc))
    ]
    if counts.backdoor is not None:  # a targeted attack: each client's success rate (NaN: no eligible sample)
        eligible = counts.backdoor.total.sum(1)
        asr = np.where(eligible > 0, counts.backdoor.client_accuracy(), np.nan)
        for row, rate in zip(rows, asr, strict=True):
            row["asr"] = float(rate)
    return rows
