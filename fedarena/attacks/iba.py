"""IBA (Nguyen, Nguyen, Le, Tran, Nguyen and Tran, NeurIPS 2023, "Towards Irreversible Backdoor Attacks in Federated
Learning"): an imperceptible, sample-specific trigger made by a generator that the attackers train against the
current global model every round.

Why IBA (and not 3DFed): both adapt to what the defense lets through, but 3DFed's decoy models and indicator
feedback need an attacker to send several updates per device and to read back whether each was accepted, which a
round of one update per device does not model; IBA needs what the attack interface gives (the global model, the
attacker's own state carried across rounds).

Variant: BackFed's ``IBA`` poison (Peatech/BackFed ``backfed/poisons/iba.py``), which follows the authors' trigger
training. The trigger of x is ``eps`` x G(x) added to x and kept in the pixel range: G a generator with a tanh
output (here a one-hidden-layer MLP of ``hidden`` units over the flat input, for these small images; theirs an
autoencoder / U-Net for MNIST / CIFAR-10), ``eps`` in units of the pixel range (theirs 0.3 of [0, 1]). The bound
decays by ``decay`` a round from the first attacked one (theirs 0.1) to ``test_eps`` (their 0.05), the bound the
success rate is measured with: with the first bound the generator's noise is an adversarial example of most models,
poisoned or not, which says nothing of a backdoor. In every round holding a malicious device, before training: up to
``epochs`` passes (theirs 100) of Adam (lr ``lr``, a fresh optimiser each round, as theirs) over minibatches of
``batch_size`` of those devices' clean samples, minimising the global model's cross-entropy of ``target`` on the
triggered samples, stopping after the first pass whose success rate reaches 0.7 (theirs). Then each malicious device
trains with ``poison_fraction`` of its samples triggered (with the round's bound) and relabelled. Not modelled: the
authors' optional PGD projection of the local model. The generator's parameters are the attack's state
(``SimState.attack``, checkpointed); the success rate is measured with the generator of the evaluated round.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch
import torch.nn.functional as F

from fedarena.attacks.a3fl import black_value
from fedarena.attacks.backdoor import check_target, stop, white_value
from fedarena.attacks.base import ATTACKS, AttackView, Backdoor, Effect
from fedarena.attacks.checks import fraction, positive, whole
from fedarena.datasets.base import FederatedDataset
from fedarena.errors import ConfigError

GENERATOR = "generator"  # the state's key: the generator's flat parameters
FIRST = "first_round"  # the state's key: the first round the generator trained in (eps decays from there)
STOP_SUCCESS = 0.7  # BackFed's threshold_asr: the search stops once the local success rate reaches it


def generator_shapes(dim: int, hidden: int) -> list[tuple]:
    return [(hidden, dim), (hidden,), (dim, hidden), (dim,)]


def initial_generator(dim: int, hidden: int, rng: np.random.Generator) -> torch.Tensor:
    """PyTorch's default Linear initialisation (uniform within 1 / sqrt(fan in)), from the attack's seed stream."""
    parts = []
    for shape, fan_in in zip(generator_shapes(dim, hidden), (dim, dim, hidden, hidden), strict=True):
        bound = 1.0 / np.sqrt(fan_in)
        parts.append(rng.uniform(-bound, bound, size=int(np.prod(shape))))
    return torch.as_tensor(np.concatenate(parts), dtype=torch.float32)


def triggered(x: torch.Tensor, params: torch.Tensor, *, hidden: int, eps: float, low: float,
              high: float) -> torch.Tensor:
    """x [m, ...] plus eps x G(x), clamped to the pixel range [low, high]."""
    flat = x.reshape(x.shape[0], -1)
    w1, b1, w2, b2 = (p.reshape(s) for p, s in zip(params.to(flat).split([int(np.prod(s)) for s in
                                                                          generator_shapes(flat.shape[1], hidden)]),
                                                   generator_shapes(flat.shape[1], hidden), strict=True))
    noise = torch.tanh(F.linear(F.relu(F.linear(flat, w1, b1)), w2, b2))
    return (flat + eps * noise).clamp(low, high).reshape(x.shape)


def current_bound(state: dict, round_idx: int, *, eps: float, test_eps: float, decay: float) -> float:
    """BackFed's bound in round ``round_idx``: eps (1 - decay)^(rounds since the first), never below test_eps."""
    first = int(state[FIRST]) if FIRST in state else round_idx
    return max(test_eps, eps * (1.0 - decay) ** (round_idx - first))


