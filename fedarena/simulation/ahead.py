"""The draws and minibatch plans of the next rounds, computed several rounds at a time.

A round's draw and its clients' plans are pure functions of (seed, round, client) (``simulation.data``), so those of
``AHEAD`` rounds come out of one pass of array operations as equal, entry for entry, to the ones each round would
compute alone: a few hundred small numpy calls a round become a few dozen, a sixth of a small model's round on a
CPU (``make perf``). The cache holds only what the rounds themselves would compute; a round whose draw depends on
the run (a rule removed clients: ``server[EXCLUDED]``) or a plan of another schedule (finetuning, a client budget)
is computed on its own, as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from fedarena.models.batch import Batch
from fedarena.simulation.data import Pooled, drawn_clients_of_rounds, gather, plan_shapes, round_plan

AHEAD = 16  # rounds drawn and planned together (more costs as much a round: the plans' arrays grow)
GATHER_BYTES = 8 << 20  # a block's minibatches are gathered at once up to this size (small models' data)


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
    _gathered: Batch | None = None  # the block's minibatches of ``train``, once gathered

    def drawn(self, round_idx: int) -> np.ndarray:
        """The round's clients in the order drawn (``data.drawn_clients`` without exclusions)."""
        if round_idx not in self._draws:
            self._fill(round_idx)
        return self._draws[round_idx]

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
        g = self._gathered
        return Batch(*(_window(t, *cut) for t in (g.x, g.y, g.mask)), _window(g.active, *cut[:2]),
                     _window(g.index, *cut))

    def _cut(self, pool: Pooled, group: np.ndarray, round_idx: int, steps: int, epochs: int):
        """(steps, the block's columns, width) of the group's plan in this round, or None where the block does not
        hold it: another round, schedule, layout, or clients that are not the round's."""
        planned = self._rounds.get(round_idx)
        if planned is None or (steps, epochs) != (self.steps, self.epochs) or not self._same_layout(pool):
            return None
        if len(group) == len(planned.ids) and np.array_equal(group, planned.ids):  # the whole round (batched)
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
        """Whether the block's minibatches are gathered (now, if they fit ``GATHER_BYTES``)."""
        if self._gathered is None:
            index = self._block[0]
            row_bytes = int(np.prod(self.train.x.shape[1:])) * self.train.x.element_size()
            if index.numel() * row_bytes > GATHER_BYTES:
                return False
            self._gathered = gather(self.train, *self._block)
        return True

    def _fill(self, first: int) -> None:
        """Draw and plan rounds ``first`` .. ``first + AHEAD - 1``, forgetting the earlier ones."""
        rounds = np.arange(first, first + AHEAD)
        draws = drawn_clients_of_rounds(self.seed, self.sampling, self.train.sizes, self.per_round, rounds)
        ids = np.sort(draws, axis=1)
        self._block = round_plan(self.train, ids.reshape(-1), self.steps, self.epochs, self.batch_size, self.seed,
                                 np.repeat(rounds, ids.shape[1]))
        self._gathered = None
        steps, widths = plan_shapes(self.train.sizes[ids].astype(np.int64), self.steps, self.epochs, self.batch_size)
        n = ids.shape[1]
        self._draws = {int(r): d for r, d in zip(rounds, draws, strict=True)}
        self._rounds = {int(r): Planned(ids[k], slice(k * n, (k + 1) * n), int(steps[k]), int(widths[k]))
                        for k, r in enumerate(rounds)}


def _window(block: torch.Tensor, num_steps: int, cols: slice | torch.Tensor, width: int | None = None) -> torch.Tensor:
    """``block[:num_steps, cols, :width]`` (a view where ``cols`` is a slice), slicing only the dimensions it cuts:
    each slice is a dispatched call, and a round's batch takes five of these."""
    part = block.narrow(1, cols.start, cols.stop - cols.start) if isinstance(cols, slice) else block[:, cols]
    if num_steps < part.shape[0]:
        part = part.narrow(0, 0, num_steps)
    if width is not None and width < part.shape[2]:
        part = part.narrow(2, 0, width)
    return part
