"""The parts of a synchronous round a deployment changes (``fedarena.system``): who can be drawn, how many local steps
each drawn device runs (a straggler fewer), as the engine plans them. Each is the identity for the lab's rounds."""

from __future__ import annotations

import numpy as np
import torch

from fedarena.models.batch import Batch
from fedarena.simulation.data import Pooled, plan_schedule
from fedarena.simulation.setup import Trial


def unavailable_or(away: np.ndarray | None, excluded: np.ndarray | None, population: int) -> np.ndarray | None:
    """Who cannot be drawn: the devices unavailable in the round (``away`` [1, devices]) or removed by the rule."""
    if away is None:
        return excluded
    mask = np.zeros(population, dtype=bool)
    mask[: away.shape[1]] = away[0]
    if excluded is not None:  # a rule's table covers the ids it has seen (FLDetector's)
        mask[: len(excluded)] |= excluded[:population]
    return mask


def within_budget(every: Batch, budget: np.ndarray | None) -> Batch:
    """The round's minibatches with each client's steps past its budget inactive (a step of rate 0)."""
    if budget is None:
        return every
    step_no = torch.arange(every.active.shape[0], device=every.active.device)[:, None]
    within = step_no < torch.as_tensor(budget, device=every.active.device)
    return Batch(every.x, every.y, every.mask, every.active * within, every.index)


def epoch_steps(pool: Pooled, group: np.ndarray, batch_size: int, device: torch.device) -> torch.Tensor:
    """[n] minibatch steps in one epoch of each client: ceil(size / min(B, size)) (``client_batches``)."""
    sizes = pool.sizes[group]
    batches = -(-sizes // np.maximum(np.minimum(batch_size, sizes), 1))
    return torch.as_tensor(batches, device=device)


def budgets(trial: Trial, pool: Pooled, ids: np.ndarray, round_idx: int) -> np.ndarray | None:
    """[len(ids)] local steps each drawn device runs (stragglers fewer), or None: every device its whole plan."""
    cfg = trial.cfg
    if trial.participation.spec.stragglers == 0 or not len(ids):
        return None
    steps = plan_schedule(pool.sizes[ids], cfg.local_steps, cfg.local_epochs, cfg.batch_size)[3]
    per_epoch = epoch_steps(pool, ids, cfg.batch_size, torch.device("cpu")).numpy()
    return trial.participation.budgets(ids, round_idx, steps, cfg.local_epochs, per_epoch)


def of_group(budget: np.ndarray | None, ids: np.ndarray, group: np.ndarray) -> np.ndarray | None:
    """A backend group's entries of the round's budgets (``ids`` sorted)."""
    return None if budget is None else budget[np.searchsorted(ids, group)]
