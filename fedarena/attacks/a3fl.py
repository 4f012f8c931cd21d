"""A3FL (Zhang, Jia, Wang and Gong, NeurIPS 2023): a backdoor trigger optimised against the global model every
round, and against an adversarially adapted copy of it that has unlearned the trigger, so that it survives the
benign devices' training and the server's defense.

Variant: the authors' ``Attacker.search_trigger`` (hfzhang31/A3FL, ``fl_utils/attacker.py``). The trigger is a
``size`` x ``size`` patch (every channel) at ``position``, starting as BadNets' white patch (their
``init_badnets_trigger``). In every round holding a malicious device, before training, on those devices' own
clean samples in minibatches of ``batch_size``:

- ``steps`` times (their ``trigger_outter_epochs``) over the minibatches, one signed-gradient step of size
  ``trigger_lr`` on the patch: minimise the cross-entropy of the target label under the global model, plus
  ``noise_lambda`` x w x the same under the adversarial model; the patch is kept in the pixel range (a valid
  image; their [-2, 2] in CIFAR-10's normalised units);
- every ``adv_every`` steps (not at step 0): the adversarial model, the global model trained ``adv_epochs`` passes
  with SGD (lr ``adv_lr``, momentum 0.9, weight decay 5e-4) on stamped samples with their *true* labels, and
  its weight w, the cosine similarity of the two models' gradients of the trigger loss (theirs: conv layers).

Then each malicious device trains on its data with ``poison_fraction`` of its samples (drawn anew each round;
their ``bkd_ratio`` of every batch) stamped with the current trigger and relabelled ``target``. The trigger is
the attack's state (``SimState.attack``, checkpointed: a resumed run goes on with it), and the success rate is
measured with the trigger of the evaluated round.

Defaults: the authors' trigger and adversarial learning rates, ``noise_lambda``, adversarial epochs and
poisoned share; 100 outer steps (theirs 200) and an adversarial model every 10 steps (theirs every step: 200
models a round, each 5 epochs, costs minutes per round on a CPU): docs/fidelity.md.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch
import torch.nn.functional as F

from fedarena.attacks.backdoor import check_target, make_patch, stop, white_value
from fedarena.attacks.base import ATTACKS, AttackView, Backdoor, Effect
from fedarena.attacks.checks import fraction, positive, whole
from fedarena.datasets.base import RAW_PIXELS, FederatedDataset

TRIGGER = "trigger"  # the state's key: the current trigger, a flat [D] tensor (only its mask's entries matter)
ADV_MOMENTUM, ADV_DECAY = 0.9, 5e-4  # the authors' SGD for the adversarial model


def black_value(dataset: FederatedDataset) -> float:
    """A black pixel's value in the dataset's inputs (see ``backdoor.white_value``)."""
    stats = dataset.meta.get(RAW_PIXELS)
    if stats:
        return (0.0 - stats["mean"]) / max(stats["std"], 1e-12)
    return min(float(c.train.x.min()) for c in dataset.clients)


def trigger_mask(dataset: FederatedDataset, size: int, position) -> torch.Tensor:
    """bool [D]: the patch's pixels in every channel of the flattened input."""
    patch = make_patch(dataset, "a3fl", size, position, 0.0)
    dim = int(np.prod(dataset.input_shape))
    image = torch.zeros(dim).reshape(-1, *patch.shape)
    rows, cols = zip(*patch.pixels, strict=True)
    image[:, list(rows), list(cols)] = 1.0
    return image.reshape(-1) > 0


