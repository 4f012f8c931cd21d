"""FLTrust (Cao, Fang, Liu, Gong, "FLTrust: Byzantine-robust Federated Learning via Trust Bootstrapping",
NDSS 2021, Algorithm 1): the server trains on a small clean root dataset and trusts each client's update as
far as it points the same way as the server's own."""

from __future__ import annotations

import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators.base import RoundDraw, aggregator, check_common, check_updates


def check_fltrust(n: int, f: int, *, root_size: int = 100) -> None:
    check_common(n, f)
    if isinstance(root_size, bool) or not isinstance(root_size, int) or root_size < 1:
        raise ConfigError(f"fltrust needs a whole number root_size >= 1 (samples in the server's root dataset), "
                          f"got {root_size!r}")


@aggregator("fltrust", check=check_fltrust, needs_round=True, needs_root=True, device_reads=("device_data",))
def fltrust(
    updates: torch.Tensor, *, weights: torch.Tensor, losses: torch.Tensor | None, f: int, root_size: int = 100,
    round: RoundDraw | None = None,
) -> torch.Tensor:
    """FLTrust (Cao et al., NDSS 2021, Algorithm 1) with the server update g0 = ``round.root_update``: trust
    scores TS_i = ReLU(cos(g_i, g0)) (0 for a zero update), each g_i rescaled to norm ||g0||, and the
    aggregate sum_i TS_i ||g0|| / ||g_i|| g_i / sum_i TS_i (the zero update where every TS_i is 0). The
    engine computes g0 each round (``engine.root_update``): ``root_size`` samples (default 100, the paper's)
    drawn once per trial from the benign clients' training data, trained from the round's global model with
    the clients' local schedule (steps or epochs, batch size, learning rate) by plain SGD. f and the
    aggregation weights are not read. Called without a root update, the rule raises ConfigError."""
    n = check_updates(updates, f)
    check_fltrust(n, f, root_size=root_size)
    if round is None or round.root_update is None:
        raise ConfigError("fltrust needs the server's update on its root dataset (RoundDraw.root_update), "
                          "which the engine computes each round; a direct call must pass a RoundDraw with one")
    g0 = round.root_update.to(device=updates.device, dtype=updates.dtype).reshape(-1)
    if g0.shape[0] != updates.shape[1]:
        raise ConfigError(f"fltrust's root update has {g0.shape[0]} entries; the updates have {updates.shape[1]}")
    norms, g0_norm = updates.norm(dim=1), g0.norm()
    positive = (norms > 0) & (g0_norm > 0)
    safe = torch.where(positive, norms, torch.ones_like(norms))
    trust = torch.where(positive, (updates @ g0) / (safe * g0_norm), torch.zeros_like(norms)).clamp_min(0)
    if not bool(trust.sum() > 0):
        return updates.new_zeros(updates.shape[1])
    return (trust * g0_norm / safe / trust.sum()) @ updates
