"""MOCHA (Smith, Chiang, Sanjabi, Talwalkar: "Federated Multi-Task Learning", NeurIPS 2017), the row of
Ditto Table 2 for convex models: one linear SVM per device, tied by a learned task-relationship matrix.

Objective, with W = [w_1 .. w_K] (one column per device, bias included as a constant feature):

    min_{W, Sigma}  sum_t mean_i hinge(y_i^t w_t . x_i^t) + (lam / 2) tr(W Sigma^-1 W^T),

Sigma >= 0 with tr(Sigma) = 1 (Zhang & Yeung's task covariance; Omega = Sigma^-1). ``mode: paper`` (the
default) solves it in the engine's federated rounds, the paper's Algorithm 1 with the update rules of the
authors' code (gingsmith/fmtl, ``opt/run_mocha.m``) but not its schedule:

- W step, each round: every selected device t runs SDCA on its hinge-loss dual variables alpha^t, one
  coordinate per training sample of the round's minibatches (closed-form coordinate step with the
  device's Sigma_tt and the safety factor rho = max_t sum_s |Sigma_ts| / Sigma_tt), and sends the dual
  change dB_t = sum (alpha_new - alpha_old) x / n_t. The server moves every device's model:
  w_t <- w_t + sum_{s selected} Sigma_ts dB_s / lam.
- Sigma step, every ``omega_every`` rounds: Sigma = (W^T W)^(1/2) / tr((W^T W)^(1/2)) (eigenvalues
  clipped at 1e-7).

``mode: reference`` computes what ``run_mocha.m`` does (run by ``model_driver.m``) where that differs:

- participation: every device takes its SDCA steps in every W step (the task loop ``for t = 1:m``); the
  method hooks see only the round's selected devices' data, so this mode needs clients_per_round = the
  number of devices (refused before training otherwise);
- coordinates: floor(n_t * ``sdca_frac``) per device and W step (``local_iters = n(t) *
  opts.mocha_sdca_frac``; ``model_driver.m`` sets 0.5), visited in the order of a fresh permutation of the
  device's samples, without repeats (``tperm = randperm(n(t))``, ``idx = tperm(mod(s, n(t)) + 1)``). The
  permutation here is the round's epoch plan of the engine (keyed by seed, round and device), so this mode
  needs ``local_epochs`` >= 1; its first floor(n_t * sdca_frac) samples get a step, the rest none;
- no bias: ``run_mocha.m`` uses the features as given, so the SVM's bias parameter stays at 0;
- Sigma step: the eigenvalues of W^T W are raised to 1e-7 (those <= 1e-7) only when one is negative,
  else Sigma is the exact square root (``sqrtm``) of W^T W, normalised;
- lam: ``model_driver.m`` picks it by 5-fold cross-validation (``util/cross_val_1.m``) over {1e-5, 1e-4,
  1e-3, 0.01, 0.1, 10}, scoring each by the test error its ``run_mocha`` returns last (10 outer x 100 W
  steps, sdca_frac 0.5; the error before the last outer iteration). Not run here: the default is
  ``REFERENCE_LAM`` = 10, what that code picks on Ditto's Vehicle training split (litian96/ditto,
  ``data/vehicle/data/train/mytrain.json``, re-run in NumPy over three permutation seeds, all agreeing).
  As coded, ``cross_val_1.m`` resets its scores inside the fold loop, so only the 5th fold decides; the
  mean over the 5 folds would pick 0.01.

Models start at zero and Sigma at I / K (rho = 1), as in the authors' code. There is no global model and no
server aggregator (the combination through Sigma is the server rule); a model attack acts on the dual
changes. The server step moves every device's model, so the engine's roll-back of a non-finite round
(which restores the selected devices' rows) does not undo it for the others.
"""

from __future__ import annotations

import numpy as np
import torch

from fedarena.errors import ConfigError
from fedarena.methods.base import Method, ServerInfo, StepContext, method
from fedarena.methods.paper_or_reference import check_mode
from fedarena.models.batch import Batch