def stamped(x: torch.Tensor, trigger: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """x [m, ...] with the trigger's values on the mask's entries."""
    flat = x.reshape(x.shape[0], -1)
    m = mask.to(flat.device)
    return torch.where(m, trigger.to(flat), flat).reshape(x.shape)


def trigger_loss(model, w: torch.Tensor, x: torch.Tensor, trigger: torch.Tensor, mask: torch.Tensor,
                 target: int) -> torch.Tensor:
    out = model.forward(w, stamped(x, trigger, mask))
    return F.cross_entropy(out, torch.full((x.shape[0],), target, dtype=torch.long, device=out.device))


def adversarial_model(view: AttackView, batches, trigger: torch.Tensor, mask: torch.Tensor, *, epochs: int,
                      lr: float) -> torch.Tensor:
    """The global model trained to ignore the trigger: stamped samples with their true labels (SGD with the
    authors' momentum and weight decay)."""
    adv, velocity = view.w.clone(), torch.zeros_like(view.w)
    for _ in range(epochs):
        for rows in batches:
            adv.requires_grad_(True)
            out = view.model.forward(adv, stamped(view.x[rows], trigger, mask))
            grad, = torch.autograd.grad(F.cross_entropy(out, view.y[rows]), adv)
            with torch.no_grad():
                grad = grad + ADV_DECAY * adv
                velocity = ADV_MOMENTUM * velocity + grad
                adv = (adv - lr * velocity).detach()
    return adv


def adversarial_weight(view: AttackView, adv: torch.Tensor, x: torch.Tensor, trigger: torch.Tensor,
                       mask: torch.Tensor, target: int) -> float:
    """Cosine similarity of the trigger loss's parameter gradients under the adversarial and the global model."""
    grads = []
    for w in (adv, view.w):
        w = w.detach().requires_grad_(True)
        grads.append(torch.autograd.grad(trigger_loss(view.model, w, x, trigger, mask, target), w)[0])
    return float(F.cosine_similarity(grads[0], grads[1], dim=0))


def search_trigger(state: dict, view: AttackView, gen: torch.Generator, *, initial: torch.Tensor,
                   mask: torch.Tensor, target: int, steps: int, trigger_lr: float, adv_every: int, adv_epochs: int,
                   adv_lr: float, noise_lambda: float, batch_size: int, low: float, high: float) -> dict:
    """One round's trigger search (the module's steps); returns the new state."""
    trigger = state.get(TRIGGER, initial).to(view.x.device, view.x.dtype).clone()
    mask = mask.to(view.x.device)
    order = torch.randperm(len(view.y), generator=gen).to(view.x.device)
    batches = list(order.split(batch_size))
    adv, adv_w = None, 0.0
    for step in range(steps):
        if adv_every and step % adv_every == 0 and step != 0:
            adv = adversarial_model(view, batches, trigger, mask, epochs=adv_epochs, lr=adv_lr)
            adv_w = adversarial_weight(view, adv, view.x[batches[0]], trigger, mask, target)
        for rows in batches:
            trigger.requires_grad_(True)
            loss = trigger_loss(view.model, view.w, view.x[rows], trigger, mask, target)
            if adv is not None:
                loss = loss + noise_lambda * adv_w * trigger_loss(view.model, adv, view.x[rows], trigger, mask, target)
            grad, = torch.autograd.grad(loss, trigger)
            trigger = (trigger - trigger_lr * grad.sign()).clamp(low, high).detach()
    return {**state, TRIGGER: trigger.cpu()}


def poison_round(x: torch.Tensor, y: torch.Tensor, owner: torch.Tensor, bad: torch.Tensor, gen: torch.Generator, *,
                 state: dict, initial: torch.Tensor, mask: torch.Tensor, target: int, share: float):
    """The round's training data of the selected devices: each malicious device's sample is stamped with the current
    trigger and relabelled ``target`` with probability ``share`` (drawn anew each round)."""
    chosen = bad & (torch.rand(len(y), generator=gen, device=gen.device).to(bad.device) < share)
    if not bool(chosen.any()):
        return x, y
    trigger = state.get(TRIGGER, initial)
    x, y = x.clone(), y.clone()
    x[chosen] = stamped(x[chosen], trigger, mask)
    y[chosen] = target
    return x, y


def restamp(x: torch.Tensor, state: dict, *, initial: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return stamped(x, state.get(TRIGGER, initial), mask)


@ATTACKS.register("a3fl")
def a3fl(dataset: FederatedDataset, malicious: np.ndarray, rng: np.random.Generator, *, target: int = 0,
         size: int = 3, position: str | list = "bottom_right", poison_fraction: float = 0.25, steps: int = 100,
         trigger_lr: float = 0.01, adv_every: int = 10, adv_epochs: int = 5, adv_lr: float = 0.01,
         noise_lambda: float = 0.01, batch_size: int = 64, stop_round: int | None = None) -> Effect:
    """A3FL (Zhang et al., NeurIPS 2023): the trigger re-optimised against the global model and an adversarially
    adapted copy every round (see the module)."""
    target = check_target(dataset, "a3fl", target)
    mask = trigger_mask(dataset, size, position)
    low, high = black_value(dataset), white_value(dataset)
    initial = torch.full(mask.shape, float(high))
    options = dict(initial=initial, mask=mask, target=target)
    name = "a3fl"
    search = partial(search_trigger, **options, steps=whole(name, "steps", steps, 0),
                     trigger_lr=positive(name, "trigger_lr", trigger_lr), adv_every=whole(name, "adv_every", adv_every, 0),
                     adv_epochs=whole(name, "adv_epochs", adv_epochs, 1), adv_lr=positive(name, "adv_lr", adv_lr),
                     noise_lambda=float(noise_lambda), batch_size=whole(name, "batch_size", batch_size, 1),
                     low=low, high=high)
    share = fraction("a3fl", "poison_fraction", poison_fraction)
    backdoor = Backdoor(target, None, restamp=partial(restamp, initial=initial, mask=mask))
    return Effect(dataset, corrupt=partial(poison_round, **options, share=share), adapt=search, backdoor=backdoor,
                  stop_round=stop("a3fl", stop_round))
