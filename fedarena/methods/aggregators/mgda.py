"""FedMGDA+ (Hu, Shaloudegi, Zhang, Yu 2020) as used by Ditto's reference (``fedbase.fedmgda_average``).

The weights lambda solve the small quadratic program on the n x n Gram matrix G of the normalised updates

    min_lambda  lambda^T G lambda   s.t.  sum_i lambda_i = 1,  lambda >= 0,  |lambda_i - 1/n| <= eps,

exactly, by a primal active-set method (Nocedal & Wright, Algorithm 16.3) over the box constraints: on the
free weights, the equality-constrained minimiser in the null space of sum(p) = 0 (an eigendecomposition of
the reduced Hessian, so a singular G, as when attackers copy one update, is handled directly: a descent
direction of zero curvature is followed to the box), a blocking bound joins the working set, a bound with a
negative multiplier leaves it. n <= 50 weights: a handful of small dense solves, in float64 numpy.
Version 2 (version 1: accelerated projected gradient, FISTA, up to 10,000 iterations on a Gram matrix
multiplied in float32): the Gram matrix accumulated in float64, the optimum reached exactly; where the weights
are not unique (copied rows) the aggregated direction still is (the min-norm point of a convex set). The norms
come from that matrix's diagonal (a float32 norm of a row of entries below ~4e-23 is 0, and version 1 scaled
such a row by 1e30: one attacker's tiny update moved the model by 1e7); a non-finite update gives a
non-finite direction (the engine's divergence handling) where version 1 raised.
"""

from __future__ import annotations

import numpy as np
import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators.base import aggregator, check_common, check_updates
from fedarena.search_space import uniform

TINY_NORM = 1e-30


def null_basis(k: int) -> np.ndarray:
    """An orthonormal basis [k, k - 1] of {p : sum p = 0}: the Householder reflection that maps e1 onto the
    unit vector 1/sqrt(k) sends the other unit vectors onto that plane."""
    v = np.full(k, 1 / np.sqrt(k))
    v[0] -= 1.0
    reflector = np.eye(k) - np.outer(v, v) * (2 / (v @ v))
    return reflector[:, 1:]


def free_step(gram: np.ndarray, grad: np.ndarray, free: np.ndarray, tol: float) -> tuple[np.ndarray | None, bool]:
    """The step p on the free weights (the others fixed) minimising p^T G p + grad^T p with sum p = 0:
    (None, _) where that is p = 0 (a stationary point of the working set); (p, True) where the reduced
    Hessian has a zero-curvature direction the gradient descends along (that direction alone, to be followed
    as far as the box allows); (p, False) for the Newton step."""
    k = free.size
    if k <= 1:
        return None, False
    basis = null_basis(k)
    hessian = 2 * basis.T @ gram[np.ix_(free, free)] @ basis
    curvature, vectors = np.linalg.eigh(hessian)
    slope = vectors.T @ (basis.T @ grad[free])
    scale = max(1.0, float(np.abs(curvature).max(initial=0.0)))
    flat = curvature <= tol * scale * k  # zero (or rounding-negative) curvature
    if np.any(np.abs(slope[flat]) > tol * scale):
        return basis @ (vectors[:, flat] @ -slope[flat]), True
    newton = np.where(flat, 0.0, -slope / np.where(flat, 1.0, curvature))
    step = basis @ (vectors @ newton)
    return (None, False) if np.abs(step).max() <= tol else (step, False)


def release(grad: np.ndarray, at_bound: np.ndarray) -> tuple[int, float]:
    """The bound weight with the most negative KKT multiplier and that multiplier (inf when none is bound).
    The equality's multiplier nu makes the free weights' gradient zero on average; a weight at its lower
    bound needs grad + nu >= 0, one at its upper bound grad + nu <= 0."""
    free = at_bound == 0
    if free.any():
        nu = -grad[free].mean()
    else:  # every weight at a bound: the nu in the middle of the interval the bounds allow
        nu = -(grad[at_bound > 0].max(initial=-np.inf) + grad[at_bound < 0].min(initial=np.inf)) / 2
    multipliers = np.where(at_bound < 0, grad + nu, -(grad + nu))
    multipliers[free] = np.inf
    i = int(np.argmin(multipliers))
    return i, float(multipliers[i])