EIGEN_FLOOR = 1e-7  # the authors' clip of W^T W's eigenvalues before the matrix square root
PAPER_LAM = 0.001
REFERENCE_LAM = 10.0  # what model_driver.m's cross-validation picks on Ditto's Vehicle training split
REFERENCE_SDCA_FRAC = 0.5  # model_driver.m: opts.mocha_sdca_frac


def relationship(personal: torch.Tensor) -> torch.Tensor:
    """Sigma = (W^T W)^(1/2) / tr((W^T W)^(1/2)) from the [K, d] models (rows are the w_t)."""
    gram = (personal @ personal.T).double()
    values, vectors = torch.linalg.eigh(gram)
    root = vectors @ torch.diag(values.clamp_min(EIGEN_FLOOR).sqrt()) @ vectors.T
    return (root / root.trace()).to(personal.dtype)


def reference_root(gram: torch.Tensor) -> torch.Tensor:
    """``run_mocha.m``'s sqrtm(A) of A = W^T W [K, K]: only if an eigenvalue of A is negative are those
    <= 1e-7 raised to 1e-7 first (for symmetric A >= 0, sqrtm(A) = V sqrt(D) V^T)."""
    values, vectors = torch.linalg.eigh(gram)
    if bool((values < 0).any()):
        values = torch.where(values <= EIGEN_FLOOR, torch.full_like(values, EIGEN_FLOOR), values)
    return vectors @ torch.diag(values.sqrt()) @ vectors.T


def relationship_reference(personal: torch.Tensor) -> torch.Tensor:
    """``run_mocha.m``'s Sigma step: Sigma = sqrtm(W^T W) / tr(sqrtm(W^T W)), the clip as ``reference_root``."""
    w = personal.double()
    root = reference_root(w @ w.T)
    return (root / root.trace()).to(personal.dtype)


def safety(sigma: torch.Tensor) -> torch.Tensor:
    """rho = max_t sum_s |Sigma_ts| / Sigma_tt (the authors' bound on how far local steps may go)."""
    return (sigma.abs().sum(1) / sigma.diagonal()).max()


def with_bias(x: torch.Tensor, bias: float = 1.0) -> torch.Tensor:
    """[n, d_in] features with a constant ``bias`` appended: 1, the SVM's bias is the last flat parameter;
    0, no bias (``run_mocha.m``), so that parameter never moves from 0."""
    return torch.cat([x.flatten(1), torch.full_like(x[:, :1].flatten(1), bias)], dim=1)


def within_budget(real: torch.Tensor, seen: torch.Tensor, budget: torch.Tensor) -> torch.Tensor:
    """[n, B] the real samples of the minibatch among each device's first ``budget`` real samples of the
    round (``seen`` [n]: its real samples in the round's earlier minibatches)."""
    position = seen[:, None] + real.long().cumsum(1) - 1
    return real & (position < budget[:, None])


