"""FedMGDA+'s edges, exactly (the mutation score of ``methods/aggregators/mgda.py``: docs/testing.md): its checks'
defaults, edges and wording, its registry entry (name, search space, version), the null-space basis (the
Householder reflection sending e1 onto 1/sqrt(k)), the active-set pieces (``free_step``'s Newton and
zero-curvature steps and its tolerances, ``release``'s KKT multipliers), the QP's weights on diagonal Gram
matrices (clipped 1/a_i, solved by hand) and against a brute-force enumeration of working sets, the rule's
direction (normalised updates, TINY_NORM, lr, the eps = 0 mean, non-finite updates) and the float64 Gram matrix
accumulated over column chunks (the chunking seen through the order of its roundings)."""

import inspect
import itertools
import math
import warnings

import numpy as np
import pytest
import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators import AGGREGATORS
from fedarena.methods.aggregators.mgda import (
    TINY_NORM,
    check_fedmgda,
    fedmgda_plus,
    free_step,
    gram_float64,
    min_norm_weights,
    null_basis,
    release,
)
from fedarena.search_space import Domain

F64 = torch.float64


def rule(rows, **params):
    updates = torch.tensor(rows, dtype=F64) if not isinstance(rows, torch.Tensor) else rows
    return fedmgda_plus(updates, weights=torch.ones(updates.shape[0], dtype=updates.dtype), losses=None, f=0,
                        **params)


def close(actual, expected, atol=1e-12):
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=actual.dtype), rtol=0, atol=atol)


def brute_force_weights(gram, eps):
    """min lambda^T G lambda over the simplex and the box |lambda_i - 1/n| <= eps by enumerating which weights
    sit at lo, which at hi, which are free (equality-constrained minimiser on the free ones, by a KKT solve)."""
    n = gram.shape[0]
    lo, hi = max(0.0, 1 / n - eps), min(1.0, 1 / n + eps)
    best, best_value = None, math.inf
    for kinds in itertools.product((-1, 0, 1), repeat=n):
        lam = np.array([lo if k < 0 else hi if k > 0 else 0.0 for k in kinds])
        free = [i for i, k in enumerate(kinds) if k == 0]
        rest = 1 - lam.sum()
        if free:
            m = len(free)
            kkt = np.zeros((m + 1, m + 1))
            kkt[:m, :m] = 2 * gram[np.ix_(free, free)]
            kkt[:m, m] = kkt[m, :m] = 1.0
            bound = [i for i in range(n) if kinds[i] != 0]
            rhs = np.concatenate([-2 * gram[np.ix_(free, bound)] @ lam[bound], [rest]])
            lam[free] = np.linalg.lstsq(kkt, rhs, rcond=None)[0][:m]
        elif abs(rest) > 1e-12:
            continue
        if abs(lam.sum() - 1) > 1e-12 or lam.min() < lo - 1e-12 or lam.max() > hi + 1e-12:
            continue
        value = lam @ gram @ lam
        if value < best_value - 1e-15:
            best, best_value = lam, value
    return best


# --- checks: defaults, edges, wording ------------------------------------------------------------------------


def test_defaults_of_the_check_and_the_rule_are_eps_0_1_lr_1_iters_10000_tol_1e_12():
    for fn in (check_fedmgda, fedmgda_plus):
        params = inspect.signature(fn).parameters
        assert params["eps"].default == 0.1 and params["lr"].default == 1.0
        assert params["iters"].default == 10000 and params["tol"].default == 1e-12


def test_the_gram_chunk_default_is_2_to_the_22_entries_and_tiny_norm_is_1e_30():
    assert inspect.signature(gram_float64).parameters["chunk_elements"].default == 4194304
    assert TINY_NORM == 1e-30


def test_eps_zero_and_one_are_allowed_a_negative_eps_is_refused_in_words():
    check_fedmgda(3, 0, eps=0.0)
    check_fedmgda(3, 0, eps=0.5)
    check_fedmgda(3, 0, eps=1.0)
    with pytest.raises(ConfigError, match=r"^fedmgda_plus: eps bounds \|lambda_i - 1/n\| and must be >= 0, got -0.1$"):
        check_fedmgda(3, 0, eps=-0.1)


