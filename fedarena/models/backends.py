"""Execution backends: how losses and gradients of many clients' parameters are computed.

Both take stacked parameters ``[n, d]`` and a minibatch ``[n, B, ...]`` and return per-client values.
``sequential`` runs plain autograd client by client; ``batched`` runs all clients in one call with
``torch.func.vmap``. They compute the same math, so they give the same numbers (up to float rounding).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.func import grad_and_value, vmap

from fedarena.models.batch import Batch
from fedarena.models.functional import FlatModel


@dataclass(frozen=True)
class Backend:
    model: FlatModel
    batched: bool

    def grad(self, params: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-client masked mean loss [n] and its gradient [n, d]."""
        return self.grad_of(self.model.loss, params, batch)

    def grad_of(self, loss_fn: Callable[..., torch.Tensor], params: torch.Tensor, batch: Batch,
                *extra: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-client value [n] and gradient [n, d] of a method's own objective
        ``loss_fn(flat, x, y, mask, *extra_row)`` (e.g. a tilted loss); ``extra`` are per-client tensors
        [n, ...] passed row by row. Tensors that ``loss_fn`` captures are shared by every client."""
        if self.batched:
            grads, values = vmap(grad_and_value(loss_fn), randomness="different")(
                params, batch.x, batch.y, batch.mask, *extra)
            return values, grads
        values, grads = [], []
        for i in range(params.shape[0]):
            p = params[i].detach().requires_grad_(True)
            value = loss_fn(p, *self._row(batch, i), *(e[i] for e in extra))
            (g,) = torch.autograd.grad(value, p)
            values.append(value.detach())
            grads.append(g)
        if len(grads) == 1:  # the sequential backend's usual group of one: no [1, d] copy
            return values[0].unsqueeze(0), grads[0].unsqueeze(0)
        return torch.stack(values), torch.stack(grads)

    @torch.no_grad()
    def loss(self, params: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Per-client masked mean loss [n] (no gradient)."""
        if self.batched:
            return vmap(self.model.loss, randomness="different")(params, batch.x, batch.y, batch.mask)
        return torch.stack([self.model.loss(params[i], *self._row(batch, i)) for i in range(params.shape[0])])

    def _row(self, batch: Batch, i: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Client i's minibatch; for batch-norm models without the padded tail (real samples come first),
        so that padding never enters the batch statistics."""
        x, y, mask = batch.x[i], batch.y[i], batch.mask[i]
        if not self.model.has_batch_norm:
            return x, y, mask
        real = max(int(mask.sum()), 1)
        return x[:real], y[:real], mask[:real]

    def groups(self, ids):
        """Clients trained together: all at once (batched) or one by one (sequential)."""
        return [ids] if self.batched else [ids[i : i + 1] for i in range(len(ids))]
