"""The two ends of personalisation: one global model (FedAvg) and purely local models."""

from __future__ import annotations

import numpy as np
import torch

from fedarena.methods.base import Method, StepContext, method, scatter_rows, sgd
from fedarena.models.batch import Batch


@method("global")
class FedAvg(Method):
    """FedAvg (McMahan et al. 2017) as Ditto's "global" baseline: local SGD from w^t, then the server
    rule (uniform mean by default, or any robust aggregator) over the updates w_k - w^t."""


@method("local")
class LocalOnly(Method):
    """Every device trains its own model alone ("local" in Ditto's tables): when selected, a device takes
    the round's local SGD steps on its personal model; devices never selected keep the initial model.
    There is no server aggregation. Equals Ditto with lambda = 0 step for step."""

    evaluates = "personal"
    uses_aggregator = False

    def init_clients(self, w: torch.Tensor, sizes: np.ndarray) -> dict[str, torch.Tensor]:
        return {"personal": w.expand(len(sizes), -1).clone()}

    def local_init(self, w: torch.Tensor, clients: dict, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"v": clients["personal"][ids]}

    def local_step(self, local: dict, batch: Batch, ctx: StepContext) -> dict[str, torch.Tensor]:
        _, g = ctx.backend.grad(local["v"], batch)
        return {"v": sgd(local["v"], g, ctx.lr, batch.active)}

    def local_result(self, local: dict, w: torch.Tensor, clients: dict, ids: torch.Tensor):
        personal = scatter_rows(clients["personal"], ids, local["v"])
        return torch.zeros_like(local["v"]), {**clients, "personal": personal}

    def server_step(self, w, clients, updates, info, aggregate):
        return w, clients