def train_generator(state: dict, view: AttackView, gen: torch.Generator, *, initial: torch.Tensor, target: int,
                    epochs: int, lr: float, batch_size: int, test_eps: float, decay: float, **trigger) -> dict:
    """One round's generator training against the global model (see the module); returns the new state."""
    state = {**state, FIRST: state.get(FIRST, torch.tensor(view.round))}
    trigger["eps"] = current_bound(state, view.round, eps=trigger["eps"], test_eps=test_eps, decay=decay)
    params = state.get(GENERATOR, initial).to(view.x.device, view.x.dtype).clone().requires_grad_(True)
    optimiser = torch.optim.Adam([params], lr=lr)
    labels = torch.full((len(view.y),), target, dtype=torch.long, device=view.x.device)
    w = view.w.detach()
    for _ in range(epochs):
        hits = 0
        for rows in torch.randperm(len(view.y), generator=gen).to(view.x.device).split(batch_size):
            out = view.model.forward(w, triggered(view.x[rows], params, **trigger))
            loss = F.cross_entropy(out, labels[rows])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            hits += int((out.argmax(-1) == target).sum())
        if hits >= STOP_SUCCESS * len(view.y):
            break
    return {**state, GENERATOR: params.detach().cpu(), "eps": torch.tensor(trigger["eps"], dtype=torch.float64)}


def poison_round(x: torch.Tensor, y: torch.Tensor, owner: torch.Tensor, bad: torch.Tensor, gen: torch.Generator, *,
                 state: dict, initial: torch.Tensor, target: int, share: float, **trigger):
    """The round's training data: each malicious device's sample triggered by the current generator and relabelled
    ``target`` with probability ``share`` (drawn anew each round)."""
    chosen = bad & (torch.rand(len(y), generator=gen, device=gen.device).to(bad.device) < share)
    if not bool(chosen.any()):
        return x, y
    x, y = x.clone(), y.clone()
    if "eps" in state:  # the round's bound (the generator's training set it)
        trigger = {**trigger, "eps": float(state["eps"])}
    with torch.no_grad():
        x[chosen] = triggered(x[chosen], state.get(GENERATOR, initial), **trigger)
    y[chosen] = target
    return x, y


def restamp(x: torch.Tensor, state: dict, *, initial: torch.Tensor, **trigger) -> torch.Tensor:
    with torch.no_grad():
        return triggered(x, state.get(GENERATOR, initial), **trigger)


@ATTACKS.register("iba")
def iba(dataset: FederatedDataset, malicious: np.ndarray, rng: np.random.Generator, *, target: int = 0,
        eps: float = 0.3, hidden: int = 64, epochs: int = 100, lr: float = 0.01, batch_size: int = 64,
        test_eps: float = 0.05, decay: float = 0.1, poison_fraction: float = 0.25,
        stop_round: int | None = None) -> Effect:
    """IBA (Nguyen et al., NeurIPS 2023): a generator's bounded, sample-specific trigger, trained against the global
    model every round (see the module)."""
    target = check_target(dataset, "iba", target)
    if not 0 < test_eps <= eps <= 1 or not 0 <= decay < 1:
        raise ConfigError(f"attack 'iba': eps and test_eps bound the trigger as a share of the pixel range, "
                          f"0 < test_eps <= eps <= 1, and 0 <= decay < 1; got eps={eps!r}, test_eps={test_eps!r}, "
                          f"decay={decay!r}")
    low, high = black_value(dataset), white_value(dataset)
    dim, hidden = int(np.prod(dataset.input_shape)), whole("iba", "hidden", hidden, 1)
    scale = high - low  # the pixel range in the model's input units
    trigger = dict(hidden=hidden, eps=float(eps) * scale, low=low, high=high)
    initial = initial_generator(dim, hidden, rng)
    search = partial(train_generator, initial=initial, target=target, epochs=whole("iba", "epochs", epochs, 0),
                     lr=positive("iba", "lr", lr), batch_size=whole("iba", "batch_size", batch_size, 1),
                     test_eps=float(test_eps) * scale, decay=float(decay), **trigger)
    share = fraction("iba", "poison_fraction", poison_fraction)
    at_test = {**trigger, "eps": float(test_eps) * scale}  # a smaller bound at test: a backdoor, not noise
    backdoor = Backdoor(target, None, restamp=partial(restamp, initial=initial, **at_test))
    return Effect(dataset, corrupt=partial(poison_round, initial=initial, target=target, share=share, **trigger),
                  adapt=search, backdoor=backdoor, stop_round=stop("iba", stop_round))
