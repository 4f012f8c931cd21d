"""Personalisation by finetuning from the global model w* (Ditto Table 2 and Section 3.2 baselines).

Each method trains w* with FedAvg (and the configured aggregator) for the run's rounds, then, in the
engine's finalize phase, every device runs ``epochs`` epochs of minibatch SGD (the run's lr and batch
size) from v_k = w* on its own objective; the finetuned models evaluate the devices. Before the finalize
phase, evaluations score the global model. Ditto runs 50 epochs (Appendix D.4, Table 2).

``mode: reference`` follows the reference code (litian96/ditto, trainers_global/finetuning.py,
trainers_MTL/{ewc,kl}.py): max(int(epochs * n_k / B), epochs) full minibatches per device, epochs = 40 by
default (``methods.paper_or_reference``), and each method's own differences (see finetuning, EWC and SKL).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from fedarena.errors import ConfigError
from fedarena.methods.base import Method, StepContext, method, scatter_rows, sgd
from fedarena.methods.paper_or_reference import check_mode, finetune_epochs, reference_finetune_steps
from fedarena.models.batch import Batch

DITTO_FINETUNE_EPOCHS = 50
# trainers_global/finetuning.py steps with g + lam (v - w*), lam from --lam: the run scripts pass 1
# (run.sh, run_*.sh), main.py's default is 0 (plain SGD). The reference mode takes the scripts' value.
REFERENCE_FINETUNE_LAM = 1.0
EWC_FISHER_BATCHES = 4  # the reference's Fisher: squared minibatch gradients at w*, averaged over 4 batches
KERAS_EPSILON = 1e-7  # tf.keras.losses.KLD clips both distributions to [1e-7, 1]


def check_finetune(name: str, epochs: int, lam: float | None = None) -> None:
    if epochs < 0:
        raise ConfigError(f"{name} epochs must be >= 0, got {epochs}")
    if lam is not None:
        check_lam(name, lam)


def check_lam(name: str, lam: float) -> None:
    if lam < 0:
        raise ConfigError(f"{name} lam must be >= 0, got {lam}")


class FinetunePhase(Method):
    """FedAvg rounds, then ``epochs`` epochs of per-device SGD from w* on F_k(v) (subclasses add a penalty to
    ``personal_grad``). ``mode``: ``paper`` (``epochs`` epochs, default 50) or ``reference``
    (max(int(epochs * n_k / B), epochs) full minibatches, default epochs 40)."""

    evaluates = "personal"
    extra_reference_steps = 0  # finalize steps the reference spends before finetuning (EWC's Fisher)

    def __init__(self, *, epochs: int | None = None, mode: str = "paper"):
        self.mode = check_mode(self.name, mode)
        self.finalize_epochs = finetune_epochs(self.name, epochs, self.mode, DITTO_FINETUNE_EPOCHS)

    def finalize_steps(self, sizes: np.ndarray, batch_size: int) -> np.ndarray | None:
        if self.mode == "paper":
            return None
        return reference_finetune_steps(sizes, batch_size, self.finalize_epochs) + self.extra_reference_steps

    def init_clients(self, w: torch.Tensor, sizes: np.ndarray) -> dict[str, torch.Tensor]:
        return {"personal": w.expand(len(sizes), -1).clone(),
                "finetuned": torch.zeros(len(sizes), dtype=w.dtype, device=w.device)}

    def eval_params(self, w: torch.Tensor, clients: dict) -> torch.Tensor:
        done = clients["finetuned"] > 0
        if bool(done.all()):
            return clients["personal"]
        if not bool(done.any()):
            return w
        return torch.where(done[:, None], clients["personal"], w)

    def finalize_init(self, w: torch.Tensor, clients: dict, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"v": w.expand(len(ids), -1).clone()}

    def finalize_step(self, local: dict, batch: Batch, ctx: StepContext) -> dict[str, torch.Tensor]:
        local = self.prepare(local, batch, ctx)
        g = self.personal_grad(local, batch, ctx)
        return {**local, "v": sgd(local["v"], g, ctx.lr, batch.active)}

    def prepare(self, local: dict, batch: Batch, ctx: StepContext) -> dict:
        return local

    def personal_grad(self, local: dict, batch: Batch, ctx: StepContext) -> torch.Tensor:
        _, g = ctx.backend.grad(local["v"], batch)
        return g

    def finalize_result(self, local: dict, w: torch.Tensor, clients: dict, ids: torch.Tensor) -> dict:
        personal = scatter_rows(clients["personal"], ids, local["v"])
        finetuned = clients["finetuned"].index_fill_(0, ids, 1.0)
        return {**clients, "personal": personal, "finetuned": finetuned}


@method("finetuning")
class PlainFinetuning(FinetunePhase):
    """Plain finetuning (Ditto Table 2), see ``FinetunePhase``. ``lam``: the reference's proximal weight, the
    step's gradient being grad F_k(v) + lam (v - w*) (trainers_global/finetuning.py); null = the mode's
    value: 0 in ``paper`` mode (plain SGD, as the paper describes), 1 in ``reference`` mode (what the
    reference's run scripts pass; its main.py defaults to 0, so which one produced Table 2 is not known)."""

    def __init__(self, *, epochs: int | None = None, mode: str = "paper", lam: float | None = None):
        super().__init__(epochs=epochs, mode=mode)
        if lam is None:
            lam = REFERENCE_FINETUNE_LAM if self.mode == "reference" else 0.0
        check_lam(self.name, lam)
        self.lam = float(lam)

    def personal_grad(self, local, batch, ctx) -> torch.Tensor:
        g = super().personal_grad(local, batch, ctx)
        return g if self.lam == 0 else g + self.lam * (local["v"] - ctx.w_round)


@method("ditto_finetune")
class DittoFinetune(FinetunePhase):
    """Ditto's finetuning solver (Ditto Section 3.2, Figure 6): w* by FedAvg, then every device minimises
    h_k(v; w*) = F_k(v) + (lam/2) ||v - w*||^2 from v = w* (gradient grad F_k(v) + lam (v - w*)).

    ``select_epochs`` (default, Section 4.4 / Appendix D.1: "run different iterations of mini-batch SGD and
    pick the best one"): each device keeps the model after the number of epochs, from 1 to ``epochs``,
    with the lowest loss on its own validation data (ties: fewer epochs; a device without validation data
    keeps the last epoch). Without it, every device runs exactly ``epochs`` epochs."""

    def __init__(self, *, lam: float = 1.0, epochs: int = DITTO_FINETUNE_EPOCHS, select_epochs: bool = True):
        check_finetune(self.name, epochs, lam)
        super().__init__(epochs=epochs)
        self.lam = float(lam)
        self.needs_val = bool(select_epochs)

    def personal_grad(self, local, batch, ctx) -> torch.Tensor:
        return super().personal_grad(local, batch, ctx) + self.lam * (local["v"] - ctx.w_round)

    def finalize_step(self, local: dict, batch: Batch, ctx: StepContext) -> dict[str, torch.Tensor]:
        local = super().finalize_step(local, batch, ctx)
        return self._keep_best_epoch(local, batch, ctx) if self.needs_val else local

    def _keep_best_epoch(self, local: dict, batch: Batch, ctx: StepContext) -> dict[str, torch.Tensor]:
        """At each device's epoch ends, keep v if its validation loss beats the best epoch so far."""
        v = local["v"]
        steps = local.get("steps", torch.zeros_like(batch.active)) + batch.active
        epoch_end = (batch.active > 0) & (steps % ctx.epoch_steps == 0)
        best, best_loss = local.get("best", v), local.get("best_loss", torch.full_like(batch.active, torch.inf))
        if bool(epoch_end.any()):
            val_loss = ctx.backend.loss(v, ctx.val)
            no_val = ctx.val.mask.sum(1) == 0
            better = epoch_end & ((val_loss < best_loss) | no_val)
            best = torch.where(better[:, None], v, best)
            best_loss = torch.where(better, val_loss, best_loss)
        return {**local, "steps": steps, "best": best, "best_loss": best_loss}

    def finalize_result(self, local: dict, w: torch.Tensor, clients: dict, ids: torch.Tensor) -> dict:
        chosen = {**local, "v": local["best"]} if self.needs_val and "best" in local else local
        return super().finalize_result(chosen, w, clients, ids)


def per_sample_grads(ctx: StepContext, params: torch.Tensor, batch: Batch) -> torch.Tensor:
    """Gradients [n, B, d] of every sample's loss (each sample as its own one-sample batch)."""
    n, width = batch.y.shape[:2]
    single = Batch(batch.x.reshape(n * width, 1, *batch.x.shape[2:]), batch.y.reshape(n * width, 1),
                   batch.mask.reshape(n * width, 1), batch.active.repeat_interleave(width),
                   batch.index.reshape(n * width, 1))
    _, g = ctx.backend.grad(params.repeat_interleave(width, dim=0), single)
    return g.view(n, width, -1)


@method("ewc")
class EWC(FinetunePhase):
    """EWC finetuning (Kirkpatrick et al. 2017; Yu et al. 2020; Ditto Appendix C.2): every device minimises
    F_k(v) + (lam/2) sum_i F_ii (v[i] - w*[i])^2 from w*, F_ii the diagonal empirical Fisher at w*.
    ``paper``: the mean over the real samples of the device's first finetuning minibatch ("a data batch")
    of the squared per-sample gradients. ``reference`` (trainers_MTL/ewc.py): the mean over the device's
    first 4 minibatches of the squared minibatch-mean gradients (about B times smaller), those 4 batches
    spent before finetuning. ``lam`` weighs the Fisher-diagonal penalty; ``epochs`` as in ``finetuning``."""

    def __init__(self, *, lam: float = 1.0, epochs: int | None = None, mode: str = "paper"):
        check_lam(self.name, lam)
        super().__init__(epochs=epochs, mode=mode)
        self.lam = float(lam)
        self.extra_reference_steps = EWC_FISHER_BATCHES if self.mode == "reference" else 0

    def finalize_step(self, local: dict, batch: Batch, ctx: StepContext) -> dict[str, torch.Tensor]:
        seen = local.get("fisher_batches", 0)
        if self.mode == "paper" or seen >= EWC_FISHER_BATCHES:
            return super().finalize_step(local, batch, ctx)
        _, g = ctx.backend.grad(ctx.w_round.expand(len(local["v"]), -1), batch)  # minibatch means at w*
        total = local.get("fisher_sum", 0.0) + g**2 * batch.active[:, None]
        local = {**local, "fisher_sum": total, "fisher_batches": seen + 1}
        if seen + 1 == EWC_FISHER_BATCHES:
            local["fisher"] = total / EWC_FISHER_BATCHES
        return local

    def prepare(self, local: dict, batch: Batch, ctx: StepContext) -> dict:
        if "fisher" in local:
            return local
        g = per_sample_grads(ctx, ctx.w_round.expand(len(local["v"]), -1), batch)  # at w*
        count = batch.mask.sum(1).clamp_min(1)[:, None]
        return {**local, "fisher": (g**2 * batch.mask[..., None]).sum(1) / count}

    def personal_grad(self, local, batch, ctx) -> torch.Tensor:
        g = super().personal_grad(local, batch, ctx)
        return g + self.lam * local["fisher"] * (local["v"] - ctx.w_round)


def symmetric_kl(logits: torch.Tensor, ref_logits: torch.Tensor) -> torch.Tensor:
    """KL(p || p*) + KL(p* || p) per sample, p = softmax(logits), p* = softmax(ref_logits)."""
    log_p, log_ref = F.log_softmax(logits, -1), F.log_softmax(ref_logits, -1)
    return ((log_p.exp() - log_ref.exp()) * (log_p - log_ref)).sum(-1)


def keras_symmetric_kl(probs: torch.Tensor, ref_probs: torch.Tensor) -> torch.Tensor:
    """KLD(p, p*) + KLD(p*, p) per sample as tf.keras computes it: both clipped to [1e-7, 1] first."""
    p, q = probs.clamp(KERAS_EPSILON, 1.0), ref_probs.clamp(KERAS_EPSILON, 1.0)
    return ((p - q) * (p.log() - q.log())).sum(-1)


@method("skl")
class SKL(FinetunePhase):
    """Symmetrised-KL finetuning (Jiang et al. 2020; Ditto Appendix C.2) from w*, f the softmax prediction,
    SKL = KL(f(v) || f(w*)) + KL(f(w*) || f(v)). ``paper``: every device minimises F_k(v) + (lam/2) SKL, the
    KL averaged over the minibatch's real samples. ``reference`` (trainers_MTL/kl.py): the step's gradient is
    grad F_k(v) on the minibatch + lam grad of SKL summed over the device's whole training set (f(w*) computed
    there once; TF sums a per-sample loss's gradient), with Keras's clipping. Classification models only.
    ``lam`` weighs the KL to w*'s predictions; ``epochs`` as in ``finetuning``."""

    tasks = ("classification",)  # softmax predictions

    def __init__(self, *, lam: float = 1.0, epochs: int | None = None, mode: str = "paper"):
        check_lam(self.name, lam)
        super().__init__(epochs=epochs, mode=mode)
        self.lam = float(lam)
        self.needs_train = self.mode == "reference"

    def prepare(self, local: dict, batch: Batch, ctx: StepContext) -> dict:
        if self.mode == "paper" or "ref_probs" in local:
            return local
        w_star = ctx.w_round.expand(len(local["v"]), -1)
        return {**local, "ref_probs": ctx.backend.outputs(w_star, ctx.train).softmax(-1)}

    def personal_grad(self, local, batch, ctx) -> torch.Tensor:
        model = ctx.backend.model
        if model.task != "classification":
            raise ConfigError(f"skl needs a classification model (softmax predictions); task is {model.task!r}")
        if self.mode == "reference":
            return super().personal_grad(local, batch, ctx) + self.lam * self._train_kl_grad(local, ctx)
        w_star, key = ctx.w_round.detach(), ctx.backend.dropout_key()

        def loss(flat, x, y, mask, ids):
            out = model.forward(flat, x, ids, key)
            ref = model.forward(w_star, x).detach()
            kl = (symmetric_kl(out, ref) * mask).sum() / mask.sum().clamp_min(1)
            return model.loss(flat, x, y, mask, ids, key=key) + 0.5 * self.lam * kl

        _, g = ctx.backend.grad_of(loss, local["v"], batch, with_ids=True)
        return g

    def _train_kl_grad(self, local: dict, ctx: StepContext) -> torch.Tensor:
        """Gradient of the Keras-clipped SKL summed over each device's whole training set."""
        model, key = ctx.backend.model, ctx.backend.dropout_key()

        def kl_sum(flat, x, y, mask, ids, ref_probs):
            probs = model.forward(flat, x, ids, key).softmax(-1)  # (a batch-norm row comes unpadded: cut ref too)
            return (keras_symmetric_kl(probs, ref_probs[: len(probs)]) * mask).sum()

        _, g = ctx.backend.grad_of(kl_sum, local["v"], ctx.train, local["ref_probs"], with_ids=True)
        return g
