"""Execution backends: how losses and gradients of many clients' parameters are computed.

Both take stacked parameters ``[n, d]`` and a minibatch ``[n, B, ...]`` and return per-client values.
``sequential`` runs plain autograd client by client; ``batched`` runs all clients in one call with
``torch.func.vmap``. They compute the same math, so they give the same numbers (up to float rounding).

A backend with a ``noise_key`` (``keyed``, one per training step) applies the model's seeded dropout:
always in ``grad`` (training), and in ``loss`` / ``outputs`` only for a model that also drops at evaluation
(``eval_dropout``, the Ditto reference's FEMNIST CNN). Masks follow the samples' pooled indices
(``batch.index``), so both backends draw the same ones.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache, partial

import torch
from torch import nn
from torch.func import grad_and_value, vmap

from fedarena.models.batch import Batch
from fedarena.models.dense import dense_descend_, dense_grad, dense_local_sgd
from fedarena.models.functional import FlatModel
from fedarena.models.zoo import MODELS

EVAL_SALT = 0x5BD1E995  # decorrelates a step's evaluation masks from its training masks


@dataclass(frozen=True)
class Backend:
    model: FlatModel
    batched: bool
    noise_key: int | None = None  # this training step's dropout key (None: no dropout)

    def keyed(self, key: int | None) -> Backend:
        """The same backend with this step's dropout key."""
        return replace(self, noise_key=key)

    def dropout_key(self, evaluating: bool = False) -> int | None:
        """The key a training (or, ``evaluating``, a loss / output) computation drops with; None: none."""
        if self.noise_key is None or not self.model.has_dropout:
            return None
        if evaluating:
            return self.noise_key ^ EVAL_SALT if self.model.eval_dropout else None
        return self.noise_key

    def grad(self, params: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-client masked mean loss [n] and its gradient [n, d] (with the step's dropout, if keyed)."""
        if self._takes_dense_step(batch):
            return dense_grad(self.model.dense, params, batch.x, batch.y, batch.mask)
        key = self.dropout_key()
        if key is None:
            return self.grad_of(self.model.loss, params, batch)
        return self.grad_of(partial(self.model.loss, key=key), params, batch, with_ids=True)

    def descend_(self, params: torch.Tensor, batch: Batch, scale: torch.Tensor) -> None:
        """One SGD step in place, ``params -= scale[:, None] * gradient`` (``scale`` [n]: each client's step
        size). The same numbers as ``grad`` then ``addcmul_``, without the [n, d] gradient where the dense
        step computes it layer by layer, and without the loss value it does not need."""
        if self._takes_dense_step(batch):
            dense_descend_(self.model.dense, params, batch.x, batch.y, batch.mask, scale)
            return
        params.addcmul_(scale[:, None], self.grad(params, batch)[1], value=-1.0)

    def fuses_local_sgd(self, sample_shape: tuple[int, ...], device: torch.device) -> bool:
        """Whether ``local_sgd`` runs for samples of this shape: the batched dense step on a CPU (on CUDA the
        per-step path stays, whose update is one batched product and a subtraction)."""
        return device.type == "cpu" and self._takes_dense_steps(sample_shape)

    def local_sgd(self, w: torch.Tensor, batches: Batch, lr: float) -> torch.Tensor:
        """The updates [n, d] of plain local SGD from the global model w over a round's minibatches (each field
        with a leading step axis), step size ``lr`` x the step's activity (where ``fuses_local_sgd``):
        ``dense_local_sgd``, the numbers of ``descend_`` step after step without a copy of w per client."""
        return dense_local_sgd(self.model.dense, w, batches.x, batches.y, batches.mask, lr * batches.active)

    def _takes_dense_step(self, batch: Batch) -> bool:
        """Whether this step trains through ``models.dense`` (a batched plain MLP without dropout)."""
        return self._takes_dense_steps(tuple(batch.x.shape[2:]))

    def _takes_dense_steps(self, sample_shape: tuple[int, ...]) -> bool:
        """Whether steps on samples of this shape train through ``models.dense``."""
        return self.dropout_key() is None and self.batched and self.model.dense is not None and \
            self.model.dense.fits_samples(sample_shape)

    def grad_of(self, loss_fn: Callable[..., torch.Tensor], params: torch.Tensor, batch: Batch,
                *extra: torch.Tensor, with_ids: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-client value [n] and gradient [n, d] of a method's own objective
        ``loss_fn(flat, x, y, mask, *extra_row)`` (e.g. a tilted loss); ``extra`` are per-client tensors
        [n, ...] passed row by row. Tensors that ``loss_fn`` captures are shared by every client.
        ``with_ids``: the row's sample ids (``batch.index``) come after ``x, y, mask`` (for dropout)."""
        if self.batched:
            ids = (batch.index,) if with_ids else ()
            grads, values = vmap(grad_and_value(loss_fn), randomness="different")(
                params, batch.x, batch.y, batch.mask, *ids, *extra)
            return values, grads
        values, grads = [], []
        for i in range(params.shape[0]):
            p = params[i].detach().requires_grad_(True)
            value = loss_fn(p, *self._row(batch, i, with_ids), *(e[i] for e in extra))
            (g,) = torch.autograd.grad(value, p)
            values.append(value.detach())
            grads.append(g)
        if len(grads) == 1:  # the sequential backend's usual group of one: no [1, d] copy
            return values[0].unsqueeze(0), grads[0].unsqueeze(0)
        return torch.stack(values), torch.stack(grads)

    @torch.no_grad()
    def loss(self, params: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Per-client masked mean loss [n] (no gradient; dropout only for an ``eval_dropout`` model)."""
        key = self.dropout_key(evaluating=True)
        fn = partial(self.model.loss, key=key)
        if self.batched:
            return vmap(fn, randomness="different")(params, batch.x, batch.y, batch.mask, batch.index)
        return torch.stack([fn(params[i], *self._row(batch, i, True)) for i in range(params.shape[0])])

    @torch.no_grad()
    def outputs(self, params: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Per-client model outputs [n, B, ...] on the batch (no gradient; dropout as in ``loss``). A
        batch-norm model's padded slots are left at zero."""
        key = self.dropout_key(evaluating=True)
        fn = partial(self.model.forward, key=key)
        if self.batched:
            return vmap(fn, randomness="different")(params, batch.x, batch.index)
        rows = []
        for i in range(params.shape[0]):
            x, _, _, ids = self._row(batch, i, True)
            out = fn(params[i], x, ids)
            pad = batch.x.shape[1] - out.shape[0]
            rows.append(torch.cat([out, out.new_zeros(pad, *out.shape[1:])]) if pad else out)
        return torch.stack(rows)

    def _row(self, batch: Batch, i: int, with_ids: bool = False) -> tuple[torch.Tensor, ...]:
        """Client i's minibatch (x, y, mask[, ids]); for batch-norm models without the padded tail (real
        samples come first), so that padding never enters the batch statistics."""
        row = (batch.x[i], batch.y[i], batch.mask[i]) + ((batch.index[i],) if with_ids else ())
        if not self.model.has_batch_norm:
            return row
        real = max(int(batch.mask[i].sum()), 1)
        return tuple(t[:real] for t in row)

    @property
    def name(self) -> str:
        return "batched" if self.batched else "sequential"

    def groups(self, ids):
        """Clients trained together: all at once (batched) or one by one (sequential)."""
        return [ids] if self.batched else [ids[i : i + 1] for i in range(len(ids))]


def auto_backend(model: FlatModel, device: torch.device) -> str:
    """The faster backend for ``model`` on ``device`` (``backend: auto``), by a cost model that ``make perf``
    checks against measurements of both at paper-scale shapes (``backend_for``)."""
    return backend_for(*layer_kinds(model.module), device.type)


def backend_for(batch_norm: bool, convolutions: bool, device_type: str) -> str:
    """``auto_backend``'s pick for a model with (or without) batch norm and convolutions on a device of this type:

    - batch norm: sequential (the batched backend's padding would enter the batch statistics);
    - CUDA: batched (one kernel launch for all clients instead of one per client);
    - CPU, convolutions: sequential (vmap runs them as one grouped convolution, 1.4-2.5x slower on a CPU
      than a per-client loop at Fashion-MNIST scale);
    - CPU, otherwise: batched (plain MLPs take the explicit batched step of ``models.dense``; small linear
      models are dominated by per-client overhead, which batching removes).
    """
    if batch_norm:
        return "sequential"
    if device_type == "cuda":
        return "batched"
    return "sequential" if convolutions else "batched"


def layer_kinds(module: nn.Module) -> tuple[bool, bool]:
    """(has batch norm, has convolutions): what ``backend_for`` reads of a model."""
    kinds = [type(m) for m in module.modules()]
    return (any(issubclass(k, nn.modules.batchnorm._BatchNorm) for k in kinds),
            any(issubclass(k, nn.modules.conv._ConvNd) for k in kinds))


# Input shapes and class counts a model section is built at to read its layers without the data: an image, a
# binary and a flat input (a model builds at the ones it accepts; its layers count only where all agree).
PROBE_SHAPES = (((1, 28, 28), 10), ((3, 32, 32), 2), ((20,), 10), ((20,), 2))
DEVICE_TYPES = ("cpu", "cuda")  # what device ``auto`` resolves to (``simulation.setup.resolve_device``)


def planned_backend(model: dict, device: str) -> str | None:
    """``auto_backend``'s pick for a resolved model section on a config's device, without data or machine (the
    trial's identity, ``simulation.identity``): its layers from ``model_layer_kinds``; device ``auto`` where
    the pick is the same on a CPU and on CUDA. None where the pick cannot be known so (the model builds at no
    probe shape, or its layers depend on the input; device ``auto`` with a convolutional model; a device
    name torch does not read)."""
    kinds = model_layer_kinds(MODELS.get(model["name"]), json.dumps(model, sort_keys=True, default=str))
    if kinds is None:
        return None
    if device == "auto":
        picks = {backend_for(*kinds, device_type) for device_type in DEVICE_TYPES}
        return picks.pop() if len(picks) == 1 else None
    try:
        device_type = torch.device(device).type
    except (RuntimeError, ValueError):
        return None
    return backend_for(*kinds, device_type)


@lru_cache(maxsize=512)
def model_layer_kinds(builder: Callable[..., nn.Module], section: str) -> tuple[bool, bool] | None:
    """``layer_kinds`` of a resolved model section (canonical JSON) that ``builder`` builds: built on the meta
    device (no memory, no global random state touched) at each of ``PROBE_SHAPES`` it accepts; None where it
    accepts none or the layers differ between them. Cached: a grid of many trials builds each section once."""
    data = {k: v for k, v in json.loads(section).items() if k != "name"}
    found = set()
    for shape, classes in PROBE_SHAPES:
        try:
            with torch.random.fork_rng(devices=[]), torch.device("meta"):
                found.add(layer_kinds(builder(shape, classes, **data)))
        except Exception:  # noqa: BLE001 (a plugin's model may refuse a shape any way it likes, e.g. by an assert)
            continue  # a shape the model refuses, or an operation the meta device lacks: not a layer kind
    return found.pop() if len(found) == 1 else None


def make_backend(choice: str, model: FlatModel, device: torch.device) -> Backend:
    """The backend a config's ``backend`` names (``auto``: ``auto_backend``'s pick)."""
    name = auto_backend(model, device) if choice == "auto" else choice
    return Backend(model, name == "batched")
