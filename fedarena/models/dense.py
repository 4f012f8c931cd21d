"""Explicitly batched training step for plain multilayer perceptrons (Linear / ReLU stacks).

``vmap(grad_and_value(loss))`` pays functorch's per-operator wrapping on every call, which for small dense
models costs about twice the arithmetic. For a ``Sequential`` of ``Flatten``, ``Linear`` and ``ReLU`` with a
cross-entropy loss, the same per-client forward and backward pass is written here as batched matrix
products over the client axis. ``dense_grad`` runs the operators in the order vmap's batching rules run them
(``bmm`` then the bias added; log-softmax's and the ReLU's own backward kernels), so on one machine its values
and gradients are the vmapped ones bit for bit. ``dense_descend_``, the plain SGD step FedAvg-like local
training takes, is fused (fewer operators and passes over the weights, engine version 2): equal to the gradient
step up to float32 rounding. ``tests/test_models_dense.py`` checks both.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class DensePlan:
    """The layer shapes of a plain MLP: ``shapes[i] = (out, in)`` of linear layer i (ReLU between them)."""

    shapes: tuple[tuple[int, int], ...]
    flattens: bool  # a leading Flatten: a sample's features are all its dimensions (else its last one)

    @property
    def chunk_sizes(self) -> list[int]:
        """The lengths of the flat parameters' chunks: each layer's weight, then its bias."""
        return [size for out, inp in self.shapes for size in (out * inp, out)]

    def fits(self, x: torch.Tensor) -> bool:
        """Whether minibatches x [n, B, ...] are what this step computes on (without a Flatten, Linear acts
        on the last dimension alone, which only [n, B, features] matches)."""
        return self.flattens or x.dim() == 3


def dense_plan(module: nn.Module, task: str) -> DensePlan | None:
    """The plan for a ``Sequential`` of [Flatten], Linear, (ReLU, Linear)* classifying with cross-entropy;
    None for any other model (it then trains through vmap)."""
    if task != "classification" or not isinstance(module, nn.Sequential):
        return None
    layers = list(module)
    flattens = bool(layers) and type(layers[0]) is nn.Flatten and (layers[0].start_dim, layers[0].end_dim) == (1, -1)
    layers = layers[1:] if flattens else layers
    linear, relu = layers[0::2], layers[1::2]
    if not linear or not all(type(m) is nn.Linear and m.bias is not None for m in linear):
        return None
    if len(relu) != len(linear) - 1 or not all(type(m) is nn.ReLU for m in relu):
        return None
    return DensePlan(tuple((m.out_features, m.in_features) for m in linear), flattens)


def dense_grad(plan: DensePlan, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
               mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-client masked mean cross-entropy [n] and its gradient [n, d] for parameters ``params`` [n, d]
    (each layer's weight then bias, as ``FlatModel`` flattens them) on minibatches x [n, B, ...]."""
    value, grads = dense_layer_grads(plan, params, x, y, mask)
    return value, torch.cat(grads, 1)


def dense_descend_(plan: DensePlan, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor,
                   scale: torch.Tensor) -> None:
    """One SGD step in place, ``params -= scale[:, None] * gradient`` of the masked mean cross-entropy, fused:
    the bias enters each forward product (``baddbmm``); the loss's gradient at the logits is softmax - one-hot,
    scaled at once by each sample's weight in its client's mean and the client's step size, so that every
    product below it yields the step itself; each layer's weights are updated in place once the product that
    needs them is done. No gradient is assembled and no loss value computed. Equal to the
    unfused gradient step within float32 rounding (engine version 2; ``tests/test_models_dense.py``)."""
    n, batch = x.shape[:2]
    weights, biases = _layers(plan, params)
    h = x.reshape(n, batch, -1)
    inputs = [h]
    last = len(weights) - 1
    for i, (w, b) in enumerate(zip(weights, biases, strict=True)):
        z = torch.baddbmm(b.unsqueeze(1), h, w.transpose(1, 2))
        if i < last:
            h = torch.relu(z)
            inputs.append(h)
    factor = (scale / mask.sum(1).clamp_min(1)).unsqueeze(1) * mask  # [n, B]: step size x weight in the mean
    dz = torch.softmax(z, -1)
    dz.scatter_add_(-1, y.unsqueeze(-1), dz.new_full((n, batch, 1), -1.0))  # softmax - one-hot
    dz.mul_(factor.unsqueeze(-1))
    for i in range(last, -1, -1):
        w, b = weights[i], biases[i]
        below = torch.bmm(dz, w) if i > 0 else None  # with the weights before this step
        if w.is_cuda:  # one batched product, then the update (the in-place product's CPU path loops per client)
            w.sub_(torch.bmm(dz.transpose(1, 2), inputs[i]))
        else:  # on a CPU the per-client in-place products beat a product and a pass over the weights
            w.baddbmm_(dz.transpose(1, 2), inputs[i], alpha=-1.0)
        b.sub_(dz.sum(1))
        if i > 0:
            dz = torch.ops.aten.threshold_backward(below, inputs[i], 0)


def dense_layer_grads(plan: DensePlan, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor,
                      with_value: bool = True) -> tuple[torch.Tensor | None, list[torch.Tensor]]:
    """Per-client masked mean cross-entropy [n] (None unless ``with_value``) and the gradient of each of
    ``params``' chunks (each layer's weight then bias, as ``FlatModel`` flattens them), each [n, size], on
    minibatches x [n, B, ...]."""
    n, batch = x.shape[:2]
    weights, biases = _layers(plan, params)
    inputs, pre = [x.reshape(n, batch, -1)], []
    for i, (w, b) in enumerate(zip(weights, biases, strict=True)):
        z = torch.bmm(inputs[-1], w.transpose(1, 2)) + b.unsqueeze(1)
        pre.append(z)
        if i < len(weights) - 1:
            inputs.append(torch.relu(z))
    log_probs = torch.log_softmax(pre[-1], -1)
    count = mask.sum(1).clamp_min(1)
    value = None
    if with_value:  # a plain SGD step (``dense_descend_``) does not read it
        nll = -log_probs.gather(-1, y.unsqueeze(-1)).squeeze(-1)
        value = (nll * mask).sum(1) / count
    d_nll = (1 / count)[:, None] * mask  # the mean's backward, as autograd forms it
    d_log_probs = torch.zeros_like(log_probs).scatter_(-1, y.unsqueeze(-1), -1.0) * d_nll.unsqueeze(-1)
    dz = torch._log_softmax_backward_data(d_log_probs, log_probs, -1, log_probs.dtype)
    grads = []  # bias, weight of the last layer first; plain products (an out= view would sum differently)
    for i in range(len(weights) - 1, -1, -1):
        grads += [dz.sum(1), torch.bmm(dz.transpose(1, 2), inputs[i])]
        if i > 0:
            dz = torch.ops.aten.threshold_backward(torch.bmm(dz, weights[i]), inputs[i], 0)
    return value, [g.reshape(n, -1) for g in reversed(grads)]


def _layers(plan: DensePlan, params: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    chunks = torch.split(params, plan.chunk_sizes, dim=1)
    weights = [c.view(-1, out, inp) for c, (out, inp) in zip(chunks[0::2], plan.shapes, strict=True)]
    return weights, list(chunks[1::2])
