"""Model interpolation ("mapper", Mansour, Mohri, Ro, Suresh 2020), a baseline of Ditto Table 2, in the two
readings of ``methods.paper_or_reference``: ours (``paper``) and the Ditto reference code's (``reference``,
litian96/ditto ``flearn/trainers_MTL/mapper.py``)."""

from __future__ import annotations

import numpy as np
import torch

from fedarena.errors import ConfigError
from fedarena.methods.base import Method, StepContext, method, scatter_rows, sgd
from fedarena.methods.fedtilt import repeat_batch
from fedarena.methods.paper_or_reference import check_mode, finetune_epochs, reference_finetune_steps
from fedarena.methods.personalized import mix
from fedarena.models.batch import Batch

MAPPER_CANDIDATES = (0.25, 0.5, 0.75)  # mixing weights tried per device (Ditto reference, mapper.py)


@method("mapper")
class Mapper(Method):
    """Device k keeps a local model u_k and a weight lam_k (0 at the start: the global model), and is
    evaluated with lam_k u_k + (1 - lam_k) w. A selected device tries every candidate lam on the round's
    minibatches (the same ones for every candidate) and keeps the best.

    ``paper``: u and a global copy w_k train jointly by SGD on F_k(lam u + (1 - lam) w_k) (gradients lam g
    and (1 - lam) g); the candidate with the lowest mean minibatch loss over the round wins; the server
    aggregates its w_k - w^t. ``reference``: only u trains, against the fixed global model w^t, for the
    round's local steps (the reference's local_iters + 1); the winner has the lowest loss on the device's
    whole training set at the interpolation of the last step's start (as the reference evaluates it; ties:
    the first candidate); the device sends one global step -lr (1 - lam) grad F_k(lam u + (1 - lam) w^t)
    on the round's last minibatch; and before the final evaluation every device finetunes its interpolation
    by plain SGD for max(int(epochs * n_k / B), epochs) minibatches. ``candidates``: the mixing weights in
    [0, 1]; ``epochs``: finetuning before the final evaluation (default: none in paper mode, 40 in
    reference mode)."""

    evaluates = "personal"

    def __init__(self, *, candidates: tuple = MAPPER_CANDIDATES, mode: str = "paper", epochs: int | None = None):
        if not candidates or not all(0 <= c <= 1 for c in candidates):
            raise ConfigError(f"mapper candidates must be a non-empty list of weights in [0, 1], got {candidates}")
        self.candidates = tuple(float(c) for c in candidates)
        self.mode = check_mode(self.name, mode)
        self.finalize_epochs = finetune_epochs(self.name, epochs, self.mode, 0)
        self.needs_train = self.mode == "reference"

    def init_clients(self, w: torch.Tensor, sizes: np.ndarray) -> dict[str, torch.Tensor]:
        return {"local": w.expand(len(sizes), -1).clone(),
                "mix": torch.zeros(len(sizes), dtype=w.dtype, device=w.device)}

    def local_init(self, w: torch.Tensor, clients: dict, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        c, n = len(self.candidates), len(ids)
        lam = torch.tensor(self.candidates, dtype=w.dtype, device=w.device).repeat_interleave(n)  # [c * n]
        local = {"u": clients["local"][ids].repeat(c, 1), "lam": lam}
        if self.mode == "paper":
            local |= {"w": w.expand(c * n, -1).clone(), "loss": torch.zeros(c * n, dtype=w.dtype, device=w.device)}
        return local

    def local_step(self, local: dict, batch: Batch, ctx: StepContext) -> dict[str, torch.Tensor]:
        if self.mode == "reference":
            return self._reference_step(local, batch, ctx)
        c, lam = len(self.candidates), local["lam"]
        repeated = repeat_batch(batch, c)
        losses, g = ctx.backend.grad(mix(lam, local["u"], local["w"]), repeated)
        return {"u": sgd(local["u"], lam[:, None] * g, ctx.lr, repeated.active),
                "w": sgd(local["w"], (1 - lam)[:, None] * g, ctx.lr, repeated.active),
                "lam": lam, "loss": local["loss"] + repeated.active * losses}

    def _reference_step(self, local: dict, batch: Batch, ctx: StepContext) -> dict[str, torch.Tensor]:
        """u <- u - lr lam grad F_k(lam u + (1 - lam) w^t); the step-start interpolation's whole-training-set
        loss and the global step at the new u on this minibatch are kept (the last step's are used)."""
        c, lam, u = len(self.candidates), local["lam"], local["u"]
        repeated = repeat_batch(batch, c)
        train = local["train"] if "train" in local else repeat_batch(ctx.train, c)
        bar = mix(lam, u, ctx.w_round)
        pick = ctx.backend.loss(bar, train)
        _, g = ctx.backend.grad(bar, repeated)
        u = sgd(u, lam[:, None] * g, ctx.lr, repeated.active)
        _, g_global = ctx.backend.grad(mix(lam, u, ctx.w_round), repeated)
        step = -ctx.lr * ((1 - lam) * repeated.active)[:, None] * g_global
        return {"u": u, "lam": lam, "pick": pick, "step": step, "train": train}

    def local_result(self, local: dict, w: torch.Tensor, clients: dict, ids: torch.Tensor):
        c, n = len(self.candidates), len(ids)
        scores = local["loss" if self.mode == "paper" else "pick"].view(c, n)
        best = scores.argmin(0) * n + torch.arange(n, device=w.device)  # argmin: the first of tied candidates
        clients = {**clients, "local": scatter_rows(clients["local"], ids, local["u"][best]),
                   "mix": clients["mix"].index_copy_(0, ids, local["lam"][best])}
        update = local["w"][best] - w if self.mode == "paper" else local["step"][best]
        return update, clients

    def eval_params(self, w: torch.Tensor, clients: dict) -> torch.Tensor:
        return mix(clients["mix"], clients["local"], w)

    # Finetuning before the final evaluation (reference mode by default): every device's interpolation
    # lam_k u_k + (1 - lam_k) w* is trained by plain SGD, then stored as its local model with weight 1.
    def finalize_steps(self, sizes: np.ndarray, batch_size: int) -> np.ndarray | None:
        return None if self.mode == "paper" else reference_finetune_steps(sizes, batch_size, self.finalize_epochs)

    def finalize_init(self, w: torch.Tensor, clients: dict, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"v": mix(clients["mix"][ids], clients["local"][ids], w)}

    def finalize_step(self, local: dict, batch: Batch, ctx: StepContext) -> dict[str, torch.Tensor]:
        _, g = ctx.backend.grad(local["v"], batch)
        return {"v": sgd(local["v"], g, ctx.lr, batch.active)}

    def finalize_result(self, local: dict, w: torch.Tensor, clients: dict, ids: torch.Tensor) -> dict:
        ones = torch.ones(len(ids), dtype=clients["mix"].dtype, device=clients["mix"].device)
        return {**clients, "local": scatter_rows(clients["local"], ids, local["v"]),
                "mix": clients["mix"].index_copy_(0, ids, ones)}
