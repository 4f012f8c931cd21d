"""Evaluate every client in a few large batched calls, into per-client, per-class counts.

One shared model: a chunked forward pass over the pooled test set. One model per client (personal
models): on a GPU, ``vmap`` over chunks of clients of similar test size (padded), each chunk's working set
(gathered parameter rows and activations) bounded by ``EVAL_BYTES``; on a CPU, one unpadded forward pass
per client, which is faster there.
"""

from __future__ import annotations

import weakref
from typing import NamedTuple

import numpy as np
import torch
from torch.func import vmap

from fedarena.models.functional import FlatModel
from fedarena.simulation.data import Pooled, take_rows
from fedarena.simulation.metrics import Counts
from fedarena.simulation.tensor_memory import TensorMemory

EVAL_CHUNK = 4096  # samples per forward pass for one shared model, at most
# ... and at most this many traced bytes per pass (vmap_costs' per-sample bound): a shared model trains on a
# few small batches, so 4096 Fashion-MNIST CNN samples (~1 GB) peaked at 1.4x training (0.9 GB, CPU meter).
SHARED_EVAL_BYTES = 2**28
# Bound on one vmap call's working set (personal models): the gathered parameter rows plus what the call
# allocates per client and per padded sample (measured: vmap_costs). Paper-scale Ditto on Fashion-MNIST keeps a
# 6.5 GB table of personal models and peaks at 8.3 GB in training (H100; 1.8 GB beyond the table); with 1 GiB,
# evaluation peaks near table + pooled data + 1 GiB (7.9 GB measured on a CPU), below training, while one call
# still holds ~80 of the CNN's 13 MB rows or ~1,400 of its padded samples, enough to keep a GPU busy.
EVAL_BYTES = 2**30
INDEX_BYTES = 9  # per padded sample, made before the traced part of a vmap call: padded_index's int64 and bool
# {input/param layout: vmap_costs} per architecture (FlatModel.architecture: shared by a worker's trials of one
# model), or per model object where its architecture is unknown
_COSTS: dict[tuple, dict] = {}
_MODEL_COSTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _accumulate(model: FlatModel, out: torch.Tensor, y: torch.Tensor, owner: torch.Tensor, weight: torch.Tensor,
                num_clients: int, num_classes: int, sums: list[torch.Tensor]) -> None:
    cls = model.class_index(y)
    correct = model.correct(out, y).to(torch.float64) * weight
    loss = model.per_sample_loss(out, y).to(torch.float64) * weight
    flat = owner * num_classes + cls
    sums[0].index_add_(0, flat, correct)
    sums[1].index_add_(0, flat, weight)
    sums[2].index_add_(0, owner, loss)


