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
from fedarena.simulation.data import (
    Pooled,
    drawn_clients_of_rounds,
    gather,
    plan_schedule,
    plan_shape,
    round_plan,
)

AHEAD = 16  # rounds drawn and planned together (more costs as much a round: the plans' arrays grow)
GATHER_BYTES = 8 << 20  # a block's minibatches are gathered at once up to this size (small models' data)


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
    _plans: dict[int, tuple[np.ndarray, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]] = field(default_factory=dict)
    _block: tuple | None = None  # the block's plan and, once gathered, its minibatches of ``train``
    _cuts: dict[int, tuple[int, slice, int]] = field(default_factory=dict)  # each round's steps, columns, width

    def drawn(self, round_idx: int) -> np.ndarray:
        """The round's clients in the order drawn (``data.drawn_clients`` without exclusions)."""
        if round_idx not in self._draws:
            self._fill(round_idx)
        return self._draws[round_idx]

    def batches(self, pool: Pooled, group: np.ndarray, round_idx: int, steps: int, epochs: int) -> Batch:
        """``gather(pool, *plan(...))``: for a whole round of the training pool itself (no data attack changed it),
        a view of the block's minibatches, gathered in one indexing for all its rounds where they are small
        (``GATHER_BYTES``); else gathered for this round alone. The same tensors either way."""
        plan = self.plan(pool, group, round_idx, steps, epochs)
        cached = self._plans.get(round_idx)
        if pool is not self.train or cached is None or plan is not cached[1] or self._block is None:
            return gather(pool, *plan)
        index, mask, active, gathered = self._block
        if gathered is None:
            row_bytes = int(np.prod(self.train.x.shape[1:])) * self.train.x.element_size()
            if index.numel() * row_bytes > GATHER_BYTES:
                return gather(pool, *plan)
            gathered = gather(self.train, index, mask, active)
            self._block = (index, mask, active, gathered)
        s, cols, width = self._cuts[round_idx]
        return Batch(gathered.x[:s, cols, :width], gathered.y[:s, cols, :width], gathered.mask[:s, cols, :width],
                     gathered.active[:s, cols], gathered.index[:s, cols, :width])

    def plan(self, pool: Pooled, group: np.ndarray, round_idx: int, steps: int, epochs: int):
        """``round_plan(pool, group, steps, epochs, ...)`` for the round: from the cache where it holds the
        round's clients with this schedule on a pool of the same layout, else computed on its own."""
        cached = self._plans.get(round_idx)
        same_layout = pool.sizes is self.train.sizes or (np.array_equal(pool.sizes, self.train.sizes)
                                                         and np.array_equal(pool.offsets, self.train.offsets))
        if cached is None or (steps, epochs) != (self.steps, self.epochs) or not same_layout:
            return round_plan(pool, group, steps, epochs, self.batch_size, self.seed, round_idx)
        ids, whole = cached
        if len(group) == len(ids) and np.array_equal(group, ids):  # the whole round (the batched backend)
            return whole
        rows = np.searchsorted(ids, group)
        if not (rows < len(ids)).all() or not np.array_equal(ids[np.minimum(rows, len(ids) - 1)], group):
            return round_plan(pool, group, steps, epochs, self.batch_size, self.seed, round_idx)
        num_steps, width = plan_shape(self.train.sizes[group].astype(np.int64), steps, epochs, self.batch_size)
        index, mask, active = whole
        pick = torch.as_tensor(rows, device=index.device)
        return (index[:num_steps, pick, :width], mask[:num_steps, pick, :width], active[:num_steps, pick])

    def _fill(self, first: int) -> None:
        """Draw and plan rounds ``first`` .. ``first + AHEAD - 1``, forgetting the earlier ones. Each round's plan
        is a view of the block's, cut to that round's own steps and width."""
        rounds = np.arange(first, first + AHEAD)
        draws = drawn_clients_of_rounds(self.seed, self.sampling, self.train.sizes, self.per_round, rounds)
        ids = np.sort(draws, axis=1)
        index, mask, active = round_plan(self.train, ids.reshape(-1), self.steps, self.epochs, self.batch_size,
                                         self.seed, np.repeat(rounds, ids.shape[1]))
        sizes = self.train.sizes[ids].astype(np.int64)  # [rounds, n]
        own_steps = plan_schedule(sizes.reshape(-1), self.steps, self.epochs, self.batch_size)[3]
        num_steps = own_steps.reshape(sizes.shape).max(1)
        widths = np.minimum(self.batch_size, sizes.max(1))
        n = ids.shape[1]
        self._draws = {int(r): d for r, d in zip(rounds, draws, strict=True)}
        self._cuts = {int(r): (s, slice(k * n, (k + 1) * n), width)
                      for k, (r, s, width) in enumerate(zip(rounds, num_steps.tolist(), widths.tolist(), strict=True))}
        self._plans = {r: (ids[k], (index[:s, cols, :width], mask[:s, cols, :width], active[:s, cols]))
                       for k, (r, (s, cols, width)) in enumerate(self._cuts.items())}
        self._block = (index, mask, active, None)
