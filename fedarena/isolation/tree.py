"""A process tree as the kernel lists it (``/proc``): who is below whom, and their memory together."""

from __future__ import annotations

import os
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")


def _processes() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, process group) of every process now running."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited while listed
        fields = stat[stat.rindex(")") + 2:].split()  # after the command name, which may hold spaces
        out[int(entry.name)] = (int(fields[1]), int(fields[2]))
    return out


def descendants(root: int) -> set[int]:
    """``root`` and every process below it, or in its process group."""
    table = _processes()
    found = {root} | {pid for pid, (_, group) in table.items() if group == root}
    grew = True
    while grew:
        more = {pid for pid, (parent, _) in table.items() if parent in found} - found
        found |= more
        grew = bool(more)
    return found


def memory_mib_of(pids: set[int]) -> float:
    """The memory of ``pids`` together, in MiB: each one's proportional set size (its share of shared pages),
    or its resident set where the kernel gives no PSS."""
    total = 0.0
    for pid in pids:
        try:
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
            total += next(int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Pss:")) / 1024
        except (OSError, StopIteration, ValueError, IndexError):
            try:
                total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE / 2**20
            except (OSError, IndexError, ValueError):
                continue  # exited while counted
    return total
