"""What a federated method is: small pure functions over explicit state.

State is plain data: the global parameters ``w`` ([d]) and ``clients``, a dict of per-client tensors
(e.g. Ditto's personal models, ``[num_clients, d]``). Within a round the simulation hands a method the
selected clients' stacked ``local`` tensors ([n, d] each) and a ``StepContext``; the method returns new
tensors (only per-client tables are written in place, see ``scatter_rows``). The same code runs for one client or many at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from fedarena.models.backends import Backend
from fedarena.models.batch import Batch
from fedarena.params import SectionKind
from fedarena.registry import Registry

# aggregate(updates[n, d], weights[n], losses[n] | None, client_weights=p[n] | None) -> [d]: the configured
# server rule (defense), a ``methods.aggregators.Aggregator``
Aggregate = Callable[..., torch.Tensor]


@dataclass(frozen=True)
class StepContext:
    """What a local step may use besides its own state and minibatch."""

    backend: Backend
    lr: float
    w_round: torch.Tensor  # [d] the global model at the start of the round
    ids: torch.Tensor  # [n] the clients of this group
    val: Batch | None  # the group's whole validation sets (for methods that tune on them), else None
    strong_attack: bool  # Ditto D.2's "strong attack" (dynamic lambda candidates)
    train_sizes: torch.Tensor | None = None  # [n] training sample counts of the group's clients
    epoch_steps: torch.Tensor | None = None  # [n] steps in one epoch of each client (epoch mode), else None
    train: Batch | None = None  # the group's whole training sets (methods with ``needs_train``), else None


@dataclass(frozen=True)
class ServerInfo:
    """What the server side of a round may use besides the stacked updates."""

    weights: torch.Tensor  # [n] aggregation weights of the selected clients (ones under proportional sampling)
    losses: torch.Tensor | None  # [n] their training losses at the round-start global model, if needed
    ids: torch.Tensor  # [n] the selected clients
    lr: float  # the clients' learning rate (q-FFL's Lipschitz estimate L = 1 / lr)
    round: int = 0  # the round (0-based)


def sgd(params: torch.Tensor, grads: torch.Tensor, lr: float, active: torch.Tensor) -> torch.Tensor:
    """One SGD step per row; rows whose client has no real batch at this step stay as they are."""
    return torch.addcmul(params, (lr * active)[:, None], grads, value=-1.0)  # one fused pass over [n, d]


class Method:
    """FedAvg-shaped defaults; a method overrides what differs. A method is one class, registered with
    ``@method(name)``: its constructor's keyword-only arguments are its config keys (checked there)."""

    name = "method"
    evaluates = "global"  # "global" or "personal": which parameters score a client at evaluation
    uses_aggregator = True  # False: the method has no global aggregation (e.g. local training)
    needs_val = False  # True: StepContext.val is filled with the group's validation data
    needs_train = False  # True: StepContext.train is filled with the group's whole training data
    needs_losses = False  # True: server_step needs each client's training loss at the global model
    reweights_clients = False  # True: server_step weights the clients by their losses or updates (``client_weights``)
    # what server_step reads from the devices besides the update each sends (``fedarena.privacy.dp_trial.READS``):
    # "losses" (each device's training loss at the global model, computed on its data without noise; implied by
    # ``needs_losses``), "device_data" (raw training data, or a table the devices write from it); DP refuses a method
    # that reads what its noise does not cover. Local training (local_step, StepContext.val and .train) runs on the
    # device, before its update is clipped and noised, and is not a read.
    device_reads: tuple[str, ...] = ()
    adds_aggregate = True  # False: server_step's new global model is not w + the rule's output (L2SGD scales it)
    sends_updates: bool | None = None  # whether a drawn device sends the server its update (None: uses_aggregator)
    finalize_epochs = 0  # > 0: after the last round every client runs the finalize_* phase (finetuning)
    tasks = ("classification", "binary_pm1", "regression", "multilabel")  # dataset tasks it is defined for
    models: tuple[str, ...] | None = None  # models the method is defined for (None: any)

    def check_schedule(self, clients_per_round: int, local_epochs: int, num_clients: int) -> None:
        """Raise ConfigError, before training, where the method cannot run with this schedule."""

    def init_clients(self, w: torch.Tensor, sizes: np.ndarray) -> dict[str, torch.Tensor]:
        """The per-client state at the start (``sizes``: every client's training sample count)."""
        return {}

    @property
    def trains_plain_sgd(self) -> bool:
        """Whether local training is this class's: plain SGD from the global model, the update sent as it is (the
        engine may then run it fused, ``Backend.local_sgd``); a method overriding any of the three is stepped."""
        cls = type(self)
        return (cls.local_init is Method.local_init and cls.local_step is Method.local_step
                and cls.local_result is Method.local_result)

    def local_init(self, w: torch.Tensor, clients: dict, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"w": w.expand(len(ids), -1).clone()}

    def local_step(self, local: dict, batch: Batch, ctx: StepContext) -> dict[str, torch.Tensor]:
        # local["w"] belongs to this round alone (local_init clones it), so the hot path may update it in place
        ctx.backend.descend_(local["w"], batch, ctx.lr * batch.active)
        return local

    def local_result(self, local: dict, w: torch.Tensor, clients: dict, ids: torch.Tensor):
        """(updates [n, d] sent to the server, new per-client state)."""
        return local["w"].sub_(w), clients  # in place: local["w"] belongs to this round (local_init clones it)

    def server_step(self, w: torch.Tensor, clients: dict, updates: torch.Tensor, info: ServerInfo,
                    aggregate: Aggregate) -> tuple[torch.Tensor, dict]:
        """(new global model, per-client state) after a round: by default w + the configured rule over the
        updates. The one server hook: fair methods pass their client weighting to ``aggregate``, and
        methods with server-side per-client state (AFL's dual weights) update it here."""
        return w + aggregate(updates, info.weights, info.losses), clients

    # Optional post-training phase, run once after the last round when ``finalize_epochs`` > 0 (the
    # finetuning baselines): every client runs that many epochs of ``finalize_step`` minibatch steps.
    def finalize_steps(self, sizes: np.ndarray, batch_size: int) -> np.ndarray | None:
        """Per-client step counts of the finalize phase, run as full minibatches (as the Ditto reference
        code finetunes); None: ``finalize_epochs`` epochs (``sizes``: the clients' training sample counts)."""
        return None

    def finalize_init(self, w: torch.Tensor, clients: dict, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        raise NotImplementedError(f"method {self.name!r} sets finalize_epochs but has no finalize phase")

    def finalize_step(self, local: dict, batch: Batch, ctx: StepContext) -> dict[str, torch.Tensor]:
        raise NotImplementedError(f"method {self.name!r} sets finalize_epochs but has no finalize phase")

    def finalize_result(self, local: dict, w: torch.Tensor, clients: dict, ids: torch.Tensor) -> dict:
        """The new per-client state after the finalize phase of the clients ``ids``."""
        raise NotImplementedError(f"method {self.name!r} sets finalize_epochs but has no finalize phase")

    def eval_params(self, w: torch.Tensor, clients: dict) -> torch.Tensor:
        """[d] (one model for everyone) or [num_clients, d] (one per client)."""
        return clients["personal"] if self.evaluates == "personal" else w


METHODS: Registry[type[Method]] = Registry("method")


def method(name: str, *, version: int = 1, search: dict | None = None):
    """Register a ``Method`` class under ``name`` (also its ``name`` attribute, used in messages) with its
    version (bump it with any change of its numbers) and the search space of its hyperparameters (``search``,
    what ``fedarena tune`` explores)."""

    def decorator(cls: type[Method]) -> type[Method]:
        cls.name = name
        METHODS.add(name, cls, version=version, search=search)
        return cls

    return decorator


METHOD_SECTION = SectionKind("method", METHODS, signature=lambda cls: cls)


def build_method(section: dict) -> Method:
    """A method from a section as written (resolved here); trial set-up takes ``method_from``."""
    return method_from(METHOD_SECTION.resolve(section))


def method_from(resolved: dict) -> Method:
    """A method from its resolved section (``sections.resolve_config``)."""
    return METHODS.get(resolved["name"])(**{k: v for k, v in resolved.items() if k != "name"})


def scatter_rows(table: torch.Tensor, ids: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``table[ids] = rows``, in place: a per-client table ([num_clients, d], gigabytes at paper scale) is
    the one piece of state not copied; the simulation owns it and passes it back in every round."""
    return table.index_copy_(0, ids, rows.to(table.dtype))
