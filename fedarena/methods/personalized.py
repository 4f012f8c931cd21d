"""Personalisation baselines of Ditto Table 2 with per-device state: L2SGD, APFL, Per-FedAvg (HF); mapper
is in ``interpolation.py``.

Each names its paper and the variant Ditto's comparison uses (Ditto Appendix C.2), and offers ``mode:
reference`` for what the reference code (litian96/ditto, ``flearn/trainers_MTL``) computes where the two
differ (``methods.paper_or_reference``). All share the run's learning rate and minibatches.
"""

from __future__ import annotations

import numpy as np
import torch

from fedarena.errors import ConfigError
from fedarena.methods.base import Aggregate, Method, ServerInfo, StepContext, method, scatter_rows, sgd
from fedarena.methods.fedtilt import repeat_batch
from fedarena.methods.finetune import FinetunePhase
from fedarena.methods.paper_or_reference import check_mode, finetune_epochs
from fedarena.models.batch import Batch
from fedarena.search_space import uniform

PER_FEDAVG_BATCHES = 3  # the reference's minibatches per meta-step: inner step, outer gradient, Hessian probe


@method("l2sgd")
class L2SGD(Method):
    """L2SGD's objective (Hanzely & Richtarik 2020) with Ditto's partial-participation solver (Appendix
    C.2): a selected device takes the round's SGD steps on F_k(v_k) + (lam/2) ||v_k - w_bar||^2, w_bar the
    current mean of all personal models, kept as the "global" model. The server moves w_bar by the
    aggregate of the personal models' changes times n/K, which keeps it the exact mean under the uniform
    mean aggregator (a robust aggregator or a model attack acts on those changes). ``mode: reference``
    (trainers_MTL/l2sgd.py): a device sends v_k - w_bar instead, and w_bar += (n/K) aggregate(v_k - w_bar).
    ``lam`` >= 0: pull of every personal model towards the mean of all personal models."""

    evaluates = "personal"
    adds_aggregate = False  # w_bar + (n/K) aggregate

    def __init__(self, *, lam: float = 1.0, mode: str = "paper"):
        if lam < 0:
            raise ConfigError(f"l2sgd lam must be >= 0, got {lam}")
        self.lam = float(lam)
        self.mode = check_mode(self.name, mode)

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
        sent = local["v"] - (local["v0"] if self.mode == "paper" else w)
        return sent, {**clients, "personal": personal}

    def server_step(self, w, clients, updates, info: ServerInfo, aggregate: Aggregate):
        share = len(updates) / clients["personal"].shape[0]
        return w + share * aggregate(updates, info.weights, info.losses), clients


def mix(alpha: torch.Tensor, local: torch.Tensor, shared: torch.Tensor) -> torch.Tensor:
    """alpha_k v_k + (1 - alpha_k) w per row (``shared`` is [d] or [n, d])."""
    return alpha[:, None] * local + (1 - alpha[:, None]) * shared


