"""Personalisation baselines of Ditto Table 2 with per-device state: L2SGD, APFL, mapper, Per-FedAvg (HF).

Each names its paper and the variant Ditto's comparison uses (Ditto Appendix C.2 and the reference code,
litian96/ditto ``flearn/trainers_MTL``). All share the run's learning rate and minibatches.
"""

from __future__ import annotations

import numpy as np
import torch

from fedarena.methods.base import Aggregate, Method, ServerInfo, StepContext, method, scatter_rows, sgd
from fedarena.methods.fedtilt import repeat_batch
from fedarena.methods.finetune import FinetunePhase
from fedarena.models.batch import Batch
from fedarena.params import ConfigError

MAPPER_CANDIDATES = (0.25, 0.5, 0.75)  # mixing weights tried per device (Ditto reference, mapper.py)


@method("l2sgd")
class L2SGD(Method):
    """L2SGD's objective (Hanzely & Richtarik 2020) with Ditto's partial-participation solver (Appendix
    C.2): a selected device takes the round's SGD steps on F_k(v_k) + (lam/2) ||v_k - w_bar||^2, w_bar the
    current mean of all personal models, kept as the "global" model. The server moves w_bar by the
    aggregate of the personal models' changes times n/K, which keeps it the exact mean under the uniform
    mean aggregator (a robust aggregator or a model attack acts on those changes). ``lam`` >= 0: pull of
    every personal model towards the mean of all personal models."""

    evaluates = "personal"

    def __init__(self, *, lam: float = 1.0):
        if lam < 0:
            raise ConfigError(f"l2sgd lam must be >= 0, got {lam}")
        self.lam = float(lam)

    def init_clients(self, w: torch.Tensor, sizes: np.ndarray) -> dict[str, torch.Tensor]:
        return {"personal": w.expand(len(sizes), -1).clone()}

    def local_init(self, w: torch.Tensor, clients: dict, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        rows = clients["personal"][ids]
        return {"v": rows, "v0": rows}

    def local_step(self, local: dict, batch: Batch, ctx: StepContext) -> dict[str, torch.Tensor]:
        _, g = ctx.backend.grad(local["v"], batch)
        return {**local, "v": sgd(local["v"], g + self.lam * (local["v"] - ctx.w_round), ctx.lr, batch.active)}

    def local_result(self, local: dict, w: torch.Tensor, clients: dict, ids: torch.Tensor):
        personal = scatter_rows(clients["personal"], ids, local["v"])
        return local["v"] - local["v0"], {**clients, "personal": personal}

    def server_step(self, w, clients, updates, info: ServerInfo, aggregate: Aggregate):
        share = len(updates) / clients["personal"].shape[0]
        return w + share * aggregate(updates, info.weights, info.losses), clients


def mix(alpha: torch.Tensor, local: torch.Tensor, shared: torch.Tensor) -> torch.Tensor:
    """alpha_k v_k + (1 - alpha_k) w per row (``shared`` is [d] or [n, d])."""
    return alpha[:, None] * local + (1 - alpha[:, None]) * shared


@method("apfl")
class APFL(Method):
    """APFL (Deng, Kamani, Mahdavi 2020), Algorithm 1: each selected device keeps a local model v_k and a
    mixing weight alpha_k; at every step, on one minibatch, the global copy w_k <- w_k - lr grad F_k(w_k)
    and v_k <- v_k - lr alpha_k grad F_k(vbar_k), vbar_k = alpha_k v_k + (1 - alpha_k) w_k (both at the
    step's start); with ``adaptive``, alpha_k <- clip(alpha_k - alpha_lr <v_k - w_k, grad F_k(vbar_k)>, 0, 1)
    (the Ditto reference uses a fixed alpha). The server aggregates w_k - w^t; device k is evaluated with
    alpha_k v_k + (1 - alpha_k) w. ``alpha`` in [0, 1]: initial mixing weight of the local model;
    ``adaptive``: learn it with step ``alpha_lr``."""

    evaluates = "personal"

    def __init__(self, *, alpha: float = 0.5, adaptive: bool = False, alpha_lr: float = 0.01):
        if not 0 <= alpha <= 1 or alpha_lr < 0:
            raise ConfigError(f"apfl needs alpha in [0, 1] and alpha_lr >= 0, got {alpha}, {alpha_lr}")
        self.alpha, self.adaptive, self.alpha_lr = float(alpha), adaptive, float(alpha_lr)

    def init_clients(self, w: torch.Tensor, sizes: np.ndarray) -> dict[str, torch.Tensor]:
        return {"local": w.expand(len(sizes), -1).clone(),
                "alpha": torch.full((len(sizes),), self.alpha, dtype=w.dtype, device=w.device)}

    def local_init(self, w: torch.Tensor, clients: dict, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"w": w.expand(len(ids), -1).clone(), "v": clients["local"][ids], "alpha": clients["alpha"][ids]}

    def local_step(self, local: dict, batch: Batch, ctx: StepContext) -> dict[str, torch.Tensor]:
        w, v, alpha = local["w"], local["v"], local["alpha"]
        _, grads = ctx.backend.grad(torch.cat([w, mix(alpha, v, w)]), repeat_batch(batch, 2))
        g_w, g_bar = grads.chunk(2)
        if self.adaptive:
            step = self.alpha_lr * batch.active * ((v - w) * g_bar).sum(1)
            alpha = (alpha - step).clamp(0.0, 1.0)
        v_new = sgd(v, local["alpha"][:, None] * g_bar, ctx.lr, batch.active)
        return {"w": sgd(w, g_w, ctx.lr, batch.active), "v": v_new, "alpha": alpha}

    def local_result(self, local: dict, w: torch.Tensor, clients: dict, ids: torch.Tensor):
        clients = {**clients, "local": scatter_rows(clients["local"], ids, local["v"]),
                   "alpha": clients["alpha"].index_copy_(0, ids, local["alpha"])}
        return local["w"] - w, clients

    def eval_params(self, w: torch.Tensor, clients: dict) -> torch.Tensor:
        return mix(clients["alpha"], clients["local"], w)


@method("mapper")
class Mapper(Method):
    """Model interpolation ("mapper", Mansour, Mohri, Ro, Suresh 2020) as in Ditto's reference code
    (trainers_MTL/mapper.py): device k keeps a local model u_k and a weight lam_k, and is evaluated with
    lam_k u_k + (1 - lam_k) w. A selected device trains, for each candidate lam in (0.25, 0.5, 0.75) on the
    same minibatches, u and its global copy w_k jointly by SGD on F_k(lam u + (1 - lam) w_k) (gradients
    lam g and (1 - lam) g), and keeps the candidate with the lowest mean minibatch loss over the round
    (the reference picks by the training loss). The server aggregates w_k - w^t of the chosen candidate.
    Devices start with lam_k = 0 (the global model). No final finetuning (the reference adds one).
    ``candidates``: the mixing weights in [0, 1] tried per device each time it is selected."""

    evaluates = "personal"

    def __init__(self, *, candidates: tuple = MAPPER_CANDIDATES):
        if not candidates or not all(0 <= c <= 1 for c in candidates):
            raise ConfigError(f"mapper candidates must be a non-empty list of weights in [0, 1], got {candidates}")
        self.candidates = tuple(float(c) for c in candidates)

    def init_clients(self, w: torch.Tensor, sizes: np.ndarray) -> dict[str, torch.Tensor]:
        return {"local": w.expand(len(sizes), -1).clone(),
                "mix": torch.zeros(len(sizes), dtype=w.dtype, device=w.device)}

    def local_init(self, w: torch.Tensor, clients: dict, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        c, n = len(self.candidates), len(ids)
        lam = torch.tensor(self.candidates, dtype=w.dtype, device=w.device).repeat_interleave(n)  # [c * n]
        return {"u": clients["local"][ids].repeat(c, 1), "w": w.expand(c * n, -1).clone(), "lam": lam,
                "loss": torch.zeros(c * n, dtype=w.dtype, device=w.device)}

    def local_step(self, local: dict, batch: Batch, ctx: StepContext) -> dict[str, torch.Tensor]:
        c, lam = len(self.candidates), local["lam"]
        repeated = repeat_batch(batch, c)
        losses, g = ctx.backend.grad(mix(lam, local["u"], local["w"]), repeated)
        return {"u": sgd(local["u"], lam[:, None] * g, ctx.lr, repeated.active),
                "w": sgd(local["w"], (1 - lam)[:, None] * g, ctx.lr, repeated.active),
                "lam": lam, "loss": local["loss"] + repeated.active * losses}

    def local_result(self, local: dict, w: torch.Tensor, clients: dict, ids: torch.Tensor):
        c, n = len(self.candidates), len(ids)
        best = local["loss"].view(c, n).argmin(0) * n + torch.arange(n, device=w.device)
        clients = {**clients, "local": scatter_rows(clients["local"], ids, local["u"][best]),
                   "mix": clients["mix"].index_copy_(0, ids, local["lam"][best])}
        return local["w"][best] - w, clients

    def eval_params(self, w: torch.Tensor, clients: dict) -> torch.Tensor:
        return mix(clients["mix"], clients["local"], w)


@method("per_fedavg")
class PerFedAvg(FinetunePhase):
    """Per-FedAvg with the Hessian-free update (Fallah, Mokhtari, Ozdaglar 2020, Per-FedAvg (HF)), as in
    Ditto's reference (trainers_MTL/meta.py): at each local step, with alpha = lr and outer step beta,
    g1 = grad F(w); g2 = grad F(w - alpha g1); the Hessian-vector product H g2 is approximated by
    (grad F(w + delta g2) - grad F(w - delta g2)) / (2 delta); w <- w - beta (g2 - alpha H g2). The three
    minibatches of the paper are the step's one minibatch here. Devices are evaluated after ``epochs``
    epochs of local SGD from the final global model (the reference finetunes too; 0: the global model).
    ``beta`` > 0: outer (meta) step, the reference's 0.01; ``delta`` > 0: finite-difference radius."""

    def __init__(self, *, beta: float = 0.01, delta: float = 0.001, epochs: int = 1):
        if beta <= 0 or delta <= 0 or epochs < 0:
            raise ConfigError(f"per_fedavg needs beta > 0, delta > 0, epochs >= 0; got {beta}, {delta}, {epochs}")
        super().__init__(epochs=int(epochs))
        self.beta, self.delta = float(beta), float(delta)

    def local_step(self, local: dict, batch: Batch, ctx: StepContext) -> dict[str, torch.Tensor]:
        w, backend = local["w"], ctx.backend
        _, g1 = backend.grad(w, batch)
        _, g2 = backend.grad(w - ctx.lr * g1, batch)
        probes = torch.cat([w + self.delta * g2, w - self.delta * g2])
        _, g_probe = backend.grad(probes, repeat_batch(batch, 2))
        plus, minus = g_probe.chunk(2)
        hvp = (plus - minus) / (2 * self.delta)
        return {**local, "w": sgd(w, g2 - ctx.lr * hvp, self.beta, batch.active)}

