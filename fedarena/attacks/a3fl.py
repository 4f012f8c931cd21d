"""A3FL (Zhang, Jia, Chen, Lin and Wu, NeurIPS 2023): a backdoor trigger optimised against the global model every
round, and against an adversarially adapted copy of it that has unlearned the trigger, so that it survives the
benign devices' training and the server's defense.

Variant: the authors' ``Attacker.search_trigger`` and ``get_adv_model`` (hfzhang31/A3FL,
``fl_utils/attacker.py``). The trigger is a ``size`` x ``size`` patch (every channel) at ``position``, starting
as the authors' constant 0.5 (their ``setup``; their ``init_badnets_trigger`` is never called), a value in
CIFAR-10's per-channel standardised units: half a standard deviation above the mean pixel (``start_value``). In
every round holding a malicious device, before training, on those devices' own clean samples in minibatches of
``batch_size``:

- ``steps`` times (their ``trigger_outter_epochs``) over the minibatches, one signed-gradient step of size
  ``trigger_lr`` on the patch: minimise the cross-entropy of the target label under the global model, plus
  ``noise_lambda`` x w x the same under the adversarial model; the patch is kept in the valid box pixel by pixel
  (each pixel between its black and white value, ``datasets.pixels``);
- every ``adv_every`` steps (not at step 0): the adversarial model, the global model trained ``adv_epochs`` passes
  with SGD (lr ``adv_lr``, momentum 0.9, weight decay 5e-4) on stamped samples with their *true* labels, and
  its weight w (``adversarial_weight``): over the convolution layers' parameter tensors (every tensor of a model
  without one), the mean cosine similarity of the adversarial model's gradient of its true-label loss on its
  last training minibatch and the global model's gradient of the target-label loss summed over every minibatch
  step of the round's search so far. (Two leftovers of their code are not transcribed: the stale training
  gradient their reused local model starts the sum with, and the adversarial training's gradient that leaks into
  the trigger's next step: docs/fidelity.md.)

Then each malicious device trains on its data with ``poison_fraction`` of its samples (drawn anew each round;
their ``bkd_ratio`` of every batch) stamped with the current trigger and relabelled ``target``. The trigger is
the attack's state (``SimState.attack``, checkpointed: a resumed run goes on with it), and the success rate is
measured with the trigger of the evaluated round.

Other differences from theirs (docs/fidelity.md): theirs clamps the patch to [-2, 2] in CIFAR-10's standardised
units (raw 0.04-0.09 up to 0.85-0.90 by channel, about 80% of the raw range), ours to the whole valid box; ours draws one minibatch order
for the round's search, theirs reshuffles on every pass, with random crops and flips (helper.py:67-73, 87-92);
theirs searches on the first malicious device's data only (fler.py:177-181, 224-234), ours on the data of every
malicious device of the round; their patch is 5 x 5 at row and column 2 (attacker.py:31, their ``trigger_size``
5), our default 3 x 3 in the bottom right corner. Where the paper's text (the weight lambda0 x the similarity of
the models) differs from their code (the similarity of gradients, above), we follow the code.

Defaults: the authors' trigger and adversarial learning rates, ``noise_lambda``, adversarial epochs and
poisoned share; 100 outer steps (theirs 200) and an adversarial model every 10 steps (theirs every step: 200
models a round, each 5 epochs, costs minutes per round on a CPU): docs/fidelity.md.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedarena.attacks.backdoor import check_target, make_patch, stop
from fedarena.attacks.base import AttackView, Backdoor, Effect, attack
from fedarena.attacks.bounds import TriggerBound
from fedarena.attacks.checks import fraction, non_negative, positive, whole
from fedarena.datasets.base import FederatedDataset
from fedarena.datasets.pixels import PIXELS, valid_box

TRIGGER = "trigger"  # the state's key: the current trigger, a flat [D] tensor (only its mask's entries matter)
ADV_MOMENTUM, ADV_DECAY = 0.9, 5e-4  # the authors' SGD for the adversarial model
START_STDS = 0.5  # the authors' start, in standard deviations above the mean pixel (attacker.py:29)
COSINE_EPS = 1e-8  # their CosineSimilarity's eps (attacker.py:57)


def start_value(dataset: FederatedDataset) -> torch.Tensor:
    """[D]: the patch's first value in the dataset's inputs. The authors' constant 0.5 (attacker.py:29) is in the
    standardised units their CIFAR-10 images come in (helper.py:91-96 standardises them per channel, attacker.py:126
    stamps the trigger on them): the raw pixel half a standard deviation above its mean, which is 0.5 in the inputs
    of a dataset standardised per channel or per pixel (``datasets.pixels``); on data kept in raw units, the
    training values' mean + 0.5 std. Kept in the valid box."""
    low, high = (bound.reshape(-1) for bound in valid_box(dataset))
    if dataset.meta.get(PIXELS) is not None:
        start = torch.full_like(low, START_STDS)
    else:  # the population mean and std over every client's training values, one client at a time
        count = sum(c.train.x.numel() for c in dataset.clients)
        mean = sum(float(c.train.x.double().sum()) for c in dataset.clients) / count
        squares = sum(float((c.train.x.double() - mean).square().sum()) for c in dataset.clients)
        start = torch.full_like(low, mean + START_STDS * (squares / count) ** 0.5)
    return torch.minimum(torch.maximum(start, low), high)


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


