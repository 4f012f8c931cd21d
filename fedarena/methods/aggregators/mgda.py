"""FedMGDA+ (Hu, Shaloudegi, Zhang, Yu 2020) as used by Ditto's reference (``fedbase.fedmgda_average``).

The weights lambda solve the small quadratic program on the n x n Gram matrix G of the normalised updates

    min_lambda  lambda^T G lambda   s.t.  sum_i lambda_i = 1,  lambda >= 0,  |lambda_i - 1/n| <= eps,

by accelerated projected gradient descent (FISTA with gradient-based adaptive restart, O'Donoghue & Candes
2015). The projection onto the simplex-box intersection is exact: lambda = clip(y - tau, lo, hi) where the
shift tau solves the piecewise-linear equation sum(lambda) = 1, found from the sorted breakpoints.
"""

from __future__ import annotations

import math

import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators.base import aggregator, check_common, check_updates
from fedarena.search_space import uniform

TINY_NORM = 1e-30


def project_simplex_box(y: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    """Euclidean projection of y [n] onto {x : sum x = 1, lo <= x_i <= hi} (needs n * lo <= 1 <= n * hi).

    The solver calls this thousands of times on a few numbers: the shift is found in Python floats (the same
    IEEE double operations as on tensors, without a tensor call each); only the sums stay tensor reductions."""
    values = y.tolist()
    cuts = sorted([v - lo for v in values] + [v - hi for v in values])  # sum(clip(y - tau)) falls in tau
    breaks = torch.tensor(cuts, dtype=y.dtype, device=y.device)
    sums = (y[None, :] - breaks[:, None]).clamp(lo, hi).sum(dim=1).tolist()
    j = min(max(sum(s >= 1 for s in sums) - 1, 0), len(cuts) - 2)
    drop = sums[j] - sums[j + 1]
    tau = cuts[j] if drop <= 0 else cuts[j] + (sums[j] - 1) / drop * (cuts[j + 1] - cuts[j])
    return (y - tau).clamp(lo, hi)


def min_norm_weights(gram: torch.Tensor, eps: float, iters: int, tol: float) -> torch.Tensor:
    """Minimise lambda^T G lambda over the simplex with |lambda_i - 1/n| <= eps (float64, on G's device)."""
    n = gram.shape[0]
    lo, hi = max(0.0, 1 / n - eps), min(1.0, 1 / n + eps)
    x_prev = torch.full((n,), 1 / n, dtype=gram.dtype, device=gram.device)
    lipschitz = 2 * float(torch.linalg.eigvalsh(gram)[-1])
    if eps == 0 or lipschitz <= 0:
        return x_prev
    y, t = x_prev, 1.0
    for _ in range(iters):
        x = project_simplex_box(y - (2 / lipschitz) * (gram @ y), lo, hi)
        step = x - x_prev
        if float(step.abs().max()) <= tol:
            return x
        if float((y - x) @ step) > 0:  # momentum points uphill: restart
            y, t = x, 1.0
        else:
            t_next = (1 + math.sqrt(1 + 4 * t * t)) / 2
            y, t = x + ((t - 1) / t_next) * step, t_next
        x_prev = x
    return x_prev


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


@aggregator("fedmgda_plus", check=check_fedmgda, search={"eps": uniform(0.0, 1.0)})
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
    updates; eps >= 1 - 1/n leaves only the simplex constraint (plain MGDA, Desideri 2012). ``iters`` and
    ``tol`` (max change of lambda between iterations) control the QP solve; the updates are never copied
    (G = D^-1 U U^T D^-1 with D the diagonal of the norms).
    """
    n = check_updates(updates, f)
    check_fedmgda(n, f, eps=eps, lr=lr, iters=iters, tol=tol)
    norms = updates.norm(dim=1).clamp_min(TINY_NORM)
    inv = (1 / norms).double()
    gram = (updates @ updates.T).double() * inv[:, None] * inv[None, :]
    lam = min_norm_weights(gram.cpu(), eps, iters, tol).to(updates.device)
    return lr * ((lam * inv.to(updates.device)).to(updates.dtype) @ updates)