def test_smallest_allowed_lr_iters_tol_pass():
    check_fedmgda(3, 0, lr=0.5, iters=1, tol=0.5)
    check_fedmgda(3, 0, lr=1.0, iters=1, tol=1.0)


@pytest.mark.parametrize("bad", [{"lr": 0.0}, {"lr": -1.0}, {"iters": 0}, {"tol": 0.0}, {"tol": -1e-12},
                                 {"lr": 0.0, "iters": 5}])
def test_nonpositive_lr_tol_and_zero_iters_are_refused_naming_what_is_allowed(bad):
    params = {"lr": 1.0, "iters": 10000, "tol": 1e-12} | bad
    message = (r"^fedmgda_plus needs lr > 0, iters >= 1, tol > 0; "
               rf"got lr={params['lr']}, iters={params['iters']}, tol={params['tol']}$")
    with pytest.raises(ConfigError, match=message):
        check_fedmgda(3, 0, **bad)


def test_the_rule_checks_its_parameters_too():
    with pytest.raises(ConfigError, match="must be >= 0"):
        rule([[1.0, 0.0], [0.0, 1.0]], eps=-0.5)
    with pytest.raises(ConfigError, match="lr > 0"):
        rule([[1.0, 0.0], [0.0, 1.0]], lr=0.0)


def test_registry_entry_is_version_2_and_searches_eps_uniformly_in_0_1():
    entry = AGGREGATORS.get("fedmgda_plus")
    assert entry.rule is fedmgda_plus and entry.check is check_fedmgda
    assert AGGREGATORS.version("fedmgda_plus") == 2
    assert AGGREGATORS.search("fedmgda_plus") == {"eps": Domain("uniform", 0.0, 1.0)}


# --- the null-space basis ------------------------------------------------------------------------------------


def test_null_basis_of_two_is_the_normalised_difference_with_first_entry_positive():
    # H = I - 2 v v^T / v.v, v = (1/sqrt2 - 1, 1/sqrt2): H e2 = (1/sqrt2, -1/sqrt2)
    basis = null_basis(2)
    np.testing.assert_allclose(basis, [[1 / math.sqrt(2)], [-1 / math.sqrt(2)]], rtol=0, atol=1e-13)


@pytest.mark.parametrize("k", [3, 4, 7])
def test_null_basis_is_orthonormal_sums_to_zero_and_completes_the_reflection_of_e1(k):
    basis = null_basis(k)
    assert basis.shape == (k, k - 1)
    np.testing.assert_allclose(basis.T @ basis, np.eye(k - 1), rtol=0, atol=1e-14)
    np.testing.assert_allclose(basis.sum(axis=0), np.zeros(k - 1), rtol=0, atol=1e-14)
    # the reflection is symmetric and sends e1 onto u = 1/sqrt(k): its first row is u too
    np.testing.assert_allclose(basis[0], np.full(k - 1, 1 / math.sqrt(k)), rtol=0, atol=1e-13)


# --- free_step -----------------------------------------------------------------------------------------------


def projected(grad):
    """The projection of grad onto {p : sum p = 0}."""
    grad = np.asarray(grad, dtype=float)
    return grad - grad.mean()


def test_free_step_with_one_or_no_free_weight_is_stationary():
    gram = np.eye(3)
    assert free_step(gram, np.ones(3), np.array([1]), 1e-12) == (None, False)
    assert free_step(gram, np.ones(3), np.array([], dtype=np.int64), 1e-12) == (None, False)


def test_free_step_newton_step_minimises_the_quadratic_on_the_free_pair():
    # p = (t, -t): t^2 (1 + 4) + t (1 - 4) is least at t = 3/10
    step, flat = free_step(np.diag([1.0, 4.0]), np.array([1.0, 4.0]), np.array([0, 1]), 1e-12)
    assert flat is False
    np.testing.assert_allclose(step, [0.3, -0.3], rtol=0, atol=1e-14)


