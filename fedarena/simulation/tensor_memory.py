"""Bytes of live tensor storages during a block, on any device (a CPU keeps no allocator statistics).

``TensorMemory`` is a ``TorchDispatchMode``: every op output whose storage is new (not the storage of one of
the op's inputs, so views and in-place results are not allocations) is added to the live total, and taken
off by a ``weakref.finalize`` on the storage when it is freed. Storages are the keys, so the views of one
buffer count once. The meter sees storages allocated inside the block, plus, with ``resident=True``, those
of the tensors alive at entry (found by the garbage collector), which makes ``peak`` comparable with
``torch.cuda.max_memory_allocated``. Meta tensors hold no memory and count only with ``meta=True`` (to trace
what a computation would allocate, without running it). It does not see allocations outside the dispatcher (``torch.from_numpy``,
kernels' scratch buffers) nor tensors held only by C++ at entry (a live autograd graph).
"""

from __future__ import annotations

import gc
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class TensorMemory(TorchDispatchMode):
    """``current``, ``peak``: live bytes now and at most; ``allocated``: bytes of every storage seen."""

    def __init__(self, resident: bool = False, meta: bool = False):
        super().__init__()
        self.resident, self.meta = resident, meta
        self.current = self.peak = self.allocated = 0
        self._live: dict[int, int] = {}
        self._finalizers: dict[int, weakref.finalize] = {}

    def __enter__(self) -> TensorMemory:
        if self.resident:
            for t in live_tensors():
                self._track(t.untyped_storage())
        return super().__enter__()

    def __exit__(self, *exc) -> None:
        super().__exit__(*exc)
        for fin in self._finalizers.values():  # storages outliving the block no longer report to this meter
            fin.detach()
        self._finalizers.clear()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = {_key(t.untyped_storage()) for t in _tensors((args, kwargs))}
        for t in _tensors(out):
            storage = t.untyped_storage()
            if _key(storage) not in inputs:
                self._track(storage)
        return out

    def _track(self, storage: torch.UntypedStorage) -> None:
        key = _key(storage)
        if key in self._live or (storage.device.type == "meta" and not self.meta):
            return
        nbytes = storage.nbytes()
        self._live[key] = nbytes
        self.current += nbytes
        self.allocated += nbytes
        self.peak = max(self.peak, self.current)
        self._finalizers[key] = weakref.finalize(storage, self._free, key)

    def _free(self, key: int) -> None:
        self.current -= self._live.pop(key)
        self._finalizers.pop(key, None)


def _key(storage: torch.UntypedStorage) -> int:
    return storage._cdata  # the C++ StorageImpl: shared by every view, unique while the storage lives


def _tensors(tree) -> list[torch.Tensor]:
    return [t for t in tree_leaves(tree) if isinstance(t, torch.Tensor) and t.layout == torch.strided]


def live_tensors() -> list[torch.Tensor]:
    """The strided tensors the garbage collector can reach (``type``, not ``isinstance``: some modules' lazy
    objects warn when their class is looked up)."""
    return [o for o in gc.get_objects() if issubclass(type(o), torch.Tensor) and o.layout == torch.strided]
