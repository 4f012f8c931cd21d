"""The draws and minibatch plans of the next rounds, computed several rounds at a time.

A round's draw and its clients' plans are pure functions of (seed, round, client) (``simulation.data``), so those of
a block of rounds (``RoundsAhead.rounds``: 16 to 64) come out of one pass of array operations as equal, entry for
entry, to the ones each round would compute alone: a few hundred small numpy calls a round become a few dozen, a
sixth of a small model's round on a CPU (``make perf``). The cache holds only what the rounds themselves would
compute; a round whose draw depends on the run (a rule removed clients: ``server[EXCLUDED]``) or a plan of another
schedule (finetuning, a client budget) is computed on its own, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from fedarena.models.batch import Batch
from fedarena.simulation.data import Pooled, drawn_clients_of_rounds, gather, plan_shapes, round_plan

PLANS_AHEAD = 640  # client plans computed together: the rounds of a block, times the clients of a round
FEWEST_AHEAD, MOST_AHEAD = 16, 64  # rounds in a block (a block of 64 rounds of 10 clients saves 1-2% a round of a
# small MLP against one of 16, where at 50 clients a round 16 rounds are as fast as 32 or 64: the plans' arrays grow)
GATHER_BYTES = 512 << 10  # a block's minibatches are gathered at once up to this size a round (small models' data)


@dataclass(frozen=True)
class Planned:
    """A round of the block: its clients (sorted), its columns of the block's plan, and its plan's steps and width."""

    ids: np.ndarray
    cols: slice
    steps: int
    width: int


@dataclass
class RoundsAhead:
    """The draws and plans of a run's rounds (its seed, sampling, clients per round and local schedule), on the
    training pool ``train`` (plans read only its sizes and offsets, which a round's corrupted copy keeps)."""

    train: Pooled
    seed: int
    sampling: str
    per_round: int
    steps: int
    epochs: int
    batch_size: int
    _draws: dict[int, np.ndarray] = field(default_factory=dict)
    _rounds: dict[int, Planned] = field(default_factory=dict)
    _block: tuple = ()  # the block's plan (index, mask, active) for all its rounds' clients, side by side
    _gathered: tuple | None = None  # the block's minibatches of ``train`` (a ``Batch``'s fields), once gathered
    _round_views: list = field(default_factory=list)  # each round's columns of them, in the block's order
    # who cannot be drawn in each of some rounds ([rounds, devices] bool, or None: everyone can): a deployment's
    # availability (``fedarena.system``); a round with fewer available devices than ``per_round`` is not cached
    unavailable: Callable[[np.ndarray], np.ndarray | None] | None = None
    _span: range = range(0)  # the rounds of the block

    @property
    def rounds(self) -> int:
        """Rounds drawn and planned together: ``PLANS_AHEAD`` clients' plans, within 16 to 64 rounds."""
        return min(MOST_AHEAD, max(FEWEST_AHEAD, PLANS_AHEAD // max(self.per_round, 1)))

    def drawn(self, round_idx: int) -> np.ndarray | None:
        """The round's clients in the order drawn (``data.drawn_clients`` without exclusions but the unavailable
        devices); None for a round the block does not hold (fewer devices available than drawn)."""
        if round_idx not in self._span:
            self._fill(round_idx)
        return self._draws.get(round_idx)

    def plan(self, pool: Pooled, group: np.ndarray, round_idx: int, steps: int, epochs: int):
        """``round_plan(pool, group, steps, epochs, ...)`` for the round: a view of the block's where it holds the
        round's clients with this schedule on a pool of the same layout, else computed on its own."""
        cut = self._cut(pool, group, round_idx, steps, epochs)
        if cut is None:
            return round_plan(pool, group, steps, epochs, self.batch_size, self.seed, round_idx)
        index, mask, active = self._block
        return _window(index, *cut), _window(mask, *cut), _window(active, *cut[:2])

    def batches(self, pool: Pooled, group: np.ndarray, round_idx: int, steps: int, epochs: int) -> Batch:
        """``gather(pool, *plan(...))``: for the training pool itself (no data attack changed it), a view of the
        block's minibatches, gathered in one indexing for all its rounds where they are small (``GATHER_BYTES``);
        else gathered for this call alone. The same tensors either way."""
        cut = self._cut(pool, group, round_idx, steps, epochs) if pool is self.train else None
        if cut is None or not self._gather_block():
            return gather(pool, *self.plan(pool, group, round_idx, steps, epochs))
        num_steps, cols, width = cut
        if isinstance(cols, slice):  # a whole round: its columns were split from the block with the others'
            x, y, mask, active, index = self._round_views[cols.start // (cols.stop - cols.start)]
        else:
            x, y, mask, active, index = (t[:, cols] for t in self._gathered)
        return Batch(_trimmed(x, num_steps, width), _trimmed(y, num_steps, width), _trimmed(mask, num_steps, width),
                     _trimmed(active, num_steps), _trimmed(index, num_steps, width))

    def _cut(self, pool: Pooled, group: np.ndarray, round_idx: int, steps: int, epochs: int):
        """(steps, the block's columns, width) of the group's plan in this round, or None where the block does not
        hold it: another round, schedule, layout, or clients that are not the round's."""
        planned = self._rounds.get(round_idx)
        if planned is None or (steps, epochs) != (self.steps, self.epochs) or not self._same_layout(pool):
            return None
        if len(group) == len(planned.ids) and (group == planned.ids).all():  # the whole round (batched)
            return planned.steps, planned.cols, planned.width
        rows = np.searchsorted(planned.ids, group)  # part of it (the sequential backend's groups)
        if not (rows < len(planned.ids)).all() or not np.array_equal(planned.ids[rows], group):
            return None
        num_steps, width = plan_shapes(self.train.sizes[group].astype(np.int64), steps, epochs, self.batch_size)
        cols = torch.as_tensor(planned.cols.start + rows, device=self._block[0].device)
        return int(num_steps), cols, int(width)

    def _same_layout(self, pool: Pooled) -> bool:
        return pool.sizes is self.train.sizes or (np.array_equal(pool.sizes, self.train.sizes)
                                                  and np.array_equal(pool.offsets, self.train.offsets))

    def _gather_block(self) -> bool:
        """Whether the block's minibatches are gathered (now, if they fit ``GATHER_BYTES`` a round)."""
        if self._gathered is None:
            index = self._block[0]
            row_bytes = int(np.prod(self.train.x.shape[1:])) * self.train.x.element_size()
            if index.numel() * row_bytes > GATHER_BYTES * self.rounds:
                return False
            g = gather(self.train, *self._block)
            self._gathered = (g.x, g.y, g.mask, g.active, g.index)
            first = next(iter(self._rounds.values())).cols  # every round has as many columns as the first
            self._round_views = list(zip(*(t.split(first.stop - first.start, 1) for t in self._gathered),
                                         strict=True))  # five calls a block, not five a round
        return True

    def _fill(self, first: int) -> None:
        """Draw and plan rounds ``first`` .. ``first + self.rounds - 1``, forgetting the earlier ones."""
        rounds = np.arange(first, first + self.rounds)
        away = None if self.unavailable is None else self.unavailable(rounds)
        draws = drawn_clients_of_rounds(self.seed, self.sampling, self.train.sizes, self.per_round, rounds, away)
        if away is not None:  # the rounds where enough devices are available; the others are drawn on their own
            enough = (~away).sum(1) >= min(self.per_round, len(self.train.sizes))
            rounds, draws = rounds[enough], draws[enough]
        self._span = range(first, first + self.rounds)
        if not len(rounds):
            self._draws, self._rounds, self._block, self._gathered, self._round_views = {}, {}, (), None, []
            return
        ids = np.sort(draws, axis=1)
        self._block = round_plan(self.train, ids.reshape(-1), self.steps, self.epochs, self.batch_size, self.seed,
                                 np.repeat(rounds, ids.shape[1]))
        self._gathered, self._round_views = None, []
        steps, widths = plan_shapes(self.train.sizes[ids].astype(np.int64), self.steps, self.epochs, self.batch_size)
        n = ids.shape[1]
        self._draws = {int(r): d for r, d in zip(rounds, draws, strict=True)}
        self._rounds = {int(r): Planned(ids[k], slice(k * n, (k + 1) * n), int(steps[k]), int(widths[k]))
                        for k, r in enumerate(rounds)}


def _window(block: torch.Tensor, num_steps: int, cols: slice | torch.Tensor, width: int | None = None) -> torch.Tensor:
    """``block[:num_steps, cols, :width]`` (a view where ``cols`` is a slice)."""
    part = block.narrow(1, cols.start, cols.stop - cols.start) if isinstance(cols, slice) else block[:, cols]
    return _trimmed(part, num_steps, width)


def _trimmed(part: torch.Tensor, num_steps: int, width: int | None = None) -> torch.Tensor:
    """``part[:num_steps, :, :width]``, slicing only the dimensions it cuts: each slice is a dispatched call, and a
    round's batch has five fields."""
    if num_steps < part.shape[0]:
        part = part.narrow(0, 0, num_steps)
    if width is not None and width < part.shape[2]:
        part = part.narrow(2, 0, width)
    return part