def min_norm_weights(gram: np.ndarray, eps: float, iters: int, tol: float) -> np.ndarray:
    """Minimise lambda^T G lambda over the simplex with |lambda_i - 1/n| <= eps (float64), exactly: the
    active-set method of the module docstring from the uniform weights, at most ``iters`` steps, ``tol`` the
    optimality tolerance (step size, multipliers, zero curvature)."""
    n = gram.shape[0]
    lo, hi = max(0.0, 1 / n - eps), min(1.0, 1 / n + eps)
    x = np.full(n, 1 / n)
    if eps == 0:
        return x
    at_bound = np.zeros(n, dtype=np.int8)  # -1 at lo, +1 at hi, 0 free
    scale = max(1.0, float(np.abs(np.diag(gram)).max()))
    solved = False  # the last step was a full Newton step: x minimises over the working set (up to rounding)
    for _ in range(iters):
        grad = 2 * gram @ x
        free = np.flatnonzero(at_bound == 0)
        step, flat = (None, False) if solved else free_step(gram, grad, free, tol)
        if step is None:
            i, multiplier = release(grad, at_bound)
            if multiplier >= -tol * scale:
                return x
            at_bound[i], solved = 0, False
            continue
        with np.errstate(divide="ignore", invalid="ignore"):
            room = np.where(step < 0, (x[free] - lo) / -step, np.where(step > 0, (hi - x[free]) / step, np.inf))
        j = int(np.argmin(room))
        blocked = flat or room[j] <= 1.0
        x[free] += (room[j] if blocked else 1.0) * step
        solved = not blocked  # a second Newton step would only chase rounding (ill-conditioned G: ~1e-10 steps)
        if blocked:  # the blocking weight joins the working set, exactly at its bound
            at_bound[free[j]] = -1 if step[j] < 0 else 1
            x[free[j]] = lo if step[j] < 0 else hi
    return x


def check_fedmgda(
    n: int, f: int, *, eps: float = 0.1, lr: float = 1.0, iters: int = 10000, tol: float = 1e-12
) -> None:
    check_common(n, f)
    if eps < 0:
        raise ConfigError(f"fedmgda_plus: eps bounds |lambda_i - 1/n| and must be >= 0, got {eps}")
    if lr <= 0 or iters < 1 or tol <= 0:
        raise ConfigError(
            f"fedmgda_plus needs lr > 0, iters >= 1, tol > 0; got lr={lr}, iters={iters}, tol={tol}"
        )


@aggregator("fedmgda_plus", check=check_fedmgda, search={"eps": uniform(0.0, 1.0)}, version=2)
def fedmgda_plus(
    updates: torch.Tensor,
    *,
    weights: torch.Tensor,
    losses: torch.Tensor | None,
    f: int,
    eps: float = 0.1,
    lr: float = 1.0,
    iters: int = 10000,
    tol: float = 1e-12,
) -> torch.Tensor:
    """FedMGDA+ as in Ditto's reference: g_i = u_i / ||u_i|| (a zero update stays zero), lambda from the
    min-norm QP above, return lr * sum_i lambda_i g_i.

    The result is a direction of norm <= 1: with lr = 1 (default) this is exactly Ditto's code, which adds
    it to the global model unscaled. FedMGDA+ (Hu et al. 2020, Algorithm 1) multiplies the direction by a
    global step size eta_t; ``lr`` plays that role. eps = 0 gives the uniform mean of the normalised
    updates; eps >= 1 - 1/n leaves only the simplex constraint (plain MGDA, Desideri 2012). ``iters`` (the
    most active-set steps; it ends in at most a few times n) and ``tol`` (optimality tolerance) control the QP
    solve; the updates are never copied whole (G = D^-1 U U^T D^-1 with D the diagonal of the norms).
    """
    n = check_updates(updates, f)
    check_fedmgda(n, f, eps=eps, lr=lr, iters=iters, tol=tol)
    products = gram_float64(updates)
    if not bool(torch.isfinite(products).all()):  # a non-finite update: a non-finite step (the engine's divergence)
        return updates.new_full((updates.shape[1],), float("nan"))
    inv = 1 / products.diagonal().sqrt().clamp_min(TINY_NORM)  # float64: a float32 norm of tiny rows underflows
    if eps == 0:
        lam = torch.full((n,), 1 / n, dtype=torch.float64, device=updates.device)
    else:
        gram = products * inv[:, None] * inv[None, :]
        lam = torch.from_numpy(min_norm_weights(gram.cpu().numpy(), eps, iters, tol)).to(updates.device)
    return lr * ((lam * inv).to(updates.dtype) @ updates)


def gram_float64(updates: torch.Tensor, chunk_elements: int = 1 << 22) -> torch.Tensor:
    """U U^T [n, n] accumulated in float64 over column chunks of at most ``chunk_elements`` entries: positive
    semi-definite to double rounding, where a float32 product is off by ~1e-7 and can be indefinite (copied
    rows then leave the QP non-convex at that scale), without a float64 copy of all the updates."""
    n, d = updates.shape
    width = max(1, chunk_elements // max(n, 1))
    gram = torch.zeros(n, n, dtype=torch.float64, device=updates.device)
    for start in range(0, d, width):
        part = updates[:, start:start + width].double()
        gram += part @ part.T
    return gram