def test_free_step_newton_step_on_three_of_four_weights_ignores_the_fixed_one():
    gram = np.diag([1.0, 2.0, 4.0, 8.0])
    grad = np.array([3.0, 1.0, 2.0, 100.0])
    free = np.array([0, 1, 2])
    # min p^T diag(1, 2, 4) p + (3, 1, 2).p s.t. sum p = 0: 2 a_i p_i + g_i + nu = 0, sum p = 0
    a, g = np.array([1.0, 2.0, 4.0]), grad[:3]
    nu = -(g / (2 * a)).sum() / (1 / (2 * a)).sum()
    expected = -(g + nu) / (2 * a)
    step, flat = free_step(gram, grad, free, 1e-12)
    assert flat is False
    np.testing.assert_allclose(step, expected, rtol=0, atol=1e-13)


def test_free_step_follows_a_descending_zero_curvature_direction_alone():
    # copied rows: zero curvature along (1, -1); the slope (1 - 3)/sqrt2 descends: the step is -P grad = (1, -1)
    step, flat = free_step(np.ones((2, 2)), np.array([1.0, 3.0]), np.array([0, 1]), 1e-12)
    assert flat is True
    np.testing.assert_allclose(step, [1.0, -1.0], rtol=0, atol=1e-12)


def test_free_step_flat_direction_without_slope_is_stationary():
    assert free_step(np.ones((2, 2)), np.array([2.0, 2.0]), np.array([0, 1]), 1e-12) == (None, False)


def test_free_step_at_zero_tolerance_zero_curvature_and_zero_slope_are_stationary():
    # curvature 0 <= 0 is flat, slope 0 > 0 is no descent, the step 0 <= 0 is no step
    assert free_step(np.zeros((2, 2)), np.zeros(2), np.array([0, 1]), 0.0) == (None, False)


def test_free_step_flatness_threshold_is_tol_times_curvature_scale_times_k():
    # G = 1.5 I: curvature 3 along (1, -1), scale 3; tol 0.6: 3 <= 0.6 * 3 * 2 is flat; slope 4/sqrt2 > 0.6 * 3
    step, flat = free_step(1.5 * np.eye(2), np.array([4.0, 0.0]), np.array([0, 1]), 0.6)
    assert flat is True
    np.testing.assert_allclose(step, -projected([4.0, 0.0]), rtol=0, atol=1e-12)


def test_free_step_slope_threshold_is_tol_times_scale():
    # flat as above; slope 2/sqrt2 = 1.41 <= 0.6 * 3 = 1.8: no descent, the Newton part is 0: stationary
    assert free_step(1.5 * np.eye(2), np.array([2.0, 0.0]), np.array([0, 1]), 0.6) == (None, False)


def test_free_step_scale_is_at_least_one_not_more():
    # G = 0.15 I: curvature 0.3, scale max(1, 0.3) = 1; tol 0.1: 0.3 > 0.1 * 1 * 2, not flat: the Newton step
    # -P grad / 0.3
    step, flat = free_step(0.15 * np.eye(2), np.array([2.0, 0.0]), np.array([0, 1]), 0.1)
    assert flat is False
    np.testing.assert_allclose(step, -projected([2.0, 0.0]) / 0.3, rtol=0, atol=1e-12)


def test_free_step_newton_step_no_larger_than_tol_is_stationary():
    # Newton step (0.3, -0.3): max 0.3 <= tol 0.3 is no step, 0.3 > 0.29 is one
    assert free_step(np.diag([1.0, 4.0]), np.array([1.0, 4.0]), np.array([0, 1]), 0.31) == (None, False)
    step, flat = free_step(np.diag([1.0, 4.0]), np.array([1.0, 4.0]), np.array([0, 1]), 0.29)
    assert flat is False and step is not None


# --- release -------------------------------------------------------------------------------------------------


def test_release_with_free_weights_takes_nu_from_their_mean_gradient():
    # nu = -(1 + 2)/2 = -1.5; lower-bound weight 2: 3 - 1.5 = 1.5; upper-bound weight 3: -(6 - 1.5) = -4.5
    assert release(np.array([1.0, 2.0, 3.0, 6.0]), np.array([0, 0, -1, 1], dtype=np.int8)) == (3, -4.5)


def test_release_lower_bound_multiplier_is_grad_plus_nu():
    # nu = -2; weight 1 at lo: 0.5 - 2 = -1.5; weight 2 at hi: -(1 - 2) = 1
    assert release(np.array([2.0, 0.5, 1.0]), np.array([0, -1, 1], dtype=np.int8)) == (1, -1.5)


