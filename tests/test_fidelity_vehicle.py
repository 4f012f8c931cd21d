"""Vehicle as the reference code runs it (issue 17 item 7): the linear SVM initialised at zero, lr 0.01 and
600 rounds of one local step in the reproduction suites; the paper's lr 0.1 in the rounds procedure."""

import torch

from fedarena.models.functional import build_model


def test_zero_init_svm_starts_at_zero_and_the_default_does_not():
    # Execute
    _, zero = build_model("svm", {"zero_init": True}, (100,), 2, "binary_pm1", seed=3, device=torch.device("cpu"))
    _, default = build_model("svm", {}, (100,), 2, "binary_pm1", seed=3, device=torch.device("cpu"))
    # Assert: 100 weights and a bias, all zero (reference: W = tf.zeros([100, 1]), b = tf.zeros([1]))
    assert zero.shape == (101,) and torch.equal(zero, torch.zeros(101))
    assert default.abs().sum() > 0

