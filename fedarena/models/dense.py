"""Explicitly batched training step for plain multilayer perceptrons (Linear / ReLU stacks).

``vmap(grad_and_value(loss))`` pays functorch's per-operator wrapping on every call, which for small dense
models costs about twice the arithmetic. For a ``Sequential`` of ``Flatten``, ``Linear`` and ``ReLU`` with a
cross-entropy loss, the same per-client forward and backward pass is written here as batched matrix
products over the client axis. ``dense_grad`` runs the operators in the order vmap's batching rules run them
(``bmm`` then the bias added; log-softmax's and the ReLU's own backward kernels), so on one machine its values
and gradients are the vmapped ones bit for bit. ``dense_descend_``, the plain SGD step FedAvg-like local
training takes, is fused (fewer operators and passes over the weights, engine version 2; its softmax written out on
a CPU, version 3): equal to the gradient step up to float32 rounding. ``tests/test_models_dense.py`` checks both.
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
        """Whether minibatches x [n, B, ...] are what this step computes on (``fits_samples``)."""
        return self.fits_samples(tuple(x.shape[2:]))

    def fits_samples(self, sample_shape: tuple[int, ...]) -> bool:
        """Whether samples of this shape are what this step computes on (without a Flatten, Linear acts on the
        last dimension alone, which only a sample of [features] matches)."""
        return self.flattens or len(sample_shape) == 1


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
    unfused gradient step within float32 rounding (engine version 2, its softmax 3; ``tests/test_models_dense.py``)."""
    weights, biases = _layers(plan, params)
    _sgd_step(weights, biases, x, _targets(y, _step_factor(scale, mask)), in_place=True)


def dense_local_sgd(plan: DensePlan, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor,
                    scale: torch.Tensor) -> torch.Tensor:
    """The updates [n, d] of n clients that each take the S steps of ``dense_descend_`` from the global model w [d]
    on minibatches x [S, n, B, ...] (y, mask [S, n, B], step sizes ``scale`` [S, n]), then send their model minus w.

    The same operations in the same order as cloning w for every client, descending in place and subtracting w, so
    the same numbers (``tests/test_models_dense.py`` holds them equal bit for bit): only where each layer lives
    differs. The first step reads w itself and writes each layer's new weights for all clients into one
    contiguous tensor, so no copy of w per client is made and the later in-place products run as one batched
    product per layer (a per-client view of a flat [n, d] tensor takes the per-client loop of a CPU's
    ``baddbmm_``). The last step writes each layer minus the global one into the updates as soon as the layer is
    updated, while it is still in cache: one pass per layer, no concatenation."""
    steps, n = x.shape[:2]
    if steps == 0:
        return w.new_zeros(n, w.numel())
    globals_w, globals_b = _layers(plan, w)
    weights, biases = globals_w, globals_b  # shared by every client until step 0
    targets = _targets(y, _step_factor(scale, mask))  # every step's at once
    updates = w.new_empty(n, w.numel())
    into_w, into_b = _layers(plan, updates)
    last = steps - 1
    for s, (x_s, *target) in enumerate(zip(x.unbind(0), *(t.unbind(0) for t in targets), strict=True)):
        send = (globals_w, globals_b, into_w, into_b) if s == last else None
        weights, biases = _sgd_step(weights, biases, x_s, target, in_place=s > 0, send=send)
    return updates


THRESHOLD_BACKWARD = torch.ops.aten.threshold_backward.default  # the overload itself: no lookup per call
SMALL_PRODUCT = 400  # ATen's CPU batched product multiplies below this many multiply-adds per matrix in a loop of its own


def _layer_product(a: torch.Tensor, w: torch.Tensor, *, shared: bool, transpose: bool = False,
                   bias: torch.Tensor | None = None) -> torch.Tensor:
    """a [n, B, k] times each client's layer (``w`` [n, out, in], or the global one [out, in] where ``shared``),
    transposed where ``transpose``, plus ``bias`` [n, out] (or [out]) where given. A shared layer's per-client
    products (B x out x in each) run as one product over every client's rows where that gives the same numbers:
    where the batched product calls the BLAS matrix product as well (ATen runs products below ``SMALL_PRODUCT``
    in its own loop, whose sums may round otherwise)."""
    n, batch = a.shape[:2]
    if shared and not w.is_cuda and w.shape[0] * w.shape[1] * batch >= SMALL_PRODUCT:
        rows, m = a.reshape(n * batch, -1), (w.t() if transpose else w)
        return (torch.mm(rows, m) if bias is None else torch.addmm(bias, rows, m)).view(n, batch, -1)
    if shared:
        w, bias = w.expand(n, -1, -1), None if bias is None else bias.expand(n, -1)
    m = w.transpose(1, 2) if transpose else w
    return torch.bmm(a, m) if bias is None else torch.baddbmm(bias.unsqueeze(1), a, m)