def test_release_with_every_weight_bound_takes_nu_mid_interval():
    # nu = -(max upper grad 8 + min lower grad 1)/2 = -4.5; upper: -(2 - 4.5) = 2.5, -(8 - 4.5) = -3.5;
    # lower: 1 - 4.5 = -3.5, 4 - 4.5 = -0.5; the first most negative is weight 1
    grad = np.array([2.0, 8.0, 1.0, 4.0])
    assert release(grad, np.array([1, 1, -1, -1], dtype=np.int8)) == (1, -3.5)


def test_release_with_no_bound_weight_is_infinite():
    assert release(np.array([1.0, 2.0]), np.zeros(2, dtype=np.int8)) == (0, math.inf)


# --- min_norm_weights ----------------------------------------------------------------------------------------


def test_weights_on_a_diagonal_gram_hit_both_box_bounds():
    # min sum a_i l_i^2: l_i = clip(nu / a_i); a = (1, 4, 100), eps = 0.2: [lo, hi] = [2/15, 8/15]; l_1 at hi,
    # l_3 at lo, l_2 = 1/3 free (KKT: grads 16/15 <= 8/3 <= 80/3)
    lam = min_norm_weights(np.diag([1.0, 4.0, 100.0]), 0.2, 10000, 1e-12)
    np.testing.assert_allclose(lam, [8 / 15, 1 / 3, 2 / 15], rtol=0, atol=1e-13)


def test_weights_on_a_diagonal_gram_with_only_the_lower_bound():
    # a = (1, 1, 100), eps = 0.2: l_3 = lo = 2/15, the others share 13/15
    lam = min_norm_weights(np.diag([1.0, 1.0, 100.0]), 0.2, 10000, 1e-12)
    np.testing.assert_allclose(lam, [13 / 30, 13 / 30, 2 / 15], rtol=0, atol=1e-13)


def test_weights_on_a_diagonal_gram_with_only_the_upper_bound():
    # a = (1, 100, 100), eps = 0.2: l_1 = hi = 8/15, the others 7/30
    lam = min_norm_weights(np.diag([1.0, 100.0, 100.0]), 0.2, 10000, 1e-12)
    np.testing.assert_allclose(lam, [8 / 15, 7 / 30, 7 / 30], rtol=0, atol=1e-13)


def test_weights_with_eps_one_are_inverse_proportional_to_the_diagonal():
    lam = min_norm_weights(np.diag([1.0, 4.0, 100.0]), 1.0, 10000, 1e-12)
    np.testing.assert_allclose(lam, np.array([100.0, 25.0, 1.0]) / 126, rtol=0, atol=1e-13)


def test_weights_with_eps_zero_are_uniform():
    np.testing.assert_array_equal(min_norm_weights(np.diag([1.0, 4.0, 100.0]), 0.0, 10000, 1e-12),
                                  np.full(3, 1 / 3))


def test_weights_at_a_vertex_of_the_simplex():
    # G = [[1, 2], [2, 9]]: l_1^2 + 4 l_1 l_2 + 9 l_2^2 on l_1 + l_2 = 1 decreases up to l_1 = 7/6 > 1: l = (1, 0)
    lam = min_norm_weights(np.array([[1.0, 2.0], [2.0, 9.0]]), 1.0, 10000, 1e-12)
    np.testing.assert_allclose(lam, [1.0, 0.0], rtol=0, atol=1e-13)


def test_weights_with_one_step_allowed_stop_at_the_first_blocking_bound():
    # a = (1, 4, 100), eps = 0.2: the Newton step from 1/3 towards (100, 25, 1)/126 is blocked first by l_1
    # reaching hi = 8/15 (l_3 would reach lo = 2/15 later): the fraction t = (8/15 - 1/3) / (100/126 - 1/3)
    target = np.array([100.0, 25.0, 1.0]) / 126
    t = (8 / 15 - 1 / 3) / (100 / 126 - 1 / 3)
    expected = 1 / 3 + t * (target - 1 / 3)
    lam = min_norm_weights(np.diag([1.0, 4.0, 100.0]), 0.2, 1, 1e-12)
    np.testing.assert_allclose(lam, expected, rtol=0, atol=1e-14)
    assert lam[0] == min(1.0, 1 / 3 + 0.2)  # the upper bound 1/n + eps, reached exactly


