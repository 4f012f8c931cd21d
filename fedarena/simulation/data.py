"""Client data pooled into a few device tensors, minibatch plans, and batched gathers.

Every client's split is a contiguous block of one pooled tensor, so a minibatch for many clients is a
single index into it: ``x[idx]`` with ``idx`` of shape [n, B]. Clients with fewer than B samples get
padded slots (mask 0). Batch order depends only on (seed, round, client), never on the backend, so
the sequential and batched backends, and a resumed run, see the same minibatches.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from fedarena.datasets.base import FederatedDataset
from fedarena.models.batch import Batch
from fedarena.simulation.streams import SAMPLING, TRAIN, stream


def drawn_clients(seed: int, sampling: str, sizes: np.ndarray, per_round: int, round_idx: int) -> np.ndarray:
    """The clients of round ``round_idx`` in the order drawn (Ditto Algorithm 2): without replacement, with
    probability proportional to the training ``sizes`` (``sampling`` proportional) or uniformly, keyed by (seed,
    SAMPLING, round)."""
    rng = stream(seed, SAMPLING, round_idx)
    weights = np.asarray(sizes, dtype=np.float64)
    p = weights / weights.sum() if sampling == "proportional" else None
    return rng.choice(len(weights), size=per_round, replace=False, p=p)


def most_participation(seed: int, sampling: str, sizes: np.ndarray, per_round: int, rounds: int) -> np.ndarray:
    """[rounds + 1]: after t rounds, the most rounds any one client has been drawn in (local DP's accounting)."""
    counts = np.zeros(len(sizes), dtype=np.int64)
    most = [0]
    for t in range(rounds):
        counts[drawn_clients(seed, sampling, sizes, per_round, t)] += 1
        most.append(int(counts.max()))
    return np.asarray(most)


@dataclass(frozen=True)
class Pooled:
    """One split of every client, concatenated. ``offsets[k]:offsets[k] + sizes[k]`` is client k."""

    x: torch.Tensor
    y: torch.Tensor
    offsets: np.ndarray
    sizes: np.ndarray
    owner: torch.Tensor  # [N] client id of every sample

    @classmethod
    def from_dataset(cls, ds: FederatedDataset, split: str, device: torch.device) -> Pooled:
        parts = [getattr(c, split) for c in ds.clients]
        sizes = np.array([len(p) for p in parts], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        owner = torch.repeat_interleave(torch.arange(len(parts)), torch.as_tensor(sizes))
        x = torch.cat([p.x for p in parts]).to(device)
        y = torch.cat([p.y for p in parts]).to(device)
        return cls(x, y, offsets, sizes, owner.to(device))

    def rows(self, ids: np.ndarray) -> torch.Tensor:
        """Pooled positions of every sample of the clients ``ids``."""
        idx = np.concatenate([np.arange(self.offsets[k], self.offsets[k] + self.sizes[k]) for k in ids])
        return torch.as_tensor(idx, device=self.x.device)

    def with_rows_replaced(self, ids: np.ndarray, corrupt, malicious: np.ndarray, gen: torch.Generator) -> Pooled:
        """A copy whose clients ``ids`` hold ``corrupt``-ed data (persistent outliers, drawn anew each round)."""
        rows = self.rows(ids)
        owner = self.owner[rows]
        bad = torch.as_tensor(malicious, device=self.x.device)[owner]
        x_new, y_new = corrupt(self.x[rows], self.y[rows], owner, bad, gen)
        return replace(self, x=self.x.index_put((rows,), x_new), y=self.y.index_put((rows,), y_new))

    def padded_index(self, ids: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """[n, max size] indices of the clients' whole splits, and the mask of real entries."""
        width = max(int(self.sizes[ids].max()), 1)
        pos = np.arange(width)[None, :]
        real = pos < self.sizes[ids][:, None]
        idx = self.offsets[ids][:, None] + np.where(real, pos, 0)
        return torch.as_tensor(idx, device=self.x.device), torch.as_tensor(real, device=self.x.device)


def client_batches(size: int, steps: int, epochs: int, batch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Minibatch positions (into the client's own split) for one round.

    Step mode (epochs == 0): ``steps`` full batches of min(B, size), each from within one permutation (a new
    permutation once fewer than B samples are left in the current one, as the reference's batch generator),
    so no batch holds a sample twice. Epoch mode: ``epochs`` passes, each a permutation cut into
    ceil(size / B) batches (the last one partial).
    """
    b = min(batch_size, size)
    if epochs:
        return [perm[i : i + b] for perm in (rng.permutation(size) for _ in range(epochs)) for i in range(0, size, b)]
    per_pass = size // b
    perms = [rng.permutation(size) for _ in range(-(-steps // per_pass))]
    return [perms[i // per_pass][(i % per_pass) * b : (i % per_pass + 1) * b] for i in range(steps)]


def round_plan(
    pooled: Pooled, ids: np.ndarray, steps: int, epochs: int, batch_size: int, seed: int, round_idx: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pooled indices [S, n, B], sample mask [S, n, B] and step activity [S, n] for clients ``ids``."""
    plans = [
        client_batches(int(pooled.sizes[k]), steps, epochs, batch_size,
                       stream(seed, TRAIN, round_idx, int(k)))
        for k in ids
    ]
    num_steps = max(len(p) for p in plans)
    width = min(batch_size, int(pooled.sizes[ids].max()))
    index = np.zeros((num_steps, len(ids), width), dtype=np.int64)
    mask = np.zeros((num_steps, len(ids), width), dtype=np.float32)
    for j, (k, plan) in enumerate(zip(ids, plans, strict=True)):
        index[:, j, :] = pooled.offsets[k]  # padded slots point at a real sample of the client
        for s, pos in enumerate(plan):
            index[s, j, : len(pos)] += pos
            mask[s, j, : len(pos)] = 1.0
    active = (mask.sum(-1) > 0).astype(np.float32)
    dev = pooled.x.device
    return torch.as_tensor(index, device=dev), torch.as_tensor(mask, device=dev), torch.as_tensor(active, device=dev)


def gather(pooled: Pooled, index: torch.Tensor, mask: torch.Tensor, active: torch.Tensor) -> Batch:
    return Batch(pooled.x[index], pooled.y[index], mask.to(pooled.x.dtype), active.to(pooled.x.dtype), index)


def gather_all(pooled: Pooled, ids: np.ndarray) -> Batch:
    """Every sample of the clients' split as one padded batch (validation losses, global-model losses)."""
    index, real = pooled.padded_index(ids)
    mask = real.to(pooled.x.dtype)
    return Batch(pooled.x[index], pooled.y[index], mask, torch.ones(len(ids), device=mask.device), index)
