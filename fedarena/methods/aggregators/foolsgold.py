"""FoolsGold (Fung, Yoon, Beschastnikh, "The Limitations of Federated Learning in Sybil Settings", RAID 2020,
Algorithm 1): clients whose update histories point the same way (sybils) get low weight."""

from __future__ import annotations

import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators.base import RoundDraw, aggregator, check_common, check_updates, client_table
from fedarena.methods.aggregators.flame import cosine_distances

HISTORY = "foolsgold_history"  # the key of the [clients, d] table of summed updates in ``RoundDraw.server``
ROUNDING = 1e-9  # 1 - max cosine below this is rounding (float64 cosines err by ~1e-15): a twin, wv 0


def accumulate_history(updates: torch.Tensor, draw: RoundDraw | None) -> torch.Tensor:
    """Add the round's updates to their clients' rows of the history table ``server[HISTORY]`` and return
    those rows [n, d] (the selected clients' histories). The table is made on first use and grows to
    max(id) + 1 rows as higher ids appear; it is replaced, never modified in place. Without a draw, or a
    draw without ids / server (a direct call), the rows are clients 0..n-1 of a table of this call alone."""
    n, d = updates.shape
    ids = torch.arange(n) if draw is None or draw.ids is None else draw.ids
    ids = ids.to(device=updates.device, dtype=torch.long)
    server = {} if draw is None or draw.server is None else draw.server
    stored = server.get(HISTORY)
    if stored is not None and (stored.dim() != 2 or stored.shape[1] != d):
        raise ConfigError(f"foolsgold's history has shape {tuple(stored.shape)}; the updates have d = {d}")
    table = client_table(server, HISTORY, int(ids.max()) + 1, (d,), 0.0, updates).index_add(0, ids, updates)
    server[HISTORY] = table
    return table[ids]


def foolsgold_weights(histories: torch.Tensor) -> torch.Tensor:
    """[n] FoolsGold weights in [0, 1] of the clients with these histories (float64), as the authors'
    ``foolsgold`` function: cs = the pairwise cosine similarities with a zero diagonal (a zero history has
    cosine 0 with every other); v_i = max_j cs_ij; pardoning: cs_ij *= v_i / v_j where v_i < v_j;
    wv_i = 1 - max_j cs_ij clipped to [0, 1] (and set to 0 below 1e-9, ``ROUNDING``: in exact arithmetic a
    client with an identical twin has wv 0, which rounding would otherwise turn into a weight of 1 after the
    max-normalisation; the only departure from the reference); wv /= max(wv); the weights equal to 1 are set to 0.99; then
    the logit with confidence kappa = 1, ln(wv / (1 - wv)) + 0.5, clipped to [0, 1]. All zeros where
    max(wv) = 0 (every client has a twin)."""
    cs = 1 - torch.as_tensor(cosine_distances(histories), device=histories.device)
    cs.fill_diagonal_(0)
    top = cs.max(dim=1).values
    pardon = top[:, None] < top[None, :]
    cs = torch.where(pardon, cs * top[:, None] / torch.where(pardon, top[None, :], 1), cs)
    wv = (1 - cs.max(dim=1).values).clamp(0, 1)
    wv = torch.where(wv < ROUNDING, 0, wv)  # twins' cosine is 1 up to rounding, which max(wv) would magnify
    if not bool(wv.max() > 0):
        return torch.zeros_like(wv)
    wv = wv / wv.max()
    wv = torch.where(wv == 1, 0.99, wv)
    return (torch.log(wv / (1 - wv)) + 0.5).clamp(0, 1)  # log(0) = -inf: weight 0


def at_most_unit_norm(updates: torch.Tensor) -> torch.Tensor:
    """Every row scaled to L2 norm at most 1 (u / ||u|| where ||u|| > 1), as the reference code normalises a
    client's update before it enters the history and the aggregate."""
    norms = updates.norm(dim=1, keepdim=True)
    return torch.where(norms > 1, updates / norms.clamp_min(1e-30), updates)


@aggregator("foolsgold", check=check_common, reads=("round",), version=2, per_client=True)
def foolsgold(
    updates: torch.Tensor, *, weights: torch.Tensor, losses: torch.Tensor | None, f: int, unit_norm: bool = True,
    round: RoundDraw | None = None,
) -> torch.Tensor:
    """FoolsGold (Fung et al., RAID 2020, Algorithm 1 without its optional feature-importance weighting, as
    the authors' reference ``foolsgold`` function, confidence kappa = 1): each client's history H_i, the sum
    of all its updates so far (this round's included), kept in the server's state across rounds
    (``round.server``, keyed by the client ids ``round.ids``; checkpointed with the run); the weights
    ``foolsgold_weights`` of the selected clients' histories (cosine similarity, pardoning, max-normalisation,
    logit); the aggregate sum_i w_i u_i / sum_i w_i of the round's updates. The reference adds sum_i w_i u_i
    unnormalised; here the weights are normalised, so the result is a weighted mean (the uniform mean if every
    weight is 0). ``unit_norm`` (default, as the reference code, ``ML/code/ML_*.py``): every update is first
    scaled to L2 norm at most 1, and that is what the history sums and the aggregate averages; false: the
    raw updates (version 1's rule). f and the aggregation weights are not read. Called directly (no round),
    the histories are the updates themselves."""
    check_updates(updates, f)
    if unit_norm:
        updates = at_most_unit_norm(updates)
    trust = foolsgold_weights(accumulate_history(updates, round))
    if not bool(trust.sum() > 0):
        return updates.mean(dim=0)
    return (trust / trust.sum()).to(updates.dtype) @ updates