@pytest.mark.parametrize("seed", range(9))
@pytest.mark.parametrize("eps", [0.05, 0.15, 0.3, 1.0])
def test_weights_match_a_brute_force_enumeration_of_working_sets(seed, eps):
    rng = np.random.default_rng(seed)
    n = 3 + seed % 3
    g = rng.normal(size=(n, 6)) + rng.normal(size=6)
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    gram = g @ g.T
    lam = min_norm_weights(gram, eps, 10000, 1e-12)
    np.testing.assert_allclose(lam, brute_force_weights(gram, eps), rtol=0, atol=1e-9)


@pytest.mark.parametrize("eps", [0.1, 0.3, 1.0])
def test_weights_on_copied_rows_reach_the_min_norm_value(eps):
    # rows 0 and 1 copies (a zero-curvature direction): the weights are not unique, the value is
    rng = np.random.default_rng(7)
    g = rng.normal(size=(4, 5)) + rng.normal(size=5)
    g[1] = g[0]
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    gram = g @ g.T
    lam = min_norm_weights(gram, eps, 10000, 1e-12)
    n, expected = 4, brute_force_weights(gram, eps)
    lo, hi = max(0.0, 1 / n - eps), min(1.0, 1 / n + eps)
    assert abs(lam.sum() - 1) < 1e-12 and lam.min() >= lo - 1e-12 and lam.max() <= hi + 1e-12
    assert lam @ gram @ lam == pytest.approx(expected @ gram @ expected, abs=1e-12)


# --- the rule ------------------------------------------------------------------------------------------------


def test_eps_zero_is_the_mean_of_the_normalised_updates_scaled_by_lr():
    # (3, 4) / 5 = (0.6, 0.8), (0, 2) / 2 = (0, 1): mean (0.3, 0.9)
    close(rule([[3.0, 4.0], [0.0, 2.0]], eps=0.0), [0.3, 0.9])
    close(rule([[3.0, 4.0], [0.0, 2.0]], eps=0.0, lr=2.0), [0.6, 1.8])
    close(rule([[3.0, 4.0], [0.0, 2.0]], eps=0.0, lr=0.25), [0.075, 0.225])


def test_default_eps_0_1_caps_the_lone_direction_at_one_third_plus_0_1():
    # normalised: e1, e1, e2: min (l1 + l2)^2 + l3^2 wants l3 = 1/2 > hi = 1/3 + 0.1: l3 = 13/30
    close(rule([[2.0, 0.0], [5.0, 0.0], [0.0, 3.0]]), [17 / 30, 13 / 30])
    close(rule([[2.0, 0.0], [5.0, 0.0], [0.0, 3.0]], eps=1.0), [0.5, 0.5])
    close(rule([[2.0, 0.0], [5.0, 0.0], [0.0, 3.0]], eps=0.1, lr=3.0), [1.7, 1.3])


def test_the_rule_weights_the_normalised_updates_by_the_qp_solution():
    # normalised rows e1 (norm 4), e2 (norm 0.5), e3 (norm 10): G = I, so lambda is uniform for every eps
    updates = [[4.0, 0.0, 0.0], [0.0, 0.5, 0.0], [0.0, 0.0, 10.0]]
    close(rule(updates, eps=0.2), [1 / 3, 1 / 3, 1 / 3])
    # rows (1, 0), (0, 2), (1, 1): hull of e1, e2, (1, 1)/sqrt2; eps 1: the min-norm point (1/2, 1/2)
    close(rule([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]], eps=1.0), [0.5, 0.5], atol=1e-12)


def test_the_rule_matches_brute_force_weights_on_unnormalised_updates():
    rng = np.random.default_rng(3)
    u = (rng.normal(size=(4, 5)) + rng.normal(size=5)) * np.array([[0.1], [3.0], [20.0], [1.0]])
    norms = np.linalg.norm(u, axis=1, keepdims=True)
    gram = (u / norms) @ (u / norms).T
    lam = brute_force_weights(gram, 0.2)
    close(rule(u.tolist(), eps=0.2), (lam @ (u / norms)).tolist(), atol=1e-10)


