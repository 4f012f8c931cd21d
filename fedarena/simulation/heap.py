"""The C heap's policy for a process that runs trials on a CPU: freed tensors' pages are kept for the next round.

A round allocates and frees the same few large tensors (each client's layers, the updates, their mean: megabytes
for a small MLP). glibc's malloc serves a block above its mmap threshold with fresh pages and, once the heap's free
top exceeds its trim threshold, hands those pages back to the system; both thresholds adapt to the blocks freed, so
whether a round pays for its pages again depends on the order of earlier allocations. Where it does, every page is
faulted in and zeroed anew: 20 to 370 page faults a round and up to a third more time on the small workload of
``make perf``, varying from process to process. Fixed thresholds keep those pages in the heap. Nothing computed
changes: only where the allocator finds memory.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # blocks up to this size come from the heap (glibc's own adaptive limit on 64-bit)
TRIM_THRESHOLD = 256 << 20  # free memory kept at the heap's top before it is handed back to the system


@functools.cache
def keep_freed_pages() -> bool:
    """Fix glibc's mmap and trim thresholds for this process (once); False where the C library is not glibc."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    libc = ctypes.CDLL(name)
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):  # musl, macOS: their own malloc
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