@method("apfl", search={"alpha": uniform(0.1, 0.9)})
class APFL(Method):
    """APFL (Deng, Kamani, Mahdavi 2020), Algorithm 1: each selected device keeps a local model v_k and a
    mixing weight alpha_k; at every step, on one minibatch, the global copy w_k <- w_k - lr grad F_k(w_k)
    and v_k <- v_k - lr alpha_k grad F_k(vbar_k), vbar_k = alpha_k v_k + (1 - alpha_k) w_k (both at the
    step's start); with ``adaptive``, alpha_k <- clip(alpha_k - alpha_lr <v_k - w_k, grad F_k(vbar_k)>, 0, 1)
    (the Ditto reference uses a fixed alpha). The server aggregates w_k - w^t; device k is evaluated with
    alpha_k v_k + (1 - alpha_k) w. ``mode: reference`` (trainers_MTL/apfl.py): the round's first step takes
    grad F_k at the interpolation the device stored when it last trained, alpha_k v_k + (1 - alpha_k) w_k
    of its last step then (the initial model before), not at alpha_k v_k + (1 - alpha_k) w^t.
    ``alpha`` in [0, 1]: initial mixing weight of the local model (0.5 in both modes: main.py's default;
    the reference's run-script template passes --alpha=0, with which APFL is FedAvg, v_k never moving,
    but the published APFL row differs from FedAvg's, e.g. CelebA under A1 0.710 vs 0.538, so it did not
    run with 0); ``adaptive``: learn it with step ``alpha_lr``."""

    evaluates = "personal"

    def __init__(self, *, alpha: float = 0.5, adaptive: bool = False, alpha_lr: float = 0.01,
                 mode: str = "paper"):
        if not 0 <= alpha <= 1 or alpha_lr < 0:
            raise ConfigError(f"apfl needs alpha in [0, 1] and alpha_lr >= 0, got {alpha}, {alpha_lr}")
        self.alpha, self.adaptive, self.alpha_lr = float(alpha), adaptive, float(alpha_lr)
        self.mode = check_mode(self.name, mode)

    def init_clients(self, w: torch.Tensor, sizes: np.ndarray) -> dict[str, torch.Tensor]:
        clients = {"local": w.expand(len(sizes), -1).clone(),
                   "alpha": torch.full((len(sizes),), self.alpha, dtype=w.dtype, device=w.device)}
        if self.mode == "reference":
            clients["interp"] = w.expand(len(sizes), -1).clone()
        return clients

    def local_init(self, w: torch.Tensor, clients: dict, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        local = {"w": w.expand(len(ids), -1).clone(), "v": clients["local"][ids], "alpha": clients["alpha"][ids]}
        if self.mode == "reference":
            local["bar"] = clients["interp"][ids]
        return local

    def local_step(self, local: dict, batch: Batch, ctx: StepContext) -> dict[str, torch.Tensor]:
        w, v, alpha = local["w"], local["v"], local["alpha"]
        bar = local["bar"] if "bar" in local else mix(alpha, v, w)  # the stored one: reference, first step
        _, grads = ctx.backend.grad(torch.cat([w, bar]), repeat_batch(batch, 2))
        g_w, g_bar = grads.chunk(2)
        if self.adaptive:
            step = self.alpha_lr * batch.active * ((v - w) * g_bar).sum(1)
            alpha = (alpha - step).clamp(0.0, 1.0)
        v_new = sgd(v, local["alpha"][:, None] * g_bar, ctx.lr, batch.active)
        return {"w": sgd(w, g_w, ctx.lr, batch.active), "v": v_new, "alpha": alpha}

    def local_result(self, local: dict, w: torch.Tensor, clients: dict, ids: torch.Tensor):
        clients = {**clients, "local": scatter_rows(clients["local"], ids, local["v"]),
                   "alpha": clients["alpha"].index_copy_(0, ids, local["alpha"])}
        if self.mode == "reference":
            last = mix(local["alpha"], local["v"], local["w"])
            clients["interp"] = scatter_rows(clients["interp"], ids, last)
        return local["w"] - w, clients

    def eval_params(self, w: torch.Tensor, clients: dict) -> torch.Tensor:
        return mix(clients["alpha"], clients["local"], w)


@method("per_fedavg")
class PerFedAvg(FinetunePhase):
    """Per-FedAvg with the Hessian-free update (Fallah, Mokhtari, Ozdaglar 2020, Per-FedAvg (HF)), as in
    Ditto's reference (trainers_MTL/meta.py): at each local step, with alpha = lr and outer step beta,
    g1 = grad F(w); g2 = grad F(w - alpha g1); the Hessian-vector product H g2 is approximated by
    (grad F(w + delta g2) - grad F(w - delta g2)) / (2 delta); w <- w - beta (g2 - alpha H g2).
    ``paper``: the three minibatches of the paper are the step's one minibatch, and devices are evaluated
    after ``epochs`` (default 1) epochs of local SGD from the final global model. ``reference``: each
    meta-step takes three consecutive minibatches of the round (one per gradient; so local_steps must be a
    multiple of 3: the reference's local_iters = local_steps / 3), and devices finetune from the final
    global model for max(int(epochs * n_k / B), epochs) minibatches (default epochs 40) before evaluation.
    ``beta`` > 0: outer (meta) step, the reference's 0.01; ``delta`` > 0: finite-difference radius;
    ``epochs`` >= 0 (0: the global model evaluates)."""

    def __init__(self, *, beta: float = 0.01, delta: float = 0.001, epochs: int | None = None,
                 mode: str = "paper"):
        if beta <= 0 or delta <= 0:
            raise ConfigError(f"per_fedavg needs beta > 0 and delta > 0; got {beta}, {delta}")
        mode = check_mode(self.name, mode)
        super().__init__(epochs=finetune_epochs(self.name, epochs, mode, 1), mode=mode)
        self.beta, self.delta = float(beta), float(delta)

    def local_step(self, local: dict, batch: Batch, ctx: StepContext) -> dict[str, torch.Tensor]:
        if self.mode == "reference":
            return self._reference_step(local, batch, ctx)
        w, backend = local["w"], ctx.backend
        _, g1 = backend.grad(w, batch)
        _, g2 = backend.grad(w - ctx.lr * g1, batch)
        return {**local, "w": sgd(w, g2 - ctx.lr * self._hvp(w, g2, batch, ctx), self.beta, batch.active)}

    def _hvp(self, w: torch.Tensor, g2: torch.Tensor, batch: Batch, ctx: StepContext) -> torch.Tensor:
        """Finite-difference Hessian-vector product H g2 on ``batch``."""
        probes = torch.cat([w + self.delta * g2, w - self.delta * g2])
        _, g_probe = ctx.backend.grad(probes, repeat_batch(batch, 2))
        plus, minus = g_probe.chunk(2)
        return (plus - minus) / (2 * self.delta)

    def _reference_step(self, local: dict, batch: Batch, ctx: StepContext) -> dict[str, torch.Tensor]:
        """One of a meta-step's three minibatches: the inner SGD step, the gradient there, the HVP + update."""
        phase, w = local.get("phase", 0), local["w"]
        if phase == 0:
            _, g1 = ctx.backend.grad(w, batch)
            return {**local, "phase": 1, "inner": sgd(w, g1, ctx.lr, batch.active)}
        if phase == 1:
            _, g2 = ctx.backend.grad(local["inner"], batch)
            return {**local, "phase": 2, "g2": g2}
        g2 = local["g2"]
        return {"w": sgd(w, g2 - ctx.lr * self._hvp(w, g2, batch, ctx), self.beta, batch.active), "phase": 0}

    def local_result(self, local: dict, w: torch.Tensor, clients: dict, ids: torch.Tensor):
        if local.get("phase", 0):
            raise ConfigError(f"per_fedavg mode=reference takes {PER_FEDAVG_BATCHES} minibatches per local "
                              "meta-step: set local_steps to a multiple of 3")
        return super().local_result(local, w, clients, ids)
