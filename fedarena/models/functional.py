"""A model as pure functions of a flat parameter vector.

All client models (global copies, personal models) are rows of ``[n, d]`` tensors. ``FlatModel``
turns a row into the module's named parameters (views, no copy) and evaluates the module functionally,
so the same loss serves one client (plain autograd) or many at once (``vmap``).
"""

from __future__ import annotations

import json
import math

import torch
import torch.nn.functional as F
from torch import nn

from fedarena.errors import ConfigError
from fedarena.models.dense import dense_plan
from fedarena.models.dropout import KeyedDropout
from fedarena.models.passes import counted
from fedarena.models.zoo import MODEL_SECTION, MODELS, LinearSVM

TASKS = ("classification", "binary_pm1", "regression", "multilabel")  # multilabel: y is a 0/1 vector per sample


class FlatModel:
    """Names, shapes and the loss of one architecture; parameters live outside, as flat vectors."""

    def __init__(self, module: nn.Module, task: str, architecture: tuple | None = None):
        if task not in TASKS:
            raise ConfigError(f"unknown task {task!r}; available: {', '.join(TASKS)}")
        self.module = module
        self.task = task
        # what the module was built from (model section, input shape, classes, task): equal keys, equal
        # architectures, so what is measured of one (evaluation's vmap costs) holds for the other; None: unknown
        self.architecture = architecture
        params = dict(module.named_parameters())
        self.names = list(params)
        self.shapes = [p.shape for p in params.values()]
        self.sizes = [math.prod(s) for s in self.shapes]
        self.dim = sum(self.sizes)
        self.l2 = getattr(module, "l2", 0.0) if isinstance(module, LinearSVM) else 0.0
        # batch statistics depend on which samples share a forward pass: no padding may enter them
        self.has_batch_norm = any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in module.modules())
        self._slots = [_owner(module, name) for name in self.names]
        # seeded dropout (models.dropout): active in a call given a key; also at evaluation if eval_dropout
        self._dropouts = [m for m in module.modules() if isinstance(m, KeyedDropout) and m.rate > 0]
        self.has_dropout = bool(self._dropouts)
        self.eval_dropout = self.has_dropout and bool(getattr(module, "eval_dropout", False))
        self.dense = None if self.l2 else dense_plan(module, task)  # a plain MLP: explicitly batched steps

    def flatten(self) -> torch.Tensor:
        """The module's current parameters as one flat vector (a copy)."""
        return torch.cat([p.detach().reshape(-1) for p in self.module.parameters()])

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        chunks = torch.split(flat, self.sizes)
        return {n: c.view(s) for n, c, s in zip(self.names, chunks, self.shapes, strict=True)}

    def forward(self, flat: torch.Tensor, x: torch.Tensor, ids: torch.Tensor | None = None,
                key: int | None = None) -> torch.Tensor:
        """The module applied with ``flat`` as its parameters (works under vmap and autograd).

        With a ``key`` (an int), dropout layers drop with masks keyed by ``key`` and the samples' pooled
        indices ``ids`` [B] (``models.dropout``); without one they are the identity.

        Same as ``torch.func.functional_call`` for a module without tied parameters, whose per-call
        bookkeeping (re-deriving ties) cost 10-15% of a small model's training step."""
        chunks = torch.split(flat, self.sizes)
        saved = []
        keyed = key is not None and self.has_dropout
        try:
            for (owner, attr), chunk, shape in zip(self._slots, chunks, self.shapes, strict=True):
                saved.append((owner, attr, owner._parameters[attr]))
                owner._parameters[attr] = chunk.view(shape)
            if keyed:
                if ids is None:
                    raise ValueError("a dropout key needs the samples' pooled ids")
                for layer in self._dropouts:
                    layer.key, layer.ids = int(key), ids
            return counted(self.module(x))  # an attacker's passes are counted (``models.passes``)
        finally:
            for owner, attr, original in saved:
                owner._parameters[attr] = original
            if keyed:
                for layer in self._dropouts:
                    layer.key, layer.ids = None, None

    def per_sample_loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.task == "classification":
            return F.cross_entropy(out, y, reduction="none")
        if self.task == "binary_pm1":
            return torch.clamp_min(1 - y * out, 0)
        if self.task == "multilabel":  # one sigmoid per label, binary cross-entropy averaged over the labels
            return F.binary_cross_entropy_with_logits(out, y, reduction="none").mean(-1)
        return 0.5 * (out - y) ** 2

    def loss(self, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor,
             ids: torch.Tensor | None = None, *, key: int | None = None) -> torch.Tensor:
        """Masked mean loss over a (padded) minibatch, plus the SVM's l2 term (dropout as in ``forward``)."""
        per_sample = self.per_sample_loss(self.forward(flat, x, ids, key), y)
        value = (per_sample * mask).sum() / mask.sum().clamp_min(1)
        if self.l2:
            value = value + self.l2 * (flat[: self.sizes[0]] ** 2).sum()
        return value

    def predict(self, out: torch.Tensor) -> torch.Tensor:
        """Predicted labels in the dataset's label space (argmax, or the sign for the SVM; multilabel: the
        top-scoring label)."""
        if self.task in ("classification", "multilabel"):
            return out.argmax(-1)
        if self.task == "binary_pm1":
            return torch.where(out >= 0, 1.0, -1.0).to(out.dtype)
        return out

    def correct(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Per sample, whether the prediction is right; multilabel: the top-scoring label is one of the
        sample's labels (precision at 1)."""
        if self.task == "multilabel":
            return y.gather(-1, out.argmax(-1, keepdim=True)).squeeze(-1) > 0
        return self.predict(out) == y

    def class_index(self, y: torch.Tensor) -> torch.Tensor:
        """Labels as class indices for per-class counts (-1/+1 -> 0/1; regression -> 0; multilabel: the
        sample's first label, i.e. its most frequent one when labels are ordered by frequency)."""
        if self.task == "classification":
            return y.long()
        if self.task == "multilabel":
            return y.argmax(-1)
        if self.task == "binary_pm1":
            return (y > 0).long()
        return torch.zeros_like(y, dtype=torch.long)


def _owner(module: nn.Module, dotted: str) -> tuple[nn.Module, str]:
    """The submodule holding parameter ``dotted`` and its attribute name there."""
    *path, attr = dotted.split(".")
    for part in path:
        module = getattr(module, part)
    return module, attr


def build_model(name: str, options: dict, input_shape: tuple[int, ...], num_classes: int, task: str,
                seed: int, device: torch.device) -> tuple[FlatModel, torch.Tensor]:
    """Build the architecture of options as written (resolved here) and its initial flat parameters
    (initialised from ``seed`` only); trial set-up takes ``model_from``."""
    resolved = MODEL_SECTION.resolve({"name": name, **options})
    return model_from(resolved, input_shape, num_classes, task, seed, device)


def model_from(resolved: dict, input_shape: tuple[int, ...], num_classes: int, task: str, seed: int,
               device: torch.device) -> tuple[FlatModel, torch.Tensor]:
    """``build_model`` for a resolved model section (``sections.resolve_config``)."""
    builder = MODELS.get(resolved["name"])
    kwargs = {k: v for k, v in resolved.items() if k != "name"}
    with torch.random.fork_rng(devices=[]):  # the init stream must not touch (or depend on) global RNG
        torch.manual_seed(seed)
        module = builder(tuple(input_shape), num_classes, **kwargs)
    module = module.to(device)
    architecture = (json.dumps(resolved, sort_keys=True, default=str), tuple(input_shape), num_classes, task)
    model = FlatModel(module, task, architecture)
    return model, model.flatten()