def _step_factor(scale: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[..., n, B] each sample's factor in its client's step: the step size x its weight in the client's mean."""
    return (scale / mask.sum(-1).clamp_min(1)).unsqueeze(-1) * mask


def _targets(y: torch.Tensor, factor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The labels y [..., B] and the samples' factors [..., B] as the softmax step reads them, for every step at
    once: the labels and factors [..., B, 1], and the factors negated."""
    factor = factor.unsqueeze(-1)
    return y.unsqueeze(-1), factor, factor.neg()


def _scaled_softmax_minus_one_hot_(z: torch.Tensor, y: torch.Tensor, factor: torch.Tensor,
                                   neg_factor: torch.Tensor) -> torch.Tensor:
    """The cross-entropy's gradient at the logits z [n, B, C], softmax(z) - one-hot(y), times each sample's
    ``factor``, in place of z (labels y, ``factor`` and ``neg_factor`` its negation, each [n, B, 1]: ``_targets``).
    On a CPU the softmax is written out (exp(z - max) / sum, the sum's reciprocal folded into the factor: engine
    version 3): ATen's softmax kernel alone takes 20 us on [10, 16, 10], rows of a few classes, and with the one-hot
    and the factor 26 us, where these eight small kernels take 12. On a GPU, ATen's softmax (fewer kernel launches)."""
    if z.is_cuda:
        dz = torch.softmax(z, -1)
        dz.scatter_add_(-1, y, dz.new_full((*z.shape[:2], 1), -1.0))
        return dz.mul_(factor)
    z.sub_(z.amax(-1, keepdim=True)).exp_()
    z.mul_(factor / z.sum(-1, keepdim=True))
    return z.scatter_add_(-1, y, neg_factor)


def _sgd_step(weights: list[torch.Tensor], biases: list[torch.Tensor], x: torch.Tensor, target: tuple,
              in_place: bool, send: tuple | None = None) -> tuple[list, list]:
    """One fused SGD step (``dense_descend_``) of layers ``weights`` [n, out, in] and ``biases`` [n, out] toward the
    step's ``target`` (labels and samples' factors, ``_targets`` of ``_step_factor``), in place; or (``in_place``
    false) from the global model's layers [out, in] and [out], shared by every client, into new tensors [n, out, in]
    and [n, out]. Returns the layers.
    ``send`` (the global layers, then the updates' views of each layer): each new layer minus the global one is
    written there once the layer is updated.
    Shared layers take one matrix product over all the clients' samples where each client's would be its own: the
    same numbers (each output row is the same dot products), in larger, faster products."""
    n, batch = x.shape[:2]
    start_w, start_b, into_w, into_b = send if send is not None else (None,) * 4
    h = x if x.dim() == 3 else x.reshape(n, batch, -1)
    inputs = [h]
    last = len(weights) - 1
    for i, (w, b) in enumerate(zip(weights, biases, strict=True)):
        z = _layer_product(h, w, shared=not in_place, transpose=True, bias=b)
        if i < last:
            h = z.relu_()  # z is not read again
            inputs.append(h)
    dz = _scaled_softmax_minus_one_hot_(z, *target)
    weights, biases = list(weights), list(biases)
    for i in range(last, -1, -1):
        w, b = weights[i], biases[i]
        below = _layer_product(dz, w, shared=not in_place) if i > 0 else None  # with the weights before this step
        if not in_place:  # the global model's layers: each client's new ones into fresh tensors (the same arithmetic)
            shared = w.expand(n, -1, -1)
            weights[i] = torch.baddbmm(shared, dz.transpose(1, 2), inputs[i], alpha=-1.0) if not w.is_cuda else \
                shared - torch.bmm(dz.transpose(1, 2), inputs[i])
            biases[i] = b - dz.sum(1)
        elif w.is_cuda:  # one batched product, then the update (the in-place product's CPU path loops per client)
            w.sub_(torch.bmm(dz.transpose(1, 2), inputs[i]))
            b.sub_(dz.sum(1))
        else:  # on a CPU the in-place products beat a product and a pass over the weights
            w.baddbmm_(dz.transpose(1, 2), inputs[i], alpha=-1.0)
            b.sub_(dz.sum(1))
        if send is not None:
            torch.sub(weights[i], start_w[i], out=into_w[i])
            torch.sub(biases[i], start_b[i], out=into_b[i])
        if i > 0:
            dz = THRESHOLD_BACKWARD(below, inputs[i], 0)
    return weights, biases


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
    """Views of the layers of flat models ``params`` [..., d]: weights [..., out, in] and biases [..., out] (one
    model [d], or one per client [n, d])."""
    chunks = params.split_with_sizes(plan.chunk_sizes, -1)  # the method itself: torch.split's wrapper costs us
    lead = params.shape[:-1]
    weights = [c.view(*lead, out, inp) for c, (out, inp) in zip(chunks[0::2], plan.shapes, strict=True)]
    return weights, list(chunks[1::2])
