"""The pipe between a trial and an isolated rule: length-prefixed frames of data, never of code.

The rule's side is not trusted, so nothing it sends is unpickled: a message is a JSON header and raw tensor
buffers, decoded field by field (``decode``), with the dtypes, sizes and nesting allowed here and nothing else; a
hostile rule can send wrong numbers but never code. Both directions use it (it is also 3x faster than pickling
tensors). Every tensor read is copied out first, so what either side writes later changes nothing already read.

A frame is an 8-byte big-endian length and that many bytes; a message's bytes are a 4-byte header length, the
JSON header and the buffers its tensors name (``{"__tensor__": [offset, bytes], "dtype": ..., "shape": [...]}``),
or a tensor's place in the memory both sides map (``"__shared__"``, ``Shared``). Tuples travel as
``{"__tuple__": [...]}``; mappings have text keys.
"""

from __future__ import annotations

import fcntl
import json
import math
import mmap
import os
import struct
from typing import Any, BinaryIO

import numpy as np
import torch

MAX_FRAME = 1 << 31  # bytes of one frame (a [n, d] answer of a paper-scale model fits many times)
MAX_HEADER = 1 << 24  # bytes of an answer's JSON header
MAX_DEPTH = 8  # nesting of a message's containers
SHARED_BYTES = 256 * 2**20  # the shared region (pages are used only where written: a digits call touches 200 KB)
DTYPES = {"float64": torch.float64, "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "int64": torch.int64, "int32": torch.int32, "uint8": torch.uint8, "bool": torch.bool}
NAMES = {dtype: name for name, dtype in DTYPES.items()}


class WireError(RuntimeError):
    """A message that is not what the wire format allows (a broken or hostile rule process)."""


def write_frame(stream: BinaryIO, payload: bytes) -> None:
    stream.write(struct.pack(">Q", len(payload)) + payload)
    stream.flush()


def read_frame(stream: BinaryIO) -> bytes:
    """One frame's bytes; EOFError where the other side closed the pipe."""
    head = _exactly(stream, 8)
    size = struct.unpack(">Q", head)[0]
    if size > MAX_FRAME:
        raise WireError(f"a frame of {size} bytes (at most {MAX_FRAME})")
    return _exactly(stream, size)


def _exactly(stream: BinaryIO, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = stream.read(left)
        if not chunk:
            raise EOFError("the rule's process closed its pipe")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


class Shared:
    """A memory region both sides map (a ``memfd`` the rule's process inherits): a message's tensor bytes go there
    and only its header crosses the pipe, so a call's cost does not grow with the pipe's many small reads. The
    two sides take turns (a request, then its answer), so one region serves both; each message's tensors are laid
    from its start. A tensor that does not fit travels in the frame."""

    def __init__(self, fd: int, size: int):
        self.fd, self.size = fd, size
        self.map = mmap.mmap(fd, size)
        self.bytes = np.frombuffer(self.map, dtype=np.uint8)

    def close(self) -> None:
        self.bytes = None  # the array's view of the map first: a map with views cannot close
        self.map.close()
        os.close(self.fd)

    @classmethod
    def create(cls, size: int = SHARED_BYTES) -> Shared:
        fd = os.memfd_create("fedarena-isolated-rule", os.MFD_ALLOW_SEALING)  # inherited by the sandbox (pass_fds)
        os.ftruncate(fd, size)
        # sealed at its size before the sandbox gets it: a rule that shrank it would make the trial's process read
        # past its end (SIGBUS), one that grew it would hold memory no limit counts
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        return cls(fd, size)


def encode(value: Any, shared: Shared | None = None) -> bytes:
    """A message's bytes: tensors, numbers, text, None, lists, tuples, text-keyed mappings (tensor bytes in
    ``shared`` where they fit)."""
    buffers: list[bytes] = []
    offset, placed = [0], [0]

    def tensor_field(item: torch.Tensor) -> dict:
        tensor = item.detach().to("cpu").contiguous()
        if tensor.dtype not in NAMES:
            raise WireError(f"a tensor of dtype {tensor.dtype}; allowed: {', '.join(DTYPES)}")
        raw = tensor.reshape(-1).view(torch.uint8).numpy() if tensor.numel() else np.zeros(0, np.uint8)
        field = {"dtype": NAMES[tensor.dtype], "shape": list(tensor.shape)}
        if shared is not None and placed[0] + raw.size <= shared.size:
            shared.bytes[placed[0]:placed[0] + raw.size] = raw
            placed[0] += raw.size
            return {"__shared__": [placed[0] - raw.size, int(raw.size)], **field}
        buffers.append(raw.tobytes())
        offset[0] += raw.size
        return {"__tensor__": [offset[0] - raw.size, int(raw.size)], **field}

    def walk(item: Any) -> Any:
        if isinstance(item, torch.Tensor):
            return tensor_field(item)
        if isinstance(item, tuple):
            return {"__tuple__": [walk(v) for v in item]}
        if isinstance(item, list):
            return [walk(v) for v in item]
        if isinstance(item, dict):
            if not all(isinstance(k, str) for k in item):
                raise WireError("a mapping with keys that are not text")
            return {k: walk(v) for k, v in item.items()}
        if isinstance(item, (np.integer, np.floating, np.bool_)):
            return item.item()
        if item is None or isinstance(item, (bool, int, float, str)):
            return item
        raise WireError(f"a value of type {type(item).__name__}; a message holds tensors, numbers, text, None, "
                        f"lists, tuples and text-keyed mappings")

    header = json.dumps(walk(value), allow_nan=True).encode()
    return struct.pack(">I", len(header)) + header + b"".join(buffers)


def decode(payload: bytes, shared: Shared | None = None) -> Any:
    """A message from its bytes (and ``shared``'s), every field checked; WireError otherwise."""
    if len(payload) < 4:
        raise WireError("a message shorter than its header")
    size = struct.unpack(">I", payload[:4])[0]
    if size > MAX_HEADER or 4 + size > len(payload):
        raise WireError(f"a message header of {size} bytes")
    try:
        header = json.loads(payload[4:4 + size])
    except (ValueError, RecursionError) as err:
        raise WireError(f"a message header that is not JSON ({err})") from None
    inline = memoryview(payload)[4 + size:]
    try:
        return _value(header, inline, 0, shared)
    except WireError:
        raise
    except (TypeError, ValueError, RuntimeError, OverflowError, MemoryError) as err:  # a field of another type
        raise WireError(f"a message that cannot be read ({type(err).__name__}: {err})") from None


def _value(item: Any, data: memoryview, depth: int, shared: Shared | None) -> Any:
    if depth > MAX_DEPTH:
        raise WireError(f"a message nested deeper than {MAX_DEPTH}")
    if isinstance(item, dict) and "__tensor__" in item:
        return _tensor(item, data, item["__tensor__"])
    if isinstance(item, dict) and "__shared__" in item:
        if shared is None:
            raise WireError("a tensor in shared memory where there is none")
        return _tensor(item, shared.bytes, item["__shared__"])
    if isinstance(item, dict) and set(item) == {"__tuple__"} and isinstance(item["__tuple__"], list):
        return tuple(_value(v, data, depth + 1, shared) for v in item["__tuple__"])
    if isinstance(item, dict):
        return {str(k): _value(v, data, depth + 1, shared) for k, v in item.items()}
    if isinstance(item, list):
        return [_value(v, data, depth + 1, shared) for v in item]
    if item is None or isinstance(item, (bool, int, str)) or (isinstance(item, float)):
        return item
    raise WireError(f"a message holds a {type(item).__name__}")


def _tensor(item: dict, data, span) -> torch.Tensor:
    """A tensor copied out of ``data`` (the frame's bytes or the shared region: the other side reuses it)."""
    dtype, shape = DTYPES.get(item.get("dtype")), item.get("shape")
    if dtype is None:
        raise WireError(f"a tensor of dtype {item.get('dtype')!r}; allowed: {', '.join(DTYPES)}")
    if not (isinstance(shape, list) and len(shape) <= 4 and all(_count(s) for s in shape)):
        raise WireError(f"a tensor of shape {shape!r}")
    if not (isinstance(span, list) and len(span) == 2 and all(_count(s) for s in span)):
        raise WireError(f"a tensor at {span!r}")
    start, size = span
    expected = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    if size != expected or start + size > len(data):
        raise WireError(f"a tensor of shape {shape} and dtype {item['dtype']} in {size} bytes")
    if size == 0:  # an empty tensor: no bytes to view as its dtype
        return torch.empty(shape, dtype=dtype)
    raw = torch.from_numpy(np.array(data[start:start + size], dtype=np.uint8, copy=True))
    return raw.view(dtype).reshape(shape)


def _count(value) -> bool:
    """A whole number >= 0 (not a bool, which JSON's true would be)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