def test_a_zero_update_stays_zero_and_rows_above_tiny_norm_are_normalised():
    close(rule([[0.0, 0.0], [3.0, 4.0]], eps=0.0), [0.3, 0.4])
    # a row of norm 1.5e-30 (above TINY_NORM = 1e-30) is a unit vector; one of norm 5e-31 is divided by 1e-30
    close(rule([[1.5e-30, 0.0], [0.0, 1.0]], eps=0.0), [0.5, 0.5])
    close(rule([[5e-31, 0.0], [0.0, 1.0]], eps=0.0), [0.25, 0.5])


def test_float32_updates_give_a_float32_direction():
    out = rule(torch.tensor([[3.0, 4.0], [0.0, 2.0]], dtype=torch.float32), eps=0.0)
    assert out.dtype == torch.float32
    close(out, [0.3, 0.9], atol=1e-7)


@pytest.mark.parametrize("bad", [math.inf, math.nan])
def test_a_non_finite_update_gives_an_all_nan_direction_of_the_update_width(bad):
    updates = torch.tensor([[1.0, 0.0, 2.0], [0.0, 1.0, 1.0]], dtype=F64)
    updates[1, 2] = bad
    out = rule(updates, eps=0.1)
    assert out.shape == (3,) and out.dtype == F64 and torch.isnan(out).all()


# --- gram_float64 ---------------------------------------------------------------------------------------------


def test_gram_is_the_exact_product_over_several_chunks():
    updates = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0], [-1.0, 0.0, 2.0, 0.5, 1.0]], dtype=torch.float32)
    expected = [[55.0, 12.0], [12.0, 6.25]]
    for chunk in (1, 2, 4, 6, 10, 1 << 22):
        gram = gram_float64(updates, chunk_elements=chunk)
        assert gram.dtype == F64 and gram.tolist() == expected, chunk
    assert gram_float64(updates).tolist() == expected


def test_gram_chunks_hold_at_most_chunk_elements_entries():
    # the row (3, 0, 2^-25, 2^-25): 9 + 2^-50 + 2^-50 rounds to 9 one term at a time (ties to even), while a
    # chunk of the last two columns adds 2^-49, one ulp of 9. One row, 2 entries: chunks of 2 columns.
    row = [3.0, 0.0, 2.0 ** -25, 2.0 ** -25]
    one = torch.tensor([row], dtype=F64)
    assert gram_float64(one, chunk_elements=2).tolist() == [[9.0 + 2.0 ** -49]]
    assert gram_float64(one, chunk_elements=1).tolist() == [[9.0]]
    # two rows, 2 entries: one column at a time
    two = torch.tensor([row, row], dtype=F64)
    assert gram_float64(two, chunk_elements=2).tolist() == [[9.0, 9.0], [9.0, 9.0]]
    assert gram_float64(two, chunk_elements=4).tolist() == [[9.0 + 2.0 ** -49] * 2] * 2


def test_weights_on_a_five_diagonal_gram_clip_both_ends():
    # a = (4, 4, 1, 1, 0.5), eps = 0.05: [lo, hi] = [0.15, 0.25]; 1/a clipped: l_1 = l_2 = lo, l_5 = hi, the
    # middle two share 0.45 (KKT: grads 1.2 >= 0.45 >= 0.25)
    lam = min_norm_weights(np.diag([4.0, 4.0, 1.0, 1.0, 0.5]), 0.05, 10000, 1e-12)
    np.testing.assert_allclose(lam, [0.15, 0.15, 0.225, 0.225, 0.25], rtol=0, atol=1e-13)


def test_weights_on_a_diagonal_gram_whose_optimum_touches_the_upper_bound():
    # a = (1, 2, 2, 4, 4), eps = 0.2: 1/a normalised is (0.4, 0.2, 0.2, 0.1, 0.1), l_1 exactly at hi = 0.4
    lam = min_norm_weights(np.diag([1.0, 2.0, 2.0, 4.0, 4.0]), 0.2, 10000, 1e-12)
    np.testing.assert_allclose(lam, [0.4, 0.2, 0.2, 0.1, 0.1], rtol=0, atol=1e-13)