@method("mocha")
class Mocha(Method):
    """MOCHA (see the module docstring). ``lam`` > 0: weight of the task-relationship regulariser (None: 0.001
    in ``paper`` mode, ``REFERENCE_LAM`` in ``reference`` mode; the authors pick it by 5-fold
    cross-validation in {1e-5, 1e-4, 1e-3, 0.01, 0.1, 10}); ``omega_every``: rounds between updates of the
    relationship matrix (their driver: 100 W steps per Sigma step); ``mode``: ``paper`` or ``reference``;
    ``sdca_frac`` in (0, 1], ``reference`` mode only: coordinates per device and round, as a fraction of its
    training samples (None: the driver's 0.5)."""

    evaluates = "personal"
    uses_aggregator = False
    sends_updates = True  # no global rule, but each device's dual update goes to the server, which applies it
    tasks = ("binary_pm1",)  # the hinge-loss dual of a linear SVM with labels -1/+1
    models = ("svm",)

    def __init__(self, *, lam: float | None = None, omega_every: int = 100, mode: str = "paper",
                 sdca_frac: float | None = None):
        self.mode = check_mode(self.name, mode)
        lam = (PAPER_LAM if mode == "paper" else REFERENCE_LAM) if lam is None else lam
        if lam <= 0 or omega_every < 1:
            raise ConfigError(f"mocha needs lam > 0 and omega_every >= 1; got lam={lam}, omega_every={omega_every}")
        if mode == "paper" and sdca_frac is not None:
            raise ConfigError("mocha sdca_frac applies to mode=reference; mode=paper takes a coordinate step for "
                              "every sample of the round's minibatches")
        frac = REFERENCE_SDCA_FRAC if sdca_frac is None else sdca_frac
        if not 0 < frac <= 1:
            raise ConfigError(f"mocha sdca_frac must be in (0, 1], got {sdca_frac}")
        self.lam, self.omega_every, self.sdca_frac = float(lam), int(omega_every), float(frac)
        self.bias = 1.0 if mode == "paper" else 0.0

    def check_schedule(self, clients_per_round: int, local_epochs: int, num_clients: int) -> None:
        if self.mode == "paper":
            return
        if clients_per_round != num_clients:
            raise ConfigError(f"mocha mode=reference trains every device in every round (run_mocha.m); set "
                              f"clients_per_round to the number of devices ({num_clients}), got {clients_per_round}")
        if local_epochs < 1:
            raise ConfigError("mocha mode=reference takes its coordinates from the round's epoch (a permutation "
                              "of each device's samples); set local_epochs >= 1")

    def init_clients(self, w: torch.Tensor, sizes: np.ndarray) -> dict[str, torch.Tensor]:
        k = len(sizes)
        return {"personal": torch.zeros(k, len(w), dtype=w.dtype, device=w.device),
                "sigma": torch.eye(k, dtype=w.dtype, device=w.device) / k,
                "alpha": torch.zeros(int(sizes.sum()), dtype=w.dtype, device=w.device)}  # per training sample

    def local_init(self, w: torch.Tensor, clients: dict, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        sigma = clients["sigma"]
        local = {"w": clients["personal"][ids], "dw": torch.zeros_like(clients["personal"][ids]),
                 "db": torch.zeros_like(clients["personal"][ids]), "alpha": clients["alpha"].clone(),
                 "sigma_tt": sigma.diagonal()[ids], "rho": safety(sigma)}
        if self.mode == "reference":
            local["seen"] = torch.zeros(len(ids), dtype=torch.long, device=ids.device)
        return local

    def local_step(self, local: dict, batch: Batch, ctx: StepContext) -> dict[str, torch.Tensor]:
        """One SDCA coordinate step per real sample of the minibatch, in order (``reference``: only the
        device's first floor(n_t * sdca_frac) samples of the round's epoch)."""
        n_t = ctx.train_sizes.to(local["w"].dtype)
        real = (batch.mask * batch.active[:, None]) > 0
        if self.mode == "reference":
            real, local = self._reference_coordinates(local, real, ctx)
            if not bool(real.any()):
                return local
        for j in range(batch.y.shape[1]):
            local = self._coordinate_step(local, with_bias(batch.x[:, j], self.bias), batch.y[:, j],
                                          batch.index[:, j], real[:, j], n_t)
        return local

    def _reference_coordinates(self, local: dict, real: torch.Tensor, ctx: StepContext):
        """(the minibatch's samples that get a step, local with them counted): the first floor(n_t *
        sdca_frac) samples of the round's first epoch, a permutation of the device's training samples."""
        budget = torch.floor(ctx.train_sizes.double() * self.sdca_frac).long()
        real = within_budget(real, local["seen"], budget)
        return real, {**local, "seen": local["seen"] + real.sum(1)}

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
            update = relationship if self.mode == "paper" else relationship_reference
            clients["sigma"].copy_(update(personal))
        return w, clients
