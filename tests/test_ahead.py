"""The next rounds' draws and plans, computed several at a time, equal entry for entry to the ones each round
computes alone (random layouts, both samplings, step and epoch schedules, whole rounds and parts of them)."""

import numpy as np
import pytest
import torch

from fedarena.simulation.ahead import RoundsAhead
from fedarena.simulation.data import Pooled, drawn_clients, gather, round_plan


def random_pool(rng, clients):
    sizes = rng.integers(1, 40, clients).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    total = int(sizes.sum())
    owner = torch.repeat_interleave(torch.arange(clients), torch.as_tensor(sizes))
    return Pooled(torch.randn(total, 3), torch.zeros(total, dtype=torch.long), offsets, sizes, owner)


@pytest.mark.parametrize("case", range(8))
def test_rounds_ahead_equal_the_rounds_computed_alone(case):
    rng = np.random.default_rng(case)
    clients = int(rng.integers(5, 60))
    pool = random_pool(rng, clients)
    steps = int(rng.integers(0, 5))
    epochs = 0 if steps else int(rng.integers(1, 3))
    batch, per_round, seed = int(rng.integers(1, 20)), int(rng.integers(1, clients + 1)), int(rng.integers(100))
    sampling = ("uniform", "proportional")[case % 2]
    ahead = RoundsAhead(pool, seed, sampling, per_round, steps, epochs, batch)
    for t in range(2 * ahead.rounds + 3):
        drawn = ahead.drawn(t)
        assert np.array_equal(drawn, drawn_clients(seed, sampling, pool.sizes, per_round, t))
        ids = np.sort(drawn)
        for group in (ids, ids[::2]):  # the whole round (batched), part of it (sequential groups)
            cached = ahead.plan(pool, group, t, steps, epochs)
            alone = round_plan(pool, group, steps, epochs, batch, seed, t)
            assert all(a.shape == b.shape and torch.equal(a, b) for a, b in zip(cached, alone, strict=True))


def test_the_blocks_minibatches_are_each_rounds_own_gather():
    rng = np.random.default_rng(1)
    pool = random_pool(rng, 20)
    ahead = RoundsAhead(pool, 5, "proportional", 6, 3, 0, 8)
    for t in range(ahead.rounds + 2):
        ids = np.sort(ahead.drawn(t))
        cached = ahead.batches(pool, ids, t, 3, 0)
        alone = gather(pool, *round_plan(pool, ids, 3, 0, 8, 5, t))
        assert all(torch.equal(getattr(cached, f), getattr(alone, f)) for f in ("x", "y", "mask", "active", "index"))


def test_another_schedule_or_clients_are_planned_alone():
    rng = np.random.default_rng(0)
    pool = random_pool(rng, 12)
    ahead = RoundsAhead(pool, 3, "uniform", 4, 2, 0, 8)
    ahead.drawn(0)
    others = np.array([0, 1, 2])  # not the round's draw
    for steps, epochs, group in ((5, 0, np.sort(ahead.drawn(0))), (0, 1, np.sort(ahead.drawn(0))), (2, 0, others)):
        cached = ahead.plan(pool, group, 0, steps, epochs)
        alone = round_plan(pool, group, steps, epochs, 8, 3, 0)
        assert all(torch.equal(a, b) for a, b in zip(cached, alone, strict=True))
