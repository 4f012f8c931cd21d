"""Execution backends: how losses and gradients of many clients' parameters are computed.

Both take stacked parameters ``[n, d]`` and a minibatch ``[n, B, ...]`` and return per-client values.
``sequential`` runs plain autograd client by client; ``batched`` runs all clients in one call with
``torch.func.vmap``. They compute the same math, so they give the same numbers (up to float rounding).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.func import grad_and_value, vmap

from fedarena.models.functional import FlatModel
from fedarena.simulation.data import Batch


@dataclass(frozen=True)
class Backend:
    model: FlatModel
    batched: bool

    def grad(self, params: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-client masked mean loss [n] and its gradient [n, d]."""
        if self.batched:
            grads, losses = vmap(grad_and_value(self.model.loss), randomness="different")(
                params, batch.x, batch.y, batch.mask)
            return losses, grads
        losses, grads = [], []
        for i in range(params.shape[0]):
            p = params[i].detach().requires_grad_(True)
            value = self.model.loss(p, batch.x[i], batch.y[i], batch.mask[i])
            (g,) = torch.autograd.grad(value, p)
            losses.append(value.detach())
            grads.append(g)
        return torch.stack(losses), torch.stack(grads)

    @torch.no_grad()
    def loss(self, params: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Per-client masked mean loss [n] (no gradient)."""
        if self.batched:
            return vmap(self.model.loss, randomness="different")(params, batch.x, batch.y, batch.mask)
        return torch.stack([self.model.loss(params[i], batch.x[i], batch.y[i], batch.mask[i])
                            for i in range(params.shape[0])])

    def groups(self, ids):
        """Clients trained together: all at once (batched) or one by one (sequential)."""
        return [ids] if self.batched else [ids[i : i + 1] for i in range(len(ids))]
