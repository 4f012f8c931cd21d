"""Progress lines of a benchmark: one line per trial event, prefixed by the overall counts.

    [3/12 done | 2 running | 7 pending | 0 failed] ditto fmnist a1@0.5 s0: round 40/100 acc 0.874
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

# Ray Tune trial statuses -> our words
STATUS_WORDS = {"TERMINATED": "done", "RUNNING": "running", "PENDING": "pending", "PAUSED": "pending",
                "ERROR": "failed"}


@dataclass(frozen=True)
class Tally:
    total: int
    done: int
    running: int
    pending: int
    failed: int

    def prefix(self) -> str:
        return (f"[{self.done}/{self.total} done | {self.running} running | {self.pending} pending | "
                f"{self.failed} failed]")


def tally(statuses: Iterable[str], total: int) -> Tally:
    """Counts over the trial statuses Ray reports; trials Ray has not created yet count as pending."""
    counts = Counter(STATUS_WORDS.get(s, "pending") for s in statuses)
    known = sum(counts.values())
    return Tally(total, counts["done"], counts["running"], counts["pending"] + max(0, total - known),
                 counts["failed"])


def round_line(name: str, result: dict) -> str:
    """``name: round r/R acc a (std s)`` for a reported result (accuracy only at evaluation rounds)."""
    text = f"{name}: round {result.get('round', '?')}/{result.get('rounds', '?')}"
    acc = result.get("acc_pooled")
    if result.get("evaluated") and isinstance(acc, float) and math.isfinite(acc):
        text += f" acc {acc:.3f} (std {result.get('acc_std', float('nan')):.3f})"
    if result.get("diverged"):
        text += " DIVERGED"
    return text


def final_line(name: str, final: dict) -> str:
    acc, std = final.get("acc_pooled"), final.get("acc_std")
    acc_text = f"acc {acc:.3f} (std {std:.3f})" if isinstance(acc, float) and isinstance(std, float) else "no metrics"
    return f"{name}: finished at round {final.get('round')} {acc_text}" + (" DIVERGED" if final.get("diverged") else "")


class Printer:
    """Writes progress lines (to stdout by default; tests pass a list's ``append``)."""

    def __init__(self, emit: Callable[[str], None] | None = None):
        self.emit = emit or (lambda line: print(line, file=sys.stdout, flush=True))

    def event(self, counts: Tally, text: str) -> None:
        self.emit(f"{counts.prefix()} {text}")
