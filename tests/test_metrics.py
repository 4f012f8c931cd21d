"""Metrics on hand-made counts."""

import math

import numpy as np
import pytest

from fedarena.simulation.metrics import Counts, compute_metrics


def make_counts() -> Counts:
    # 4 clients x 2 classes. Client accuracies: 0.5, 1.0, 0.75, 0.0 (client 3 malicious)
    correct = np.array([[1, 1], [2, 2], [3, 0], [0, 0]], dtype=float)
    total = np.array([[2, 2], [2, 2], [3, 1], [1, 1]], dtype=float)
    return Counts(correct, total, loss_sum=np.array([4.0, 0.0, 2.0, 9.0]))


def test_metrics_on_benign_clients():
    m = compute_metrics(make_counts(), np.array([False, False, False, True]), diverged=False)
    assert m["acc_pooled"] == pytest.approx(9 / 12)
    assert m["acc_mean"] == pytest.approx((0.5 + 1.0 + 0.75) / 3)
    assert m["acc_std"] == pytest.approx(np.std([0.5, 1.0, 0.75]))
    assert m["acc_worst10"] == pytest.approx(0.5)  # ceil(0.1 * 3) = 1 client
    # per-class accuracy stds: client 0: [.5,.5] -> 0, client 1: [1,1] -> 0, client 2: [1, 0] -> 0.5
    assert m["class_std_mean"] == pytest.approx(0.5 / 3)
    assert m["class_std_std"] == pytest.approx(np.std([0, 0, 0.5]))
    assert m["acc_malicious"] == 0.0
    assert m["loss_mean"] == pytest.approx((1.0 + 0.0 + 0.5) / 3)
    assert m["diverged"] == 0.0


def test_class_std_ignores_classes_absent_from_a_client():
    counts = Counts(np.array([[1.0, 0.0, 3.0]]), np.array([[2.0, 0.0, 3.0]]), np.zeros(1))
    assert counts.class_std()[0] == pytest.approx(0.25)  # std of [0.5, 1.0]


def test_no_malicious_clients_gives_nan_malicious_accuracy():
    m = compute_metrics(make_counts(), np.zeros(4, dtype=bool), diverged=True)
    assert math.isnan(m["acc_malicious"]) and m["diverged"] == 1.0


def test_validation_accuracy_is_pooled_over_benign_clients_only():
    # Prepare: validation counts where the malicious client (3) is perfect and the benign ones are not
    val = Counts(np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 0.0], [5.0, 5.0]]),
                 np.array([[2.0, 0.0], [2.0, 2.0], [0.0, 0.0], [5.0, 5.0]]), np.zeros(4))
    # Execute
    m = compute_metrics(make_counts(), np.array([False, False, False, True]), diverged=False, val=val)
    # Assert: (1 + 2 + 0) / (2 + 4 + 0); without validation counts it is NaN
    assert m["val_acc_pooled"] == pytest.approx(3 / 6)
    assert math.isnan(compute_metrics(make_counts(), np.zeros(4, dtype=bool), diverged=False)["val_acc_pooled"])
