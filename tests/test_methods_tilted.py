"""Tilted losses (TERM, FedTilt's two-level loss) on small hand-computed tensors."""

import math

import pytest
import torch

from fedarena.methods.tilted_loss import tilted_mean, tilted_weights, two_level_tilted_loss

# four real samples and one padded slot: class 0 = {0.5, 1.5}, class 1 = {3.0}, class 2 = {0.2} (+ padding)
LOSSES = torch.tensor([0.5, 1.5, 3.0, 0.2, 0.9], dtype=torch.float64)
CLASSES = torch.tensor([0, 0, 1, 2, 2])
MASK = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0], dtype=torch.float64)
REAL = [0.5, 1.5, 3.0, 0.2]


def two_level(tau, lam, losses=LOSSES):
    return float(two_level_tilted_loss(losses, CLASSES, MASK.to(losses.dtype), 3, tau, lam))


def test_tilted_mean_at_zero_is_the_weighted_mean():
    x, p = torch.tensor([1.0, 2.0, 4.0]), torch.tensor([1.0, 1.0, 2.0])
    assert float(tilted_mean(x, p, 0.0)) == pytest.approx(2.75)


@pytest.mark.parametrize("t", [1.0, -1.0, 3.0, -0.5])
def test_tilted_mean_matches_its_definition(t):
    x, p = torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64), torch.tensor([1.0, 1.0, 2.0], dtype=torch.float64)
    expected = math.log((math.exp(t) + math.exp(2 * t) + 2 * math.exp(4 * t)) / 4) / t
    assert float(tilted_mean(x, p, t)) == pytest.approx(expected, rel=1e-12)


def test_tilted_mean_is_accurate_for_tiny_tilts_in_float32():
    # mean 2.75, weighted variance 1.6875: T(t) = 2.75 + t * 1.6875 / 2 + O(t^2); the plain
    # (1/t) log sum p exp(t x) loses every digit here in float32
    x, p = torch.tensor([1.0, 2.0, 4.0]), torch.tensor([1.0, 1.0, 2.0])
    for t in (1e-6, -1e-6, 1e-3):
        assert float(tilted_mean(x, p, t)) == pytest.approx(2.75 + t * 1.6875 / 2, abs=2e-6)


def test_tilted_mean_tends_to_the_max_and_the_min():
    x, p = torch.tensor([1.0, 2.0, 4.0]), torch.tensor([1.0, 1.0, 2.0])
    assert float(tilted_mean(x, p, 1000.0)) == pytest.approx(4 + math.log(0.5) / 1000, abs=1e-5)
    assert float(tilted_mean(x, p, -1000.0)) == pytest.approx(1 - math.log(0.25) / 1000, abs=1e-5)


def test_two_level_loss_is_the_average_loss_when_tilts_vanish():
    assert two_level(0.0, 0.0) == pytest.approx(sum(REAL) / 4)  # 1.3; the padded 0.9 is ignored
    assert two_level(1e-7, -1e-7) == pytest.approx(1.3, abs=1e-6)


def test_two_level_loss_approaches_the_max_class_loss_for_large_tau():
    # class losses at lambda = 0: 1.0, 3.0, 0.2 with shares 1/2, 1/4, 1/4 -> 3 + log(1/4) / tau
    assert two_level(200.0, 0.0) == pytest.approx(3.0 + math.log(0.25) / 200, rel=1e-9)
    assert two_level(-200.0, 0.0) == pytest.approx(0.2 + math.log(0.25) / -200, rel=1e-9)


def test_two_level_loss_with_large_lambda_takes_the_max_within_each_class():
    # lambda -> inf: class losses -> 1.5, 3.0, 0.2; tau = 0: their mean weighted by shares 1/2, 1/4, 1/4
    class0 = 1.5 + math.log(0.5) / 500  # log((e^(500 * 0.5) + e^(500 * 1.5)) / 2) / 500
    assert two_level(0.0, 500.0) == pytest.approx(0.5 * class0 + 0.25 * 3.0 + 0.25 * 0.2, rel=1e-9)


def test_tau_equal_lambda_is_one_level_term_over_the_samples():
    t = 0.7
    expected = math.log(sum(math.exp(t * v) for v in REAL) / 4) / t
    assert two_level(t, t) == pytest.approx(expected, rel=1e-12)
    assert float(tilted_mean(LOSSES, MASK, t)) == pytest.approx(expected, rel=1e-12)


def test_gradients_stay_finite_with_absent_classes_and_empty_batches():
    losses = LOSSES.clone().requires_grad_(True)
    value = two_level_tilted_loss(losses, CLASSES, MASK, 5, 2.0, -3.0)  # classes 3 and 4 absent
    (g,) = torch.autograd.grad(value, losses)
    assert torch.isfinite(g).all() and g[4] == 0 and g[:4].sum() == pytest.approx(1.0)
    empty = two_level_tilted_loss(losses, CLASSES, torch.zeros(5, dtype=torch.float64), 3, 2.0, -3.0)
    (g0,) = torch.autograd.grad(empty, losses)
    assert float(empty.detach()) == 0.0 and torch.equal(g0, torch.zeros(5, dtype=torch.float64))


def test_tilted_weights_are_a_stable_softmax():
    assert torch.equal(tilted_weights(torch.tensor([3.0, 1.0, 2.0]), 0.0), torch.full((3,), 1 / 3))
    w = tilted_weights(torch.tensor([0.0, math.log(3.0)], dtype=torch.float64), 1.0)
    torch.testing.assert_close(w, torch.tensor([0.25, 0.75], dtype=torch.float64))
    huge = tilted_weights(torch.tensor([1e4, 2e4, 3e4]), 1.0)
    assert torch.equal(huge, torch.tensor([0.0, 0.0, 1.0]))
