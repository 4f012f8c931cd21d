"""FedProx (Li, Sahu, Zaheer, Sanjabi, Talwalkar, Smith, MLSys 2020).

Each selected client minimises F_k(w_k) + (mu/2) ||w_k - w^t||^2 from w_k = w^t with the round's local
minibatch SGD steps (gradient grad F_k(w_k) + mu (w_k - w^t)); the server aggregates w_k - w^t with the
configured rule. The inexactness of the local solve is the engine's number of local steps/epochs, fewer for a
straggler (the ``system`` section's ``stragglers`` with ``straggler_policy: include``, the paper's setting;
``fedarena.examples.fedprox_stragglers`` runs its synthetic experiment). mu = 0 is FedAvg, step for step.
"""

from __future__ import annotations

from fedarena.errors import ConfigError
from fedarena.methods.base import Method, StepContext, method, sgd
from fedarena.models.batch import Batch
from fedarena.search_space import log_uniform


@method("fedprox", search={"mu": log_uniform(0.001, 1.0)})
class FedProx(Method):
    """FedProx's local solver: SGD on F_k(w_k) + (mu/2) ||w_k - w^t||^2 (see the module docstring).
    ``mu`` >= 0: weight of the proximal term (FedProx paper tunes it in {0.001, 0.01, 0.1, 1})."""

    def __init__(self, *, mu: float = 0.01):
        if mu < 0:
            raise ConfigError(f"fedprox mu must be >= 0, got {mu}")
        self.mu = float(mu)

    def local_step(self, local: dict, batch: Batch, ctx: StepContext) -> dict:
        _, g = ctx.backend.grad(local["w"], batch)
        if self.mu:
            g = g + self.mu * (local["w"] - ctx.w_round)
        return {**local, "w": sgd(local["w"], g, ctx.lr, batch.active)}

