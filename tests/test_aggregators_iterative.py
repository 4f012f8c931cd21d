"""FedMGDA+ (and its QP solver), the geometric median (RFA) and centered clipping."""

import math

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from fedarena.errors import ConfigError
from fedarena.methods.aggregators import AGGREGATORS
from fedarena.methods.aggregators.mgda import min_norm_weights, null_basis

SEVEN = [(1.0, 1.0), (1.3, 0.9), (0.9, 1.1), (1.1, 1.4), (0.8, 0.7), (9.0, 7.0), (-6.0, 12.0)]


def tensor(rows):
    return torch.tensor(rows, dtype=torch.float64)


def run(name, updates, weights=None, f=0, **params):
    weights = torch.ones(updates.shape[0], dtype=updates.dtype) if weights is None else tensor(weights)
    return AGGREGATORS.get(name).rule(updates, weights=weights, losses=None, f=f, **params)


def expect(actual, expected, atol=1e-9):
    assert torch.allclose(actual, torch.as_tensor(expected, dtype=actual.dtype), atol=atol), actual


def scipy_fedmgda(updates: np.ndarray, eps: float) -> np.ndarray:
    """Reference solution of the FedMGDA+ QP with SLSQP (independent of our solver)."""
    g = updates / np.linalg.norm(updates, axis=1, keepdims=True)
    gram, n = g @ g.T, len(g)
    lo, hi = max(0.0, 1 / n - eps), min(1.0, 1 / n + eps)
    result = minimize(
        lambda lam: lam @ gram @ lam,
        np.full(n, 1 / n),
        jac=lambda lam: 2 * gram @ lam,
        method="SLSQP",
        bounds=[(lo, hi)] * n,
        constraints=[{"type": "eq", "fun": lambda lam: lam.sum() - 1}],
        options={"ftol": 1e-15, "maxiter": 1000},
    )
    return result.x @ g


def test_null_basis_is_orthonormal_and_sums_to_zero():
    for k in (2, 3, 10):
        basis = null_basis(k)
        assert np.allclose(basis.T @ basis, np.eye(k - 1)) and np.allclose(basis.sum(axis=0), 0.0)


@pytest.mark.parametrize("eps", [0.1, 0.5, 1.0])
def test_fedmgda_with_copied_updates_finds_the_min_norm_direction(eps):
    # Mimic's attackers copy one honest update: G is singular and the weights are not unique, the aggregated
    # direction is (the min-norm point of a convex set); SLSQP reaches it from its own start
    rng = np.random.default_rng(7)
    updates = rng.normal(size=(10, 6)) + np.array([0.8, 0.0, -0.4, 0.2, 0.0, 0.1])
    updates[:3] = updates[7]
    expect(run("fedmgda_plus", tensor(updates), eps=eps), scipy_fedmgda(updates, eps), atol=1e-6)


def test_fedmgda_weights_are_feasible_and_optimal_on_random_problems():
    # the KKT conditions by brute force: no feasible pairwise transfer of weight lowers the objective
    rng = np.random.default_rng(11)
    for trial in range(40):
        n = int(rng.integers(3, 12))
        g = rng.normal(size=(n, 5)) + rng.normal(size=5)
        g[: trial % 3] = g[-1]  # some with copies
        g /= np.linalg.norm(g, axis=1, keepdims=True)
        gram, eps = g @ g.T, float(rng.choice([0.05, 0.2, 1.0]))
        lam = min_norm_weights(gram, eps, 10_000, 1e-12)
        lo, hi = max(0.0, 1 / n - eps), min(1.0, 1 / n + eps)
        assert abs(lam.sum() - 1) < 1e-12 and lam.min() >= lo - 1e-12 and lam.max() <= hi + 1e-12
        grad = 2 * gram @ lam
        for i in range(n):
            for j in range(n):  # moving weight from i to j is feasible and first-order descending: not optimal
                if i != j and lam[i] > lo + 1e-9 and lam[j] < hi - 1e-9:
                    assert grad[j] - grad[i] >= -1e-8, (trial, i, j)


def test_fedmgda_eps_zero_is_the_mean_of_normalised_updates():
    updates = tensor([(3.0, 4.0), (0.0, 2.0), (-1.0, 0.0)])  # normalised: (.6, .8), (0, 1), (-1, 0)
    expect(run("fedmgda_plus", updates, eps=0.0), (-0.4 / 3, 1.8 / 3))


def test_fedmgda_large_eps_is_the_min_norm_point_of_the_hull():
    updates = tensor([(2.0, 0.0), (0.0, 5.0), (3.0, 3.0)])  # hull of (1, 0), (0, 1), (1, 1)/sqrt 2
    expect(run("fedmgda_plus", updates, eps=1.0), (0.5, 0.5), atol=1e-8)


def test_fedmgda_box_keeps_weight_on_every_update():
    updates = tensor([(2.0, 0.0), (0.0, 5.0), (3.0, 3.0)])
    low = 1 / 3 - 0.1  # the third weight sits at its lower bound, the other two share the rest
    coordinate = (1 - low) / 2 + low / math.sqrt(2)
    expect(run("fedmgda_plus", updates, eps=0.1), (coordinate, coordinate), atol=1e-8)


@pytest.mark.parametrize("eps", [0.05, 0.1, 0.5, 1.0])
def test_fedmgda_matches_scipy_on_three_clients(eps):
    updates = np.random.default_rng(3).normal(size=(3, 4)) + np.array([0.5, 0.0, -0.3, 0.2])
    expected = scipy_fedmgda(updates, eps)
    expect(run("fedmgda_plus", tensor(updates), eps=eps), expected, atol=1e-6)


