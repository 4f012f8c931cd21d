"""FedTilt (Zhang, Mares De La Cruz, Wang: "FedTilt: Towards Multi-Level Fairness-Preserving and Robust
Federated Learning"), Section III and Algorithm 1.

ClientUpdate, at every minibatch step, with one learning rate for both models (eta1 = eta2 = lr):
- the intermediate model w_n, from w^t, takes an SGD step on the two-level tilted client loss
  R_n(tau, lambda; w_n) (Algorithm 1 line 14, read as local SGD from w^t as Ditto's global copy does);
- the personal model v_n takes a step on L_n(v_n, w^t) = R_n(tau, lambda; v_n) + (mu/2) ||v_n - w^t||^2
  on the same minibatch (line 15).
R_n is computed per minibatch (``tilted.two_level_tilted_loss``): tau tilts across the classes present,
lambda across the samples of a class; both may be negative (robustness to outliers).

ServerUpdate: the global objective R_G(q) = (1/q) log mean_n exp(q dist(w_n, w)) is minimised by the
tilted average sum_n p_n w_n with p_n proportional to exp(q dist(w_n, w^t)) (one gradient step of size
1/2 on R_G with squared Euclidean dist); p is computed with a stable softmax and handed to the configured
aggregator as client weights (uniform mean by default: sum_n p_n (w_n - w^t)).
q = 0 is plain averaging; with q = tau = lambda = 0 FedTilt is Ditto with lambda = mu (Proposition 3),
and as mu -> infinity the personal models collapse onto the global FedAvg model (Proposition 1).
"""

from __future__ import annotations

import numpy as np
import torch

from fedarena.errors import ConfigError
from fedarena.methods.base import Aggregate, Method, ServerInfo, StepContext, method, scatter_rows, sgd
from fedarena.methods.tilted_loss import tilted_loss_fn, tilted_weights
from fedarena.models.batch import Batch

DISTANCES = ("sq_euclidean", "euclidean")


def update_distances(updates: torch.Tensor, dist: str) -> torch.Tensor:
    """dist(w_n, w^t) of every intermediate model from the round-start global model ([n], float64)."""
    sq = (updates.to(torch.float64) ** 2).sum(1)
    return sq if dist == "sq_euclidean" else sq.sqrt()


def repeat_batch(batch: Batch, times: int) -> Batch:
    """The same minibatch for ``times`` stacked copies of the clients' parameters."""
    return Batch(*(torch.cat([t] * times) for t in (batch.x, batch.y, batch.mask, batch.active, batch.index)))


@method("fedtilt")
class FedTilt(Method):
    """FedTilt Algorithm 1 (see the module docstring): tilted intermediate and personal models per client,
    tilted aggregation over the distances of the intermediate models on the server.

    ``q``: tilt of the global aggregation over the distances dist(w_n, w) (> 0: pull towards far clients,
    client fairness; < 0: ignore them, robustness); ``tau``: tilt across classes (client data fairness);
    ``lam``: tilt across the samples of a class (< 0 suppresses outliers); ``mu``: personal regularisation
    (paper: 0.01); ``dist``: sq_euclidean (default; q = 0 is FedAvg) or euclidean. The defaults are Ditto
    with lambda = mu; the paper's clean MNIST setting is tau = 50, lam = 100."""

    evaluates = "personal"

    def __init__(self, *, q: float = 0.0, tau: float = 0.0, lam: float = 0.0, mu: float = 0.01,
                 dist: str = "sq_euclidean"):
        if mu < 0:
            raise ConfigError(f"fedtilt mu must be >= 0, got {mu}")
        if dist not in DISTANCES:
            raise ConfigError(f"fedtilt dist must be one of {', '.join(DISTANCES)}; got {dist!r}")
        self.q, self.tau, self.lam, self.mu, self.dist = float(q), float(tau), float(lam), float(mu), dist

    def init_clients(self, w: torch.Tensor, sizes: np.ndarray) -> dict[str, torch.Tensor]:
        return {"personal": w.expand(len(sizes), -1).clone()}

    def local_init(self, w: torch.Tensor, clients: dict, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"w": w.expand(len(ids), -1).clone(), "v": clients["personal"][ids]}

    def local_step(self, local: dict, batch: Batch, ctx: StepContext) -> dict[str, torch.Tensor]:
        both = torch.cat([local["w"], local["v"]])  # one backend call for the intermediate and personal models
        loss = tilted_loss_fn(ctx.backend.model, self.tau, self.lam)
        _, grads = ctx.backend.grad_of(loss, both, repeat_batch(batch, 2))
        g_w, g_v = grads.chunk(2)
        w_new = sgd(local["w"], g_w, ctx.lr, batch.active)
        v_new = sgd(local["v"], g_v + self.mu * (local["v"] - ctx.w_round), ctx.lr, batch.active)
        return {"w": w_new, "v": v_new}

    def local_result(self, local: dict, w: torch.Tensor, clients: dict, ids: torch.Tensor):
        personal = scatter_rows(clients["personal"], ids, local["v"])
        return local["w"] - w, {**clients, "personal": personal}

    @property
    def reweights_clients(self) -> bool:  # q != 0 tilts the aggregation over the clients' update distances
        return self.q != 0

    def server_step(self, w, clients, updates, info: ServerInfo, aggregate: Aggregate):
        if self.q == 0:
            return w + aggregate(updates, info.weights, info.losses), clients
        p = tilted_weights(update_distances(updates, self.dist), self.q)
        return w + aggregate(updates, info.weights, info.losses, client_weights=p), clients