@torch.no_grad()
def evaluate(model: FlatModel, params: torch.Tensor, pooled: Pooled, num_classes: int, *,
             per_client_loop: bool | None = None, key: int | None = None, budget_bytes: int = EVAL_BYTES) -> Counts:
    """Counts of every client on ``pooled`` (a test or validation split).

    ``params`` is [d] (everyone uses the same model) or [num_clients, d] (client k uses row k).
    ``per_client_loop``: personal models one client at a time (None: on a CPU and for batch-norm models).
    ``key``: seeded dropout at evaluation (``models.dropout``; masks follow the pooled sample indices, so
    every path below draws the same ones); None: none. ``budget_bytes``: bound on one vmap call's working set.
    """
    num_clients, classes = len(pooled.sizes), max(num_classes, 1)
    dev = pooled.x.device
    sums = [torch.zeros(num_clients * classes, dtype=torch.float64, device=dev),
            torch.zeros(num_clients * classes, dtype=torch.float64, device=dev),
            torch.zeros(num_clients, dtype=torch.float64, device=dev)]
    if per_client_loop is None:
        per_client_loop = dev.type == "cpu"
    if model.has_batch_norm or (params.dim() == 2 and per_client_loop):
        # one client per forward pass: batch-norm statistics come from the client's own test set only; and on
        # a CPU, unpadded per-client passes beat vmap's padded ones (13x faster for the Fashion-MNIST CNN)
        for k in np.nonzero(pooled.sizes)[0]:  # (a client may have no sample: a backdoor's test view)
            rows = slice(int(pooled.offsets[k]), int(pooled.offsets[k] + pooled.sizes[k]))
            ids = torch.arange(rows.start, rows.stop, device=dev)
            out = model.forward(params if params.dim() == 1 else params[k], pooled.x[rows], ids, key)
            ones = torch.ones(len(pooled.y[rows]), dtype=torch.float64, device=dev)
            _accumulate(model, out, pooled.y[rows], pooled.owner[rows], ones, num_clients, classes, sums)
    elif params.dim() == 1:
        chunk = shared_chunk(vmap_costs(model, params, pooled, classes, key).per_sample)
        for start in range(0, len(pooled.y), chunk):
            sl = slice(start, start + chunk)
            ids = torch.arange(start, min(start + chunk, len(pooled.y)), device=dev)
            out = model.forward(params, pooled.x[sl], ids, key)
            ones = torch.ones(len(pooled.y[sl]), dtype=torch.float64, device=dev)
            _accumulate(model, out, pooled.y[sl], pooled.owner[sl], ones, num_clients, classes, sums)
    else:
        _evaluate_vmapped(model, params, pooled, key, budget_bytes, sums)
    correct, total, loss = (s.cpu().numpy() for s in sums)
    return Counts(correct.reshape(num_clients, classes), total.reshape(num_clients, classes), loss)