def test_fedmgda_matches_scipy_with_outliers():
    expect(run("fedmgda_plus", tensor(SEVEN), eps=0.1), scipy_fedmgda(np.array(SEVEN), 0.1), atol=1e-6)


def test_fedmgda_lr_scales_the_direction_and_zero_updates_stay_finite():
    updates = tensor([(2.0, 0.0), (0.0, 5.0), (0.0, 0.0)])
    direction = run("fedmgda_plus", updates, eps=0.0)
    expect(direction, (1 / 3, 1 / 3))
    expect(run("fedmgda_plus", updates, eps=0.0, lr=0.5), (1 / 6, 1 / 6))
    assert torch.isfinite(run("fedmgda_plus", updates, eps=1.0)).all()


def test_fedmgda_rejects_negative_eps():
    with pytest.raises(ConfigError, match="eps"):
        run("fedmgda_plus", tensor(SEVEN), eps=-0.1)


def test_geometric_median_of_collinear_points_is_the_middle_point():
    updates = tensor([(0.0, 0.0), (1.0, 1.0), (2.0, 2.0), (10.0, 10.0), (100.0, 100.0)])
    expect(run("geometric_median", updates, iters=1000, tol=1e-14), (2.0, 2.0), atol=1e-5)


def test_geometric_median_respects_weights():
    updates = tensor([(0.0, 0.0), (1.0, 1.0), (2.0, 2.0), (10.0, 10.0), (100.0, 100.0)])
    heavy_far = run("geometric_median", updates, [1, 1, 1, 1, 5], iters=1000, tol=1e-14)
    heavy_near = run("geometric_median", updates, [3, 1, 1, 1, 1], iters=1000, tol=1e-14)
    expect(heavy_far, (100.0, 100.0), atol=1e-5)  # weight 5 of 9 > half
    expect(heavy_near, (1.0, 1.0), atol=1e-5)  # cumulative weight crosses half at (1, 1)


def test_geometric_median_matches_a_direct_minimisation():
    points = np.array(SEVEN)
    direct = minimize(
        lambda v: np.linalg.norm(points - v, axis=1).sum(),
        points.mean(axis=0),
        method="Nelder-Mead",
        options={"xatol": 1e-10, "fatol": 1e-14, "maxiter": 5000},
    ).x
    robust = run("geometric_median", tensor(SEVEN), iters=1000, tol=1e-14)
    expect(robust, direct, atol=1e-5)
    assert torch.linalg.norm(robust - tensor([1.02, 1.02])) < 0.1  # the outliers barely move it


def test_centered_clipping_from_zero_clips_each_update_to_tau():
    updates = tensor([(0.5, 0.0), (0.0, 0.5), (3.0, 4.0)])  # the last is clipped to (0.6, 0.8)
    expect(run("centered_clipping", updates, tau=1.0, center="zero"), (1.1 / 3, 1.3 / 3))


def test_centered_clipping_from_the_median():
    updates = tensor(SEVEN)
    centre = np.array([1.0, 1.1])  # coordinate-wise median
    step = np.zeros(2)
    for row in np.array(SEVEN):
        diff = row - centre
        step += diff * min(1.0, 0.5 / np.linalg.norm(diff))
    expect(run("centered_clipping", updates, tau=0.5), centre + step / 7)


@pytest.mark.parametrize("center", ["median", "zero"])
def test_centered_clipping_with_huge_tau_is_the_mean(center):
    updates = tensor(SEVEN)
    expect(run("centered_clipping", updates, tau=1e9, center=center), updates.mean(dim=0))


def test_centered_clipping_rejects_an_unknown_center():
    with pytest.raises(ConfigError, match="allowed: median, zero"):
        run("centered_clipping", tensor(SEVEN), center="mean")


def test_fedmgda_solver_ends_in_few_steps_on_nearly_parallel_updates(monkeypatch):
    # nearly parallel updates make G ill-conditioned (eigenvalues ~1e-7): a second Newton step on a solved
    # working set only chases rounding (~1e-10) and would never reach the step tolerance
    import fedarena.methods.aggregators.mgda as mgda

    steps, original = [], mgda.free_step
    monkeypatch.setattr(mgda, "free_step", lambda *args: steps.append(1) or original(*args))
    rng = np.random.default_rng(5)
    for _ in range(20):
        n, d = int(rng.integers(5, 30)), int(rng.integers(20, 200))
        u = rng.normal(size=d) + 1e-3 * rng.normal(size=(n, d))
        g = u / np.linalg.norm(u, axis=1, keepdims=True)
        for eps in (0.1, 0.5, 1.0):
            steps.clear()
            lam = mgda.min_norm_weights(g @ g.T, eps, 10_000, 1e-12)
            assert len(steps) < 10 * n and abs(lam.sum() - 1) < 1e-12


@pytest.mark.parametrize("eps", [0.0, 0.05, 1.0])
def test_fedmgda_direction_stays_within_the_unit_ball_when_one_update_is_tiny(eps):
    # a float32 row of entries ~1e-24 has a float32 norm of 0: scaled by 1 / TINY_NORM it would swamp the rest
    rng = np.random.default_rng(0)
    updates = torch.tensor(0.01 * rng.normal(size=(10, 1000)) + 0.005, dtype=torch.float32)
    updates[9] = -1e-24
    assert float(run("fedmgda_plus", updates, eps=eps).norm()) <= 1.0 + 1e-5


def test_fedmgda_non_finite_update_gives_a_non_finite_direction_not_an_error():
    updates = tensor(SEVEN)
    updates[2, 0] = float("nan")
    assert not torch.isfinite(run("fedmgda_plus", updates, eps=0.1)).all()
