"""MOCHA (Smith, Chiang, Sanjabi, Talwalkar: "Federated Multi-Task Learning", NeurIPS 2017), the row of
Ditto Table 2 for convex models: one linear SVM per device, tied by a learned task-relationship matrix.

Objective, with W = [w_1 .. w_K] (one column per device, bias included as a constant feature):

    min_{W, Sigma}  sum_t mean_i hinge(y_i^t w_t . x_i^t) + (lam / 2) tr(W Sigma^-1 W^T),

Sigma >= 0 with tr(Sigma) = 1 (Zhang & Yeung's task covariance; Omega = Sigma^-1). As the authors' code
(gingsmith/fmtl, ``opt/run_mocha.m``) solves it:

- W step, each round: every selected device t runs SDCA on its hinge-loss dual variables alpha^t, one
  coordinate per training sample of the round's minibatches (closed-form coordinate step with the
  device's Sigma_tt and the safety factor rho = max_t sum_s |Sigma_ts| / Sigma_tt), and sends the dual
  change dB_t = sum (alpha_new - alpha_old) x / n_t. The server moves every device's model:
  w_t <- w_t + sum_{s selected} Sigma_ts dB_s / lam.
- Sigma step, every ``omega_every`` rounds: Sigma = (W^T W)^(1/2) / tr((W^T W)^(1/2)) (eigenvalues
  clipped at 1e-7).

Models start at zero and Sigma at I / K, as in the authors' code. There is no global model and no server
aggregator (the combination through Sigma is the server rule); a model attack acts on the dual changes.
The server step moves every device's model, so the engine's roll-back of a non-finite round (which
restores the selected devices' rows) does not undo it for the others.
"""

from __future__ import annotations

import numpy as np
import torch

from fedarena.methods.base import Method, ServerInfo, StepContext, method
from fedarena.models.batch import Batch
from fedarena.params import ConfigError

EIGEN_FLOOR = 1e-7  # the authors' clip of W^T W's eigenvalues before the matrix square root


def relationship(personal: torch.Tensor) -> torch.Tensor:
    """Sigma = (W^T W)^(1/2) / tr((W^T W)^(1/2)) from the [K, d] models (rows are the w_t)."""
    gram = (personal @ personal.T).double()
    values, vectors = torch.linalg.eigh(gram)
    root = vectors @ torch.diag(values.clamp_min(EIGEN_FLOOR).sqrt()) @ vectors.T
    return (root / root.trace()).to(personal.dtype)


def safety(sigma: torch.Tensor) -> torch.Tensor:
    """rho = max_t sum_s |Sigma_ts| / Sigma_tt (the authors' bound on how far local steps may go)."""
    return (sigma.abs().sum(1) / sigma.diagonal()).max()


def with_bias(x: torch.Tensor) -> torch.Tensor:
    """[n, d_in] features with a constant 1 appended (the SVM's bias is the last flat parameter)."""
    return torch.cat([x.flatten(1), torch.ones_like(x[:, :1].flatten(1))], dim=1)


@method("mocha")
class Mocha(Method):
    """MOCHA (see the module docstring). ``lam`` > 0: weight of the task-relationship regulariser (the
    authors pick it by 5-fold cross-validation in {1e-5, 1e-4, 1e-3, 0.01, 0.1, 10}); ``omega_every``:
    rounds between updates of the relationship matrix (their driver: 100 W steps per Sigma step)."""

    evaluates = "personal"
    uses_aggregator = False
    tasks = ("binary_pm1",)  # the hinge-loss dual of a linear SVM with labels -1/+1
    models = ("svm",)

    def __init__(self, *, lam: float = 0.001, omega_every: int = 100):
        if lam <= 0 or omega_every < 1:
            raise ConfigError(f"mocha needs lam > 0 and omega_every >= 1; got lam={lam}, omega_every={omega_every}")
        self.lam, self.omega_every = float(lam), int(omega_every)

    def init_clients(self, w: torch.Tensor, sizes: np.ndarray) -> dict[str, torch.Tensor]:
        k = len(sizes)
        return {"personal": torch.zeros(k, len(w), dtype=w.dtype, device=w.device),
                "sigma": torch.eye(k, dtype=w.dtype, device=w.device) / k,
                "alpha": torch.zeros(int(sizes.sum()), dtype=w.dtype, device=w.device)}  # per training sample

    def local_init(self, w: torch.Tensor, clients: dict, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        sigma = clients["sigma"]
        return {"w": clients["personal"][ids], "dw": torch.zeros_like(clients["personal"][ids]),
                "db": torch.zeros_like(clients["personal"][ids]), "alpha": clients["alpha"].clone(),
                "sigma_tt": sigma.diagonal()[ids], "rho": safety(sigma)}

    def local_step(self, local: dict, batch: Batch, ctx: StepContext) -> dict[str, torch.Tensor]:
        """One SDCA coordinate step per real sample of the minibatch, in order."""
        n_t = ctx.train_sizes.to(local["w"].dtype)
        for j in range(batch.y.shape[1]):
            real = (batch.mask[:, j] * batch.active) > 0
            local = self._coordinate_step(local, with_bias(batch.x[:, j]), batch.y[:, j], batch.index[:, j],
                                          real, n_t)
        return local

    def _coordinate_step(self, local: dict, x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor,
                         real: torch.Tensor, n_t: torch.Tensor) -> dict[str, torch.Tensor]:
        alpha, rho, s_tt = local["alpha"], local["rho"], local["sigma_tt"]
        old = alpha[idx]
        margin = y * (x * (local["w"] + rho * local["dw"])).sum(1)
        step = self.lam * n_t * (1 - margin) / (s_tt * rho * (x * x).sum(1)) + old * y
        new = torch.where(real, y * step.clamp(0.0, 1.0), old)
        change = (new - old)[:, None] * x
        alpha = alpha.index_put((idx,), new)
        return {**local, "alpha": alpha, "dw": local["dw"] + s_tt[:, None] * change / (self.lam * n_t[:, None]),
                "db": local["db"] + change / n_t[:, None]}

    def local_result(self, local: dict, w: torch.Tensor, clients: dict, ids: torch.Tensor):
        clients["alpha"].copy_(local["alpha"])  # the group's samples changed; other clients' are as they were
        return local["db"], clients

    def server_step(self, w, clients, updates, info: ServerInfo, aggregate):
        personal = clients["personal"]
        personal.add_(clients["sigma"][:, info.ids] @ updates.to(personal.dtype) / self.lam)
        if (info.round + 1) % self.omega_every == 0:
            clients["sigma"].copy_(relationship(personal))
        return w, clients
