"""The two ends of personalisation: one global model (FedAvg) and purely local models."""

from __future__ import annotations

import torch

from fedarena.methods.base import METHODS, Method, StepContext, scatter_rows, sgd
from fedarena.simulation.data import Batch


class FedAvg(Method):
    """FedAvg (McMahan et al. 2017) as Ditto's "global" baseline: local SGD from w^t, then the server
    rule (uniform mean by default, or any robust aggregator) over the updates w_k - w^t."""

    name = "global"


class LocalOnly(Method):
    """Every device trains its own model alone ("local" in Ditto's tables): when selected, a device takes
    the round's local SGD steps on its personal model; devices never selected keep the initial model.
    There is no server aggregation. Equals Ditto with lambda = 0 step for step."""

    name = "local"
    evaluates = "personal"
    uses_aggregator = False

    def init_clients(self, w: torch.Tensor, num_clients: int) -> dict[str, torch.Tensor]:
        return {"personal": w.expand(num_clients, -1).clone()}

    def local_init(self, w: torch.Tensor, clients: dict, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"v": clients["personal"][ids]}

    def local_step(self, local: dict, batch: Batch, ctx: StepContext) -> dict[str, torch.Tensor]:
        _, g = ctx.backend.grad(local["v"], batch)
        return {"v": sgd(local["v"], g, ctx.lr, batch.active)}

    def local_result(self, local: dict, w: torch.Tensor, clients: dict, ids: torch.Tensor):
        personal = scatter_rows(clients["personal"], ids, local["v"])
        return torch.zeros_like(local["v"]), {**clients, "personal": personal}

    def server_update(self, w, updates, weights, losses, aggregate) -> torch.Tensor:
        return w


@METHODS.register("global")
def fedavg() -> Method:
    return FedAvg()


@METHODS.register("local")
def local() -> Method:
    return LocalOnly()