def test_weights_on_an_unnormalised_gram_match_brute_force():
    g = np.array([[-1.1, 0.4, 0.1, -0.5], [-2.6, 1.6, 3.0, -5.6], [1.3, 13.1, -2.3, -8.7], [6.3, 3.4, 9.6, -4.1],
                  [-1.9, 0.8, 0.5, -0.3]])
    gram = g @ g.T
    lam = min_norm_weights(gram, 0.05, 10000, 1e-12)
    np.testing.assert_allclose(lam, brute_force_weights(gram, 0.05), rtol=0, atol=1e-9)


B_GRAM = np.array([[10.8681, 2.3993, 62.9558, -0.9841, 0.1246], [2.3993, 13.6939, -5.0651, 7.2382, 6.3772],
                   [62.9558, -5.0651, 508.4893, -9.8109, -0.8572], [-0.9841, 7.2382, -9.8109, 4.8946, 1.8074],
                   [0.1246, 6.3772, -0.8572, 1.8074, 27.2465]])


def test_weights_with_a_loose_tolerance_still_release_a_wrongly_bound_weight():
    lam = min_norm_weights(B_GRAM, 0.1, 10000, 1e-2)
    np.testing.assert_allclose(lam, brute_force_weights(B_GRAM, 0.1), rtol=0, atol=1e-9)


def test_the_multiplier_tolerance_is_tol_times_the_largest_diagonal_entry():
    # scale = max diag = 402.9; tol = 1e-3: the solver stops with weights 0 and 3 at hi = 0.4, weight 4 at lo = 0,
    # weights 1 and 2 the minimiser on that working set, though weight 3's multiplier is slightly negative
    # (> -tol * scale = -0.40, < -tol / scale): a stricter tolerance would release it
    gram = np.array([[3.6666, -24.7754, 0.3542, 1.8206, 26.8927], [-24.7754, 402.9089, 12.367, 3.8765, -264.038],
                     [0.3542, 12.367, 7.6342, 0.9321, -6.0976], [1.8206, 3.8765, 0.9321, 3.0157, 13.7891],
                     [26.8927, -264.038, -6.0976, 13.7891, 263.6994]])
    free, fixed = [1, 2], np.array([0.4, 0.0, 0.0, 0.4, 0.0])
    kkt = np.zeros((3, 3))
    kkt[:2, :2] = 2 * gram[np.ix_(free, free)]
    kkt[:2, 2] = kkt[2, :2] = 1.0
    solution = np.linalg.solve(kkt, np.concatenate([-2 * gram[free] @ fixed, [0.2]]))
    expected = fixed.copy()
    expected[free] = solution[:2]
    grad, nu = 2 * gram @ expected, solution[2]
    assert -0.4029 < -(grad[3] + nu) < -1e-3 / 402.9
    lam = min_norm_weights(gram, 0.2, 10000, 1e-3)
    np.testing.assert_allclose(lam, expected, rtol=0, atol=1e-12)


def test_one_step_that_no_bound_blocks_is_the_full_newton_step():
    # a = (1, 1, 4), eps = 0.25: the Newton step from 1/3 to (4, 4, 1)/9 reaches no bound (l_3's room 1.125,
    # l_1's 2.25): one step lands on the optimum, not on l_3's bound lo = 1/12
    lam = min_norm_weights(np.diag([1.0, 1.0, 4.0]), 0.25, 1, 1e-12)
    np.testing.assert_allclose(lam, np.array([4.0, 4.0, 1.0]) / 9, rtol=0, atol=1e-13)


def test_free_step_with_one_free_weight_returns_quietly():
    # no null-space basis is built for a single weight (its Householder vector would be 0: 0/0 warnings)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert free_step(np.eye(2), np.ones(2), np.array([0]), 1e-12) == (None, False)


def test_the_multiplier_tolerance_on_a_unit_scale_gram_is_tol_itself():
    # max diag 1: scale 1, so a bound whose multiplier is in [-2 tol, -tol) is released: the exact optimum
    g = np.array([[-1.5, -1.4, -1.6], [-0.3, -2.3, -0.4], [0.3, -0.7, 0.3], [-0.8, -4.4, 1.4]])
    gram = g @ g.T / 21.96
    lam = min_norm_weights(gram, 0.2, 10000, 0.01)
    np.testing.assert_allclose(lam, brute_force_weights(gram, 0.2), rtol=0, atol=1e-9)
