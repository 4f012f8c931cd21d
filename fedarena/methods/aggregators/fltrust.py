"""FLTrust (Cao, Fang, Liu, Gong, "FLTrust: Byzantine-robust Federated Learning via Trust Bootstrapping",
NDSS 2021, Algorithm 1): the server trains on a small clean root dataset and trusts each client's update as
far as it points the same way as the server's own."""

from __future__ import annotations

import numpy as np
import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators.base import RoundDraw, aggregator, check_common, check_updates
from fedarena.round_inputs import RoundView, round_input
from fedarena.streams import AGGREGATE, stream

ROOT_SET = 2**31 - 1  # key of the root set's draw in the stream AGGREGATE (whose other keys are rounds)


def root_set(trial) -> tuple[torch.Tensor, torch.Tensor]:
    """The server's root dataset (x, y), made once per trial: ``root_size`` training samples (all of them where
    fewer exist) drawn without replacement (stream AGGREGATE, key ROOT_SET) from the benign clients' training data."""
    train, rule = trial.train, trial.aggregate
    benign = np.flatnonzero(~np.asarray(trial.threat.malicious, dtype=bool)[train.owner.cpu().numpy()])
    size = min(int(rule.params.get("root_size", 100)), len(benign))
    if size < 1:
        raise ConfigError(f"aggregator {rule.name!r} needs a root dataset drawn from the benign clients' "
                          "training data, and they have none")
    rows = torch.as_tensor(stream(trial.cfg.seed, AGGREGATE, ROOT_SET).choice(benign, size=size, replace=False),
                           device=train.x.device)
    return train.x[rows], train.y[rows]


@round_input("root_update", prepare=root_set, device_reads=("device_data",),
             stand_in=lambda updates: updates.mean(dim=0))
def root_update(view: RoundView) -> torch.Tensor:
    """FLTrust's server update g0 [d]: the round's global model trained on the root set with the devices' local
    schedule, minibatches planned from the stream (AGGREGATE, round, 1)."""
    x, y = view.prepared
    return view.train(x, y, int(stream(view.seed, AGGREGATE, view.round, 1).integers(2**62)))


def check_fltrust(n: int, f: int, *, root_size: int = 100) -> None:
    check_common(n, f)
    if isinstance(root_size, bool) or not isinstance(root_size, int) or root_size < 1:
        raise ConfigError(f"fltrust needs a whole number root_size >= 1 (samples in the server's root dataset), "
                          f"got {root_size!r}")


@aggregator("fltrust", check=check_fltrust, reads=("round", "root_update"))
def fltrust(
    updates: torch.Tensor, *, weights: torch.Tensor, losses: torch.Tensor | None, f: int, root_size: int = 100,
    round: RoundDraw | None = None,
) -> torch.Tensor:
    """FLTrust (Cao et al., NDSS 2021, Algorithm 1) with the server update g0, the round input ``root_update``: trust
    scores TS_i = ReLU(cos(g_i, g0)) (0 for a zero update), each g_i rescaled to norm ||g0||, and the
    aggregate sum_i TS_i ||g0|| / ||g_i|| g_i / sum_i TS_i (the zero update where every TS_i is 0). g0 is
    computed each round (``root_update``, above): ``root_size`` samples (default 100, the paper's)
    drawn once per trial from the benign clients' training data, trained from the round's global model with
    the clients' local schedule (steps or epochs, batch size, learning rate) by plain SGD. f and the
    aggregation weights are not read. Called without a root update, the rule raises ConfigError."""
    n = check_updates(updates, f)
    check_fltrust(n, f, root_size=root_size)
    g0 = None if round is None else round.input("root_update")
    if g0 is None:
        raise ConfigError("fltrust needs the server's update on its root dataset (the round input 'root_update'), "
                          "which the engine computes each round; a direct call must pass a RoundDraw with one")
    g0 = g0.to(device=updates.device, dtype=updates.dtype).reshape(-1)
    if g0.shape[0] != updates.shape[1]:
        raise ConfigError(f"fltrust's root update has {g0.shape[0]} entries; the updates have {updates.shape[1]}")
    norms, g0_norm = updates.norm(dim=1), g0.norm()
    positive = (norms > 0) & (g0_norm > 0)
    safe = torch.where(positive, norms, torch.ones_like(norms))
    trust = torch.where(positive, (updates @ g0) / (safe * g0_norm), torch.zeros_like(norms)).clamp_min(0)
    if not bool(trust.sum() > 0):
        return updates.new_zeros(updates.shape[1])
    return (trust * g0_norm / safe / trust.sum()) @ updates
