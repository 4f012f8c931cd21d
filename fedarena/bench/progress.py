"""Progress lines of a benchmark: one line per trial event, prefixed by the overall counts and, once some
rounds have run, the suite's estimated time left; one summary line at the end::

    [3/12 done | 2 running | 7 pending | 0 failed | ETA 4m10s] ditto fmnist a1@0.5 s0: round 40/100 acc 0.874
    wall time 6m02s (12 trials: 0.017 trials per core-second on 2 cores); slowest cells: ditto fmnist a1@0.5 (3m10s, 2 seeds), ...

The ETA is the rounds left (of the trials seen, plus the unseen ones at the mean length of those seen) over
the rounds run per second of wall time since the first report (all trials together, so concurrency counts). A trial's time
is Ray Tune's ``time_total_s`` of its last report; a cell's is the sum over its seeds. Trials per core-second: the
trials that ran to their end over the wall time times the cores Ray had (the suite's throughput, comparable
across machines of one kind and across versions).
"""

from __future__ import annotations

import math
import re
import sys
import time
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

    def prefix(self, eta: float | None = None) -> str:
        left = "" if eta is None else f" | ETA {duration(eta)}"
        return (f"[{self.done}/{self.total} done | {self.running} running | {self.pending} pending | "
                f"{self.failed} failed{left}]")


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


def duration(seconds: float) -> str:
    """``0.4s``, ``42s``, ``3m07s``, ``2h05m``."""
    if seconds < 9.95:
        return f"{max(0.0, seconds):.1f}s"
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


@dataclass
class TrialProgress:
    start_round: int  # the round this session's attempt started from (a resumed trial's checkpoint)
    round: int
    rounds: int
    seconds: float = 0.0  # Ray Tune's time_total_s
    done: bool = False


class Progress:
    """Rounds run per trial, for the ETA and the end summary; ``clock`` is injectable for tests."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.created = clock()
        self.first_report: float | None = None
        self.ran_before = 0  # rounds already run when the first report came
        self.trials: dict[str, TrialProgress] = {}
        # running totals over ``trials`` (a suite's ETA after every event: summing 1,506 trials each time was
        # quadratic): rounds run, planned rounds, open trials and the rounds they have left
        self._ran = self._planned = self._open = self._left_open = 0

    def advance(self, name: str, result: dict) -> None:
        """Record a trial's report (Ray Tune's result dict: round, rounds, done, time_total_s...)."""
        start = int(result.get("resumed_from_round", 0) or 0)
        trial = self.trials.get(name)
        if trial is None:
            trial = self.trials[name] = TrialProgress(start, start, int(result.get("rounds", 0) or 0))
            self._planned += trial.rounds
        else:
            self._count(trial, -1)  # its old contribution out; the updated one back in below
        trial.round = max(trial.round, int(result.get("round", 0) or 0))
        trial.seconds = float(result.get("time_total_s", trial.seconds) or 0.0)
        trial.done = trial.done or bool(result.get("done"))
        self._count(trial)
        if self.first_report is None:  # the clock starts here: the rounds of this report ran before it
            self.first_report, self.ran_before = self.clock(), self.ran()

    def _count(self, trial: TrialProgress, sign: int = 1) -> None:
        self._ran += sign * (trial.round - trial.start_round)
        if not trial.done:
            self._open += sign
            self._left_open += sign * max(0, trial.rounds - trial.round)

    def ran(self) -> int:
        """Rounds run by this session's attempts."""
        return self._ran

    def eta(self, counts: Tally) -> float | None:
        """Seconds left for the whole suite; None before any round has run."""
        ran = self.ran() - self.ran_before
        elapsed = self.clock() - self.first_report if self.first_report is not None else 0.0
        if ran <= 0 or elapsed <= 0:
            return None
        unseen = max(0, counts.total - counts.done - counts.failed - self._open)
        mean_rounds = self._planned / len(self.trials)
        left = self._left_open + unseen * mean_rounds
        return left / (ran / elapsed)

    def summary(self, top: int = 3, cores: float | None = None) -> str:
        """``wall time ... (N trials: T trials per core-second on C cores); slowest cells: ...`` (a cell is a trial
        name without its seed; the throughput where ``cores`` is known and some trial ended)."""
        cells: dict[str, list[float]] = {}
        for name, trial in self.trials.items():
            cells.setdefault(re.sub(r" s\d+$", "", name), []).append(trial.seconds)
        ranked = sorted(cells.items(), key=lambda item: -sum(item[1]))[:top]
        slowest = ", ".join(f"{cell} ({duration(sum(times))}, {len(times)} seed{'s' * (len(times) > 1)})"
                            for cell, times in ranked)
        wall = self.clock() - self.created
        ended = sum(t.done for t in self.trials.values())
        rate = ""
        if cores and ended and wall > 0:
            rate = f" ({ended} trials: {ended / (wall * cores):.3g} trials per core-second on {cores:g} core" + (
                "s)" if cores != 1 else ")")
        return f"wall time {duration(wall)}{rate}; " + (f"slowest cells: {slowest}" if slowest else "no trial ran")


class Printer:
    """Writes progress lines (to stdout by default; tests pass a list's ``append``) with the suite's ETA."""

    def __init__(self, emit: Callable[[str], None] | None = None, clock: Callable[[], float] = time.monotonic):
        self.emit = emit or (lambda line: print(line, file=sys.stdout, flush=True))
        self.progress = Progress(clock)

    def event(self, counts: Tally, text: str) -> None:
        self.emit(f"{counts.prefix(self.progress.eta(counts))} {text}")

    def advance(self, name: str, result: dict) -> None:
        self.progress.advance(name, result)

    def summary(self, cores: float | None = None) -> None:
        """The one-line end summary: wall time, trials per core-second and the slowest cells."""
        self.emit(self.progress.summary(cores=cores))