def weighted_tensors(model) -> list[slice]:
    """The flat vector's slices that w averages over: the convolution layers' parameter tensors (the authors'
    parameters named 'conv', attacker.py:59), or every tensor of a model without convolutions (theirs would divide
    by zero)."""
    owners = dict(model.module.named_modules())
    ends = np.cumsum([0, *model.sizes])
    spans = [slice(int(a), int(b)) for a, b in zip(ends[:-1], ends[1:], strict=True)]
    conv = [span for name, span in zip(model.names, spans, strict=True)
            if isinstance(owners[name.rpartition(".")[0]], nn.modules.conv._ConvNd)]
    return conv or spans


def adversarial_model(view: AttackView, batches, trigger: torch.Tensor, mask: torch.Tensor, *, epochs: int,
                      lr: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The global model trained to ignore the trigger: stamped samples with their true labels (SGD with the
    authors' momentum and weight decay); and the gradient of the last minibatch's loss (the one their
    ``adv_model`` keeps in ``.grad``: taken before the last step, without weight decay)."""
    adv, velocity, grad = view.w.clone(), torch.zeros_like(view.w), torch.zeros_like(view.w)
    trigger = trigger.detach()  # their adversarial training also adds into the trigger's .grad: not A3FL (fidelity.md)
    for _ in range(epochs):
        for rows in batches:
            adv.requires_grad_(True)
            out = view.model.forward(adv, stamped(view.x[rows], trigger, mask))
            grad, = torch.autograd.grad(F.cross_entropy(out, view.y[rows]), adv)
            with torch.no_grad():
                velocity = ADV_MOMENTUM * velocity + (grad + ADV_DECAY * adv)
                adv = (adv - lr * velocity).detach()
    return adv, grad


def adversarial_weight(adv_grad: torch.Tensor, global_grad: torch.Tensor, spans: list[slice]) -> float:
    """A3FL's weight of an adversarial model (their ``get_adv_model``, attacker.py:55-63): the mean over ``spans``
    (``weighted_tensors``) of the cosine similarity between the adversarial model's true-label loss gradient
    ``adv_grad`` and the global model's target-label loss gradient ``global_grad`` accumulated over the search."""
    sims = [F.cosine_similarity(adv_grad[s], global_grad[s], dim=0, eps=COSINE_EPS) for s in spans]
    return float(torch.stack(sims).mean())


def search_trigger(state: dict, view: AttackView, gen: torch.Generator, *, initial: torch.Tensor,
                   mask: torch.Tensor, target: int, steps: int, trigger_lr: float, adv_every: int, adv_epochs: int,
                   adv_lr: float, noise_lambda: float, batch_size: int, low: torch.Tensor, high: torch.Tensor) -> dict:
    """One round's trigger search (the module's steps); returns the new state."""
    trigger = state.get(TRIGGER, initial).to(view.x.device, view.x.dtype).clone()
    mask = mask.to(view.x.device)
    low, high = torch.as_tensor(low).to(trigger), torch.as_tensor(high).to(trigger)
    order = torch.randperm(len(view.y), generator=gen).to(view.x.device)
    batches = list(order.split(batch_size))
    builds = 0 < adv_every < steps  # an adversarial model is built at some step (not at step 0)
    spans = weighted_tensors(view.model) if builds else []
    # the global model's target-loss gradient summed over the search's minibatch steps (their model.grad, never
    # zeroed during the search); only w reads it, so a search without adversarial models skips it
    global_w, accumulated = view.w.detach().requires_grad_(builds), torch.zeros_like(view.w)
    adv, adv_w = None, 0.0
    for step in range(steps):
        if adv_every and step % adv_every == 0 and step != 0:
            adv, adv_grad = adversarial_model(view, batches, trigger, mask, epochs=adv_epochs, lr=adv_lr)
            adv_w = adversarial_weight(adv_grad, accumulated, spans)
        for rows in batches:
            trigger.requires_grad_(True)
            loss = trigger_loss(view.model, global_w, view.x[rows], trigger, mask, target)
            if adv is not None:
                loss = loss + noise_lambda * adv_w * trigger_loss(view.model, adv, view.x[rows], trigger, mask, target)
            grad, *global_grad = torch.autograd.grad(loss, [trigger, global_w] if builds else [trigger])
            if global_grad:
                accumulated += global_grad[0]
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


@attack("a3fl", version=2, device_reads=())
def a3fl(dataset: FederatedDataset, malicious: np.ndarray, rng: np.random.Generator, *, target: int = 0,
         size: int = 3, position: str | list = "bottom_right", poison_fraction: float = 0.25, steps: int = 100,
         trigger_lr: float = 0.01, adv_every: int = 10, adv_epochs: int = 5, adv_lr: float = 0.01,
         noise_lambda: float = 0.01, batch_size: int = 64, stop_round: int | None = None) -> Effect:
    """A3FL (Zhang et al., NeurIPS 2023): the trigger re-optimised against the global model and an adversarially
    adapted copy every round (see the module)."""
    target = check_target(dataset, "a3fl", target)
    mask = trigger_mask(dataset, size, position)
    low, high = (bound.reshape(-1) for bound in valid_box(dataset))  # each pixel's black and white
    initial = start_value(dataset)
    options = dict(initial=initial, mask=mask, target=target)
    name = "a3fl"
    search = partial(search_trigger, **options, steps=whole(name, "steps", steps, 0),
                     trigger_lr=positive(name, "trigger_lr", trigger_lr), adv_every=whole(name, "adv_every", adv_every, 0),
                     adv_epochs=whole(name, "adv_epochs", adv_epochs, 1), adv_lr=positive(name, "adv_lr", adv_lr),
                     noise_lambda=non_negative(name, "noise_lambda", noise_lambda),
                     batch_size=whole(name, "batch_size", batch_size, 1), low=low, high=high)
    share = fraction("a3fl", "poison_fraction", poison_fraction)
    backdoor = Backdoor(target, None, restamp=partial(restamp, initial=initial, mask=mask))
    bound = TriggerBound(positions=make_patch(dataset, "a3fl", size, position, 0.0).pixels)  # the patch's pixels
    return Effect(dataset, corrupt=partial(poison_round, **options, share=share), adapt=search, backdoor=backdoor,
                  stop_round=stop("a3fl", stop_round), bound=bound)