def shared_chunk(sample_bytes: int, budget_bytes: int | None = None) -> int:
    """Samples per forward pass of one shared model: EVAL_CHUNK, fewer where they would pass ``budget_bytes``
    (None: SHARED_EVAL_BYTES)."""
    budget = SHARED_EVAL_BYTES if budget_bytes is None else budget_bytes
    return max(1, min(EVAL_CHUNK, budget // max(sample_bytes, 1)))


def _evaluate_vmapped(model: FlatModel, params: torch.Tensor, pooled: Pooled, key: int | None, budget_bytes: int,
                      sums: list[torch.Tensor]) -> None:
    """Personal models, ``vmap``-ed over chunks of clients whose working set stays under ``budget_bytes``."""
    forward = vmap(model.forward, in_dims=(0, 0, 0, None), randomness="different")
    costs = vmap_costs(model, params, pooled, len(sums[0]) // len(sums[2]), key)
    row_bytes = params.shape[1] * params.element_size()
    for ids in client_chunks(pooled.sizes, row_bytes + costs.per_client, costs.per_client, costs.per_sample,
                             budget_bytes - costs.per_call):
        index, real = pooled.padded_index(ids)
        owner = torch.as_tensor(ids, device=pooled.x.device)
        _score(model, forward, _rows(params, ids), pooled.x, pooled.y, index, real, owner, key, sums)


def _score(model: FlatModel, forward, rows: torch.Tensor, x: torch.Tensor, y: torch.Tensor, index: torch.Tensor,
           real: torch.Tensor, owner: torch.Tensor, key: int | None, sums: list[torch.Tensor]) -> None:
    """Clients ``owner`` [c] with parameters ``rows`` [c, d] on their padded samples ``index`` [c, b] (``real``:
    not padding) of the pooled ``x``, ``y``, counted into ``sums``."""
    out = forward(rows, take_rows(x, index), index, key)
    owner = owner[:, None].expand_as(index)
    _accumulate(model, out.flatten(0, 1), take_rows(y, index).flatten(0, 1), owner.flatten(),
                real.to(torch.float64).flatten(), len(sums[2]), len(sums[0]) // len(sums[2]), sums)


def _rows(params: torch.Tensor, ids: np.ndarray) -> torch.Tensor:
    """The clients' rows: a view for a contiguous ascending range of clients, else a gathered copy."""
    if _contiguous(ids):
        return params[int(ids[0]) : int(ids[-1]) + 1]
    return params[torch.as_tensor(ids, device=params.device)]


def _contiguous(ids: np.ndarray) -> bool:
    return bool(np.array_equal(ids, np.arange(ids[0], ids[0] + len(ids))))


def client_chunks(sizes: np.ndarray, gathered_bytes: int, view_bytes: int, sample_bytes: int,
                  budget_bytes: int) -> list[np.ndarray]:
    """Groups of clients of similar test size (little padding) whose vmap working set stays under ``budget_bytes``.

    Per client: ``gathered_bytes`` if its group's rows are gathered (a copy), ``view_bytes`` if they are a
    contiguous ascending range (a view); per padded sample: ``sample_bytes``. A client alone over the budget
    still gets a group of its own."""
    chunks, current, contiguous = [], [], True
    for k in map(int, np.argsort(sizes, kind="stable")):  # ascending: the last client of a group is its widest
        joined = contiguous and (not current or k == current[-1] + 1)
        per_client = view_bytes if joined else gathered_bytes
        if current and (len(current) + 1) * (per_client + max(int(sizes[k]), 1) * sample_bytes) > budget_bytes:
            chunks.append(np.array(current))
            current, joined = [], True
        current.append(k)
        contiguous = joined
    if current:
        chunks.append(np.array(current))
    return chunks


class VmapCosts(NamedTuple):
    """Bytes one evaluation vmap call allocates: once, per client (beyond its parameter row), per padded sample."""

    per_call: int
    per_client: int
    per_sample: int


def vmap_costs(model: FlatModel, params: torch.Tensor, pooled: Pooled, classes: int, key: int | None) -> VmapCosts:
    """Measured once per architecture and layout: the bytes of every storage one chunk's vmap call allocates (input
    gather, forward, loss, counts), traced on the meta device (no memory, no compute) for 2 and 3 clients of 2
    and 3 samples (a single client or sample takes cheaper paths: conv skips its clones); a sum over all ops,
    not their peak, so an upper bound."""
    layout = (tuple(pooled.x.shape[1:]), pooled.x.dtype, tuple(pooled.y.shape[1:]), pooled.y.dtype, params.dtype,
              classes, key is not None)
    cache = _MODEL_COSTS.setdefault(model, {}) if model.architecture is None else \
        _COSTS.setdefault(model.architecture, {})
    if layout not in cache:
        base = _traced_bytes(model, layout, 2, 2)
        per_sample = max(_traced_bytes(model, layout, 2, 3) - base, 0) // 2
        per_client = max(_traced_bytes(model, layout, 3, 2) - base - 2 * per_sample, 0)
        per_call = max(base - 2 * per_client - 4 * per_sample, 0)  # e.g. dropout's per-feature hashes
        cache[layout] = VmapCosts(per_call, per_client, per_sample + INDEX_BYTES)
    return cache[layout]


@torch.no_grad()
def _traced_bytes(model: FlatModel, layout: tuple, clients: int, samples: int) -> int:
    x_shape, x_dtype, y_shape, y_dtype, p_dtype, classes, keyed = layout
    meta = torch.device("meta")
    x, y = torch.zeros(1, *x_shape, dtype=x_dtype, device=meta), torch.zeros(1, *y_shape, dtype=y_dtype, device=meta)
    index = torch.zeros(clients, samples, dtype=torch.long, device=meta)
    real = torch.ones(clients, samples, dtype=torch.bool, device=meta)
    owner = torch.zeros(clients, dtype=torch.long, device=meta)
    rows = torch.zeros(clients, model.dim, dtype=p_dtype, device=meta)
    sums = [torch.zeros(n, dtype=torch.float64, device=meta) for n in (clients * classes, clients * classes, clients)]
    forward = vmap(model.forward, in_dims=(0, 0, 0, None), randomness="different")
    with TensorMemory(meta=True) as meter:
        _score(model, forward, rows, x, y, index, real, owner, 0 if keyed else None, sums)
    return meter.allocated
