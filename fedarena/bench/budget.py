"""How often a trial checkpoints when the user did not say: a time budget instead of a round count.

A paper-scale Ditto checkpoint (500 personal models of the 3.27M-parameter CNN) is 6.56 GB: ten of them
cost most of a two-minute trial. ``CheckpointBudget`` lets a checkpoint through only when the training time
since the last one is at least ``cost / fraction``, where ``cost`` is the last checkpoint's measured time (the
first one's is predicted from the state's size at ``PREDICTED_BYTES_PER_S``). Checkpoints then take at most
about ``fraction`` of a trial's time, and an interrupted trial redoes at most about ``cost / fraction`` of
training. Where it checkpoints never changes a number: a resumed run continues exactly from any round.
"""

from __future__ import annotations

import time

DEFAULT_FRACTION = 0.05
PREDICTED_BYTES_PER_S = 500e6  # conservative: an H100 host saved 6.56 GB in 10.3 s (0.64 GB/s)


class CheckpointBudget:
    """Allows a checkpoint when enough training time has passed since the last one (see the module)."""

    def __init__(self, fraction: float = DEFAULT_FRACTION, clock=time.perf_counter):
        if not 0 < fraction <= 1:
            raise ValueError(f"checkpoint time fraction must be in (0, 1], got {fraction}")
        self.fraction, self.clock = fraction, clock
        self.since = clock()
        self.cost: float | None = None  # seconds the last checkpoint took

    def allows(self, state_bytes: int) -> bool:
        cost = self.cost if self.cost is not None else state_bytes / PREDICTED_BYTES_PER_S
        return self.clock() - self.since >= cost / self.fraction

    def record(self, seconds: float) -> None:
        """A checkpoint was written in ``seconds``; the next one waits for ``seconds / fraction`` of training."""
        self.cost = seconds
        self.since = self.clock()
