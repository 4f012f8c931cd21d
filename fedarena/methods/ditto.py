"""Ditto (Li, Hu, Beirami, Smith, ICML 2021), Algorithm 2.

Each selected device k takes s local minibatch SGD steps on F_k for the global copy w_k (from w^t), and,
on the same minibatch with the same learning rate, s steps on its personal model
v_k <- v_k - lr (grad F_k(v_k) + lambda (v_k - w^t)), the proximal term pulling towards the round-start
global model (reference code, flearn/trainers_MTL/ditto.py). The server aggregates w_k - w^t with the
configured rule (Table 3's "Ditto + robust aggregator"). Personal models evaluate the devices.
"""

from __future__ import annotations

import numpy as np
import torch

from fedarena.errors import ConfigError
from fedarena.methods.base import Method, StepContext, method, scatter_rows, sgd
from fedarena.models.batch import Batch
from fedarena.search_space import log_uniform

DYNAMIC_CANDIDATES = {"strong": (0.05, 0.1, 0.2), "normal": (0.1, 1.0, 2.0)}  # Ditto Appendix D.2
FEW_VAL_SAMPLES = 4  # devices with fewer validation samples use a fixed lambda
FEW_VAL_LAMBDA = {"strong": 0.1, "normal": 1.0}


@method("ditto", search={"lam": log_uniform(0.01, 2.0)})
class Ditto(Method):
    """Ditto (see the module docstring). ``lam``: fixed lambda (ignored when ``dynamic_lam``);
    ``dynamic_lam``: Appendix D.2's per-device lambda chosen on validation data, from ``lam_candidates``
    (``lam_candidates_strong`` under a strong attack), which default to Appendix D.2's sets."""

    evaluates = "personal"

    def __init__(self, *, lam: float = 1.0, dynamic_lam: bool = False, lam_candidates: tuple | None = None,
                 lam_candidates_strong: tuple | None = None):
        if lam < 0:
            raise ConfigError(f"ditto lam must be >= 0, got {lam}")
        for cands in (lam_candidates, lam_candidates_strong):
            if cands is not None and (not cands or min(cands) < 0):
                raise ConfigError(f"ditto lambda candidates must be a non-empty list of values >= 0, got {cands}")
        self.lam = float(lam)
        self.dynamic_lam = dynamic_lam
        self.needs_val = dynamic_lam
        self.candidates = {"normal": tuple(lam_candidates or DYNAMIC_CANDIDATES["normal"]),
                           "strong": tuple(lam_candidates_strong or DYNAMIC_CANDIDATES["strong"])}

    def init_clients(self, w: torch.Tensor, sizes: np.ndarray) -> dict[str, torch.Tensor]:
        return {"personal": w.expand(len(sizes), -1).clone()}

    def local_init(self, w: torch.Tensor, clients: dict, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"w": w.expand(len(ids), -1).clone(), "v": clients["personal"][ids]}

    def local_step(self, local: dict, batch: Batch, ctx: StepContext) -> dict[str, torch.Tensor]:
        both = torch.cat([local["w"], local["v"]])  # one backend call for the global copy and the personal model
        doubled = Batch(*(torch.cat([t, t]) for t in (batch.x, batch.y, batch.mask, batch.active, batch.index)))
        _, grads = ctx.backend.grad(both, doubled)
        g_w, g_v = grads.chunk(2)
        w_new = sgd(local["w"], g_w, ctx.lr, batch.active)
        if self.dynamic_lam:
            v_new = self._greedy_personal_step(local["v"], g_v, ctx, batch.active)
        else:
            v_new = sgd(local["v"], g_v + self.lam * (local["v"] - ctx.w_round), ctx.lr, batch.active)
        return {"w": w_new, "v": v_new}

    def _greedy_personal_step(self, v, g_v, ctx: StepContext, active) -> torch.Tensor:
        """Dynamic lambda (Appendix D.2, as the reference code does it): at each step every device keeps the
        candidate lambda whose step gives the lowest loss on its own validation data."""
        kind = "strong" if ctx.strong_attack else "normal"
        lams = torch.tensor(self.candidates[kind], dtype=v.dtype, device=v.device)
        prox = v - ctx.w_round
        steps = torch.stack([sgd(v, g_v + lam * prox, ctx.lr, active) for lam in lams])  # [c, n, d]
        val_losses = torch.stack([ctx.backend.loss(s, ctx.val) for s in steps])  # [c, n]
        best = val_losses.argmin(0)
        few = ctx.val.mask.sum(1) < FEW_VAL_SAMPLES
        fallback = sgd(v, g_v + FEW_VAL_LAMBDA[kind] * prox, ctx.lr, active)
        chosen = steps[best, torch.arange(v.shape[0], device=v.device)]
        return torch.where(few[:, None], fallback, chosen)

    def local_result(self, local: dict, w: torch.Tensor, clients: dict, ids: torch.Tensor):
        personal = scatter_rows(clients["personal"], ids, local["v"])
        return local["w"] - w, {**clients, "personal": personal}

