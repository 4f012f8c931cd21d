"""IBA (Nguyen, Nguyen, Le, Tran, Nguyen and Tran, NeurIPS 2023, "Towards Irreversible Backdoor Attacks in Federated
Learning"): an imperceptible, sample-specific trigger made by a generator that the attackers train against the
current global model every round.

Why IBA (and not 3DFed): both adapt to what the defense lets through, but 3DFed's decoy models and indicator
feedback need an attacker to send several updates per device and to read back whether each was accepted, which a
round of one update per device does not model; IBA needs what the attack interface gives (the global model, the
attacker's own state carried across rounds).

Variant: the authors' code (sail-research/iba, ``fl_trainer.py``), a generator G with a tanh output (here a
one-hidden-layer MLP of ``hidden`` units over the flat input, for these small images; theirs an autoencoder / U-Net
for MNIST / CIFAR-10). The trigger of x is x plus ``eps`` x G(x) in raw pixel units: each pixel moves by at most
``eps`` of the raw range (L-infinity per pixel, ``datasets.pixels``: theirs 0.3 and 0.05 of MNIST's [0, 1] images,
``exps/iba_mnist_fedavg.sh``; on CIFAR-10 theirs are in per-channel standardised units, about a fifth of that in raw
terms), then kept in the valid box pixel by pixel (a clamp that never moves a valid image; theirs clamps MNIST to
[-1, 1] and CIFAR-10 to ImageNet's range).
The authors' schedule: a first phase trains the generator in every round holding a malicious device, while those
devices train on clean data (``attack_portion`` 0, fl_trainer.py:1049); once the generator's success rate reaches
0.85 (``expected_atk_threshold``, fl_trainer.py:932; BackFed's current ``threshold_asr`` too), the next round
switches to poisoning (fl_trainer.py:1026-1031): ``poison_fraction`` of each malicious device's samples triggered
and relabelled ``target``, the generator retrained every other such round (``alternative_training``,
fl_trainer.py:1041, 1065; theirs toggles every round, the same where, as in their runs, the attackers are in every
round), and the bound decays from the switch, eps (1 - ``decay``)^(rounds since the switch),
never below ``test_eps`` (fl_trainer.py:1036-1039; ``decay`` the authors' default 0.001,
iba_simulated_averaging.py:221 and exps/iba_cifar10_fedavg.sh; BackFed's current 0.01 is ``decay: 0.01``). The
success rate is measured with ``test_eps``. A generator training is ``epochs`` passes (the authors' MNIST script's
3, ``--atk_model_train_epoch``) of Adam (lr ``lr`` 0.01, a fresh optimiser each time: BackFed's; theirs a fresh SGD
with momentum 0.9, weight decay 1e-4 and lr 0.001 on MNIST, fl_trainer.py:1068, 1181-1184) over minibatches of
``batch_size`` of the malicious devices' clean samples, minimising the cross-entropy of ``target`` on the triggered
samples under the global model, before the round's local training, the round's poisoning then using the new
generator (theirs trains it against the attacker's local model after that round's training and poisons with the
previous round's); its success rate is the last pass's share of triggered samples the global model calls
``target``.
Not modelled: the authors' optional PGD projection of the local model and the mixing weight ``attack_alpha``.
The generator and the schedule's rounds are the attack's state (``SimState.attack``, checkpointed). The attack
declares its bound (``attacks.bounds``): the engine checks every sample it stamps against eps.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch
import torch.nn.functional as F

from fedarena.attacks.backdoor import check_target, stop
from fedarena.attacks.base import AttackView, Backdoor, Effect, attack
from fedarena.attacks.bounds import TriggerBound
from fedarena.attacks.checks import fraction, number, positive, whole
from fedarena.datasets.base import FederatedDataset
from fedarena.datasets.pixels import check_varying, image_shape, valid_box
from fedarena.errors import ConfigError

GENERATOR = "generator"  # the state's key: the generator's flat parameters
SUCCESS = "success"  # the state's key: the success rate of the last generator training
SWITCH = "switch_round"  # the state's key: the round poisoning started (absent: still the first phase)
TRAININGS = "trainings"  # the state's key: generator trainings since the switch (every other round retrains)
SWITCH_SUCCESS = 0.85  # the authors' expected_atk_threshold (fl_trainer.py:932)


def generator_shapes(dim: int, hidden: int) -> list[tuple]:
    return [(hidden, dim), (hidden,), (dim, hidden), (dim,)]


def initial_generator(dim: int, hidden: int, rng: np.random.Generator) -> torch.Tensor:
    """PyTorch's default Linear initialisation (uniform within 1 / sqrt(fan in)), from the attack's seed stream."""
    parts = []
    for shape, fan_in in zip(generator_shapes(dim, hidden), (dim, dim, hidden, hidden), strict=True):
        bound = 1.0 / np.sqrt(fan_in)
        parts.append(rng.uniform(-bound, bound, size=int(np.prod(shape))))
    return torch.as_tensor(np.concatenate(parts), dtype=torch.float32)


def triggered(x: torch.Tensor, params: torch.Tensor, *, hidden: int, eps: float, low: torch.Tensor,
              high: torch.Tensor) -> torch.Tensor:
    """x [m, ...] plus eps x G(x) in raw pixel units (each input value moves by at most eps x (high - low), its
    pixel's raw range in input units), clamped to the valid box [low, high] [D] pixel by pixel."""
    flat = x.reshape(x.shape[0], -1)
    w1, b1, w2, b2 = (p.reshape(s) for p, s in zip(params.to(flat).split([int(np.prod(s)) for s in
                                                                          generator_shapes(flat.shape[1], hidden)]),
                                                   generator_shapes(flat.shape[1], hidden), strict=True))
    noise = torch.tanh(F.linear(F.relu(F.linear(flat, w1, b1)), w2, b2))
    low, high = low.to(flat), high.to(flat)
    return (flat + eps * (high - low) * noise).clamp(low, high).reshape(x.shape)


def current_bound(state: dict, round_idx: int, *, eps: float, test_eps: float, decay: float) -> float:
    """The authors' training bound in round ``round_idx``: eps until the switch, then eps (1 - decay)^(rounds since
    the switch), never below test_eps."""
    if SWITCH not in state:
        return eps
    return max(test_eps, eps * (1.0 - decay) ** (round_idx - int(state[SWITCH])))


def scheduled(state: dict, round_idx: int) -> tuple[dict, bool]:
    """(the state with this round's phase, whether the generator trains this round): the first phase trains every
    round; the round after a training whose success reached SWITCH_SUCCESS starts poisoning, and from then on the
    generator trains every other round (the switch round first)."""
    if SWITCH not in state and float(state.get(SUCCESS, 0.0)) >= SWITCH_SUCCESS:
        state = {**state, SWITCH: torch.tensor(round_idx), TRAININGS: torch.tensor(0)}
    if SWITCH not in state:
        return state, True
    count = int(state[TRAININGS])
    return {**state, TRAININGS: torch.tensor(count + 1)}, count % 2 == 0


def train_generator(state: dict, view: AttackView, gen: torch.Generator, *, initial: torch.Tensor, target: int,
                    epochs: int, lr: float, batch_size: int, test_eps: float, decay: float, **trigger) -> dict:
    """One round's schedule and, where it trains, the generator's training against the global model (see the
    module); returns the new state."""
    state, trains = scheduled(state, view.round)
    trigger["eps"] = current_bound(state, view.round, eps=trigger["eps"], test_eps=test_eps, decay=decay)
    state = {**state, "eps": torch.tensor(trigger["eps"], dtype=torch.float64)}
    if not trains:
        return state
    params = state.get(GENERATOR, initial).to(view.x.device, view.x.dtype).clone().requires_grad_(True)
    optimiser = torch.optim.Adam([params], lr=lr)
    labels = torch.full((len(view.y),), target, dtype=torch.long, device=view.x.device)
    w, hits = view.w.detach(), 0
    for _ in range(epochs):
        hits = 0
        for rows in torch.randperm(len(view.y), generator=gen).to(view.x.device).split(batch_size):
            out = view.model.forward(w, triggered(view.x[rows], params, **trigger))
            loss = F.cross_entropy(out, labels[rows])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            hits += int((out.argmax(-1) == target).sum())
    success = hits / max(len(view.y), 1)
    return {**state, GENERATOR: params.detach().cpu(), SUCCESS: torch.tensor(success, dtype=torch.float64)}


def poison_round(x: torch.Tensor, y: torch.Tensor, owner: torch.Tensor, bad: torch.Tensor, gen: torch.Generator, *,
                 state: dict, initial: torch.Tensor, target: int, share: float, **trigger):
    """The round's training data: from the switch on, each malicious device's sample triggered by the current
    generator (with the round's bound) and relabelled ``target`` with probability ``share`` (drawn anew each
    round); before it, the clean data (the authors' first phase)."""
    if SWITCH not in state:
        return x, y
    chosen = bad & (torch.rand(len(y), generator=gen, device=gen.device).to(bad.device) < share)
    if not bool(chosen.any()):
        return x, y
    x, y = x.clone(), y.clone()
    trigger = {**trigger, "eps": float(state["eps"])}
    with torch.no_grad():
        x[chosen] = triggered(x[chosen], state.get(GENERATOR, initial), **trigger)
    y[chosen] = target
    return x, y


def restamp(x: torch.Tensor, state: dict, *, initial: torch.Tensor, **trigger) -> torch.Tensor:
    with torch.no_grad():
        return triggered(x, state.get(GENERATOR, initial), **trigger)


@attack("iba", version=2, device_reads=())
def iba(dataset: FederatedDataset, malicious: np.ndarray, rng: np.random.Generator, *, target: int = 0,
        eps: float = 0.3, hidden: int = 64, epochs: int = 3, lr: float = 0.01, batch_size: int = 64,
        test_eps: float = 0.05, decay: float = 0.001, poison_fraction: float = 0.25,
        stop_round: int | None = None) -> Effect:
    """IBA (Nguyen et al., NeurIPS 2023): a generator's bounded, sample-specific trigger, trained against the global
    model, with the authors' two-phase schedule (see the module)."""
    target = check_target(dataset, "iba", target)
    eps, test_eps, decay = (number("iba", key, value) for key, value in  # numbers (not bools), then their ranges
                            (("eps", eps), ("test_eps", test_eps), ("decay", decay)))
    if not 0 < test_eps <= eps <= 1 or not 0 <= decay < 1:
        raise ConfigError(f"attack 'iba': eps and test_eps bound each pixel's change as a share of the raw pixel "
                          f"range, 0 < test_eps <= eps <= 1, and 0 <= decay < 1; got eps={eps!r}, "
                          f"test_eps={test_eps!r}, decay={decay!r}")
    image_shape(dataset, "iba")  # an image dataset (raw pixels to bound)
    check_varying(dataset, "attack 'iba'")
    low, high = (bound.reshape(-1) for bound in valid_box(dataset))
    dim, hidden = int(np.prod(dataset.input_shape)), whole("iba", "hidden", hidden, 1)
    trigger = dict(hidden=hidden, eps=float(eps), low=low, high=high)
    initial = initial_generator(dim, hidden, rng)
    search = partial(train_generator, initial=initial, target=target, epochs=whole("iba", "epochs", epochs, 1),
                     lr=positive("iba", "lr", lr), batch_size=whole("iba", "batch_size", batch_size, 1),
                     test_eps=float(test_eps), decay=float(decay), **trigger)
    share = fraction("iba", "poison_fraction", poison_fraction)
    at_test = {**trigger, "eps": float(test_eps)}  # a smaller bound at test: a backdoor, not noise
    backdoor = Backdoor(target, None, restamp=partial(restamp, initial=initial, **at_test))
    return Effect(dataset, corrupt=partial(poison_round, initial=initial, target=target, share=share, **trigger),
                  adapt=search, backdoor=backdoor, stop_round=stop("iba", stop_round),
                  bound=TriggerBound(linf=float(eps), test_linf=float(test_eps)))
