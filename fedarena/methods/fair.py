"""Fair FL methods that reweight clients on the server: TERM, q-FFL (q-FedAvg) and AFL.

All three train locally like FedAvg and change only the server rule, as client weights p handed to the
configured aggregator (``Aggregator.with_client_weights``): the default uniform mean returns exactly
sum_i p_i u_i, a robust aggregator (or a pre-aggregator such as clipping) sees the reweighted updates, and
a weighted rule combines p with its aggregation weights so that sizes count once.
"""

from __future__ import annotations

import numpy as np
import torch

from fedarena.errors import ConfigError
from fedarena.methods.base import Aggregate, Method, ServerInfo, method
from fedarena.methods.tilted_loss import tilted_weights
from fedarena.search_space import log_uniform

QFFL_EPS = 1e-10  # the q-FFL reference adds it to the losses before taking powers


@method("term", search={"t": log_uniform(0.1, 5.0)})
class Term(Method):
    """Ditto's "fair" baseline, TERM (Li, Beirami, Sanjabi, Smith, ICLR 2021) at the client level: FedAvg
    local training, and the server averages the updates with weights proportional to exp(t * F_k(w^t)),
    F_k(w^t) the client's training loss at the round-start global model (Ditto reference code: weights
    exp(q * loss), t = 1; Section 4.3 also t = 2, 5). t = 0 is the plain mean; negative t down-weights."""

    needs_losses = True
    reweights_clients = True
    device_reads = ("losses",)

    def __init__(self, *, t: float = 1.0):
        self.t = float(t)

    def server_step(self, w, clients, updates, info: ServerInfo, aggregate: Aggregate):
        p = tilted_weights(info.losses.to(torch.float64), self.t)
        return w + aggregate(updates, info.weights, info.losses, client_weights=p), clients


def qffl_weights(losses: torch.Tensor, updates: torch.Tensor, q: float, lr: float) -> torch.Tensor:
    """q-FedAvg's server step (Li, Sanjabi, Beirami, Smith, ICLR 2020, Algorithm 2) as update weights.

    With Delta w_k = L (w - w_k), L = 1/lr: Delta_k = F_k^q Delta w_k, h_k = q F_k^(q-1) ||Delta w_k||^2
    + L F_k^q, and w <- w - sum_k Delta_k / sum_k h_k = w + sum_k p_k (w_k - w) with
    p_k = L F_k^q / sum_j h_j. Losses get +1e-10 as in the reference; q = 0 gives p_k = 1/n (FedAvg)."""
    n = len(losses)
    if q == 0:
        return torch.full((n,), 1.0 / n, dtype=torch.float64, device=losses.device)
    big_l = 1.0 / lr
    f = losses.to(torch.float64) + QFFL_EPS
    sq_norms = (updates.to(torch.float64) ** 2).sum(1) * big_l**2
    h = q * f ** (q - 1) * sq_norms + big_l * f**q
    return big_l * f**q / h.sum()


@method("qffl", search={"q": log_uniform(0.001, 15.0)})
class QFFL(Method):
    """q-FFL solved with q-FedAvg (Li et al., ICLR 2020): FedAvg local training; the server step weights
    client k by F_k^q (F_k its training loss at the round-start global model) and uses the dynamic step
    size 1 / sum_k h_k from the Lipschitz estimate L = 1/lr (``qffl_weights``). ``q`` >= 0: fairness
    exponent (0 = FedAvg; larger q = more uniform losses)."""

    needs_losses = True
    reweights_clients = True
    device_reads = ("losses",)

    def __init__(self, *, q: float = 1.0):
        if q < 0:
            raise ConfigError(f"qffl q must be >= 0, got {q}")
        self.q = float(q)

    def server_step(self, w, clients, updates, info: ServerInfo, aggregate: Aggregate):
        p = qffl_weights(info.losses, updates, self.q, info.lr)
        return w + aggregate(updates, info.weights, info.losses, client_weights=p), clients


def project_simplex(v: torch.Tensor) -> torch.Tensor:
    """Euclidean projection onto the probability simplex (sort-based; Duchi et al., ICML 2008)."""
    u = torch.sort(v, descending=True).values
    cumulative = u.cumsum(0) - 1
    k = torch.arange(1, len(v) + 1, dtype=v.dtype, device=v.device)
    rho = int((u - cumulative / k > 0).nonzero().max())
    theta = cumulative[rho] / (rho + 1)
    return (v - theta).clamp_min(0)


@method("afl", search={"lr_lambda": log_uniform(0.001, 0.1)})
class AFL(Method):
    """Agnostic FL (Mohri, Sivek, Suresh, ICML 2019): min_w max_{lambda in simplex} sum_k lambda_k F_k(w),
    by stochastic gradient descent-ascent as in the q-FFL authors' baseline (fair_flearn, trainers/afl.py):
    the server moves w along the lambda-weighted updates of the selected clients (lambda renormalised over
    them; with full participation this is sum_k lambda_k (w_k - w)), then takes a projected ascent step
    lambda <- Proj_simplex(lambda + lr_lambda * F(w^t)) on the selected clients' losses at w^t.
    The dual weights are per-client state (``afl_lambda``, starting uniform). Evaluates the last iterate
    (the reference reports the running average of the iterates). ``lr_lambda`` > 0: step size of the
    projected ascent on the client mixture weights."""

    needs_losses = True
    reweights_clients = True
    device_reads = ("losses",)

    def __init__(self, *, lr_lambda: float = 0.01):
        if lr_lambda <= 0:
            raise ConfigError(f"afl lr_lambda must be > 0, got {lr_lambda}")
        self.lr_lambda = float(lr_lambda)

    def init_clients(self, w: torch.Tensor, sizes: np.ndarray) -> dict[str, torch.Tensor]:
        return {"afl_lambda": torch.full((len(sizes),), 1.0 / len(sizes), dtype=w.dtype, device=w.device)}

    def server_step(self, w, clients, updates, info: ServerInfo, aggregate: Aggregate):
        lam = clients["afl_lambda"]
        chosen = lam[info.ids].to(torch.float64)
        p = chosen / chosen.sum() if bool(chosen.sum() > 0) else torch.full_like(chosen, 1.0 / len(chosen))
        w_new = w + aggregate(updates, info.weights, info.losses, client_weights=p)
        ascended = lam.index_add(0, info.ids, (self.lr_lambda * info.losses).to(lam.dtype))
        lam.copy_(project_simplex(ascended))  # per-client table, updated in place like scatter_rows
        return w_new, clients

