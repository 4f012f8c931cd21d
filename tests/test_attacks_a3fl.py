"""A3FL: the trigger search against the global model and adversarial models (the authors' search_trigger and
get_adv_model, transcribed on nn.Modules in float64), the adversarial weight, the per-pixel box, the starting patch,
the round's poisoning with the current trigger, the success rate under the evaluated round's trigger, and a resumed
run that goes on with the saved trigger to the numbers of an uninterrupted one."""

import copy
import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from resume import attacked_digits_config, run_interrupted

import fedarena.attacks.a3fl as a3fl_module
from fedarena.attacks import ATTACKS
from fedarena.attacks.a3fl import (
    TRIGGER,
    adversarial_model,
    adversarial_weight,
    poison_round,
    search_trigger,
    stamped,
    start_value,
    trigger_mask,
    weighted_tensors,
)
from fedarena.attacks.base import AttackView
from fedarena.config import ExperimentConfig
from fedarena.datasets.catalog import build_dataset
from fedarena.datasets.pixels import PIXELS
from fedarena.errors import ConfigError
from fedarena.models.functional import FlatModel
from fedarena.simulation.engine import evaluate_state, simulate
from fedarena.simulation.setup import build_trial


class ConvNet(torch.nn.Module):
    """4x4 one-channel images: a convolution named as the authors' are ('conv': w averages over it) and a linear
    head (which w leaves out)."""

    def __init__(self, classes=3):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 2, 3, padding=1)
        self.fc = torch.nn.Linear(32, classes)

    def forward(self, x):
        return self.fc(torch.tanh(self.conv(x.reshape(-1, 1, 4, 4))).flatten(1))


def linear_view(seed=0, n=40, dim=16, classes=3):
    gen = torch.Generator().manual_seed(seed)
    model = FlatModel(torch.nn.Linear(dim, classes).double(), "classification")
    w = torch.randn(dim * classes + classes, generator=gen, dtype=torch.float64) * 0.3
    x = torch.randn(n, dim, generator=gen, dtype=torch.float64)
    y = torch.randint(0, classes, (n,), generator=gen)
    return AttackView(w, model, x, y, 0)


def conv_view(seed=0, n=40, classes=3):
    torch.manual_seed(seed)
    module = ConvNet(classes).double()
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 16, generator=gen, dtype=torch.float64)
    y = torch.randint(0, classes, (n,), generator=gen)
    model = FlatModel(module, "classification")
    return AttackView(model.flatten(), model, x, y, 0)


def authors_adv_training(model, batches, x, y, t, m, epochs, lr):
    """The training in hfzhang31/A3FL get_adv_model (fl_utils/attacker.py:41-53): SGD on stamped samples with
    their true labels; .grad is left holding the last minibatch's gradient."""
    adv_model = copy.deepcopy(model)
    adv_opt = torch.optim.SGD(adv_model.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4)
    for _ in range(epochs):
        for rows in batches:
            loss = F.cross_entropy(adv_model(t * m + (1 - m) * x[rows]), y[rows])
            adv_opt.zero_grad()
            loss.backward()
            adv_opt.step()
    return adv_model


def authors_adv_model(model, batches, x, y, t, m, epochs, lr):
    """hfzhang31/A3FL get_adv_model (fl_utils/attacker.py:40-63) on nn.Modules: w = mean over parameters named
    'conv' of cos(adv .grad, global .grad). t comes in detached: their adversarial training also adds into the
    trigger's .grad, which A3FL's maths leaves out (docs/fidelity.md)."""
    adv_model = authors_adv_training(model, batches, x, y, t, m, epochs, lr)
    cos = torch.nn.CosineSimilarity(dim=0, eps=1e-08)
    global_params = dict(model.named_parameters())
    sims = [cos(p.grad.reshape(-1), global_params[name].grad.reshape(-1))
            for name, p in adv_model.named_parameters() if "conv" in name]
    return adv_model, sum(sims) / len(sims)


def authors_search(module, x, y, trigger, mask, target, steps, lr, batches, low, high, adv_every=0, adv_epochs=1,
                   adv_lr=0.01, noise_lambda=0.01, weights=None):
    """hfzhang31/A3FL search_trigger (fl_utils/attacker.py:65-150), one adversarial model: per step and minibatch,
    t <- clamp(t - lr * sign(grad_t [CE(global(stamped), target) + noise_lambda * w * CE(adv(stamped), target)])),
    the global module's .grad accumulating over the search (what w reads); each model's w appended to
    ``weights`` where given."""
    t, adv_models, adv_ws = trigger.clone(), [], []
    for step in range(steps):
        if adv_every and step % adv_every == 0 and step != 0:
            adv_model, adv_w = authors_adv_model(module, batches, x, y, t.detach(), mask, adv_epochs, adv_lr)
            adv_models, adv_ws = [adv_model], [adv_w]
            if weights is not None:
                weights.append(float(adv_w))
        for rows in batches:
            t.requires_grad_()
            inputs = t * mask + (1 - mask) * x[rows]
            labels = torch.full((len(rows),), target, dtype=torch.long)
            loss = F.cross_entropy(module(inputs), labels)
            for adv_model, adv_w in zip(adv_models, adv_ws, strict=True):
                loss += noise_lambda * adv_w * F.cross_entropy(adv_model(inputs), labels)
            loss.backward()
            t = torch.clamp(t - lr * t.grad.sign(), min=low, max=high).detach()
    return t


def test_the_trigger_search_is_the_authors_signed_descent_without_adversarial_models():
    view = linear_view()
    mask = torch.zeros(16, dtype=torch.bool)
    mask[[3, 4, 7, 8]] = True
    initial = torch.full((16,), 1.5, dtype=torch.float64)
    gen = torch.Generator().manual_seed(4)
    order = torch.randperm(40, generator=torch.Generator().manual_seed(4))
    options = dict(initial=initial, mask=mask, target=2, steps=5, trigger_lr=0.05, adv_every=0, adv_epochs=1,
                   adv_lr=0.01, noise_lambda=0.01, batch_size=16, low=-1.0, high=2.0)
    ours = search_trigger({}, view, gen, **options)[TRIGGER]
    module = view.model.module
    torch.nn.utils.vector_to_parameters(view.w, module.parameters())
    theirs = authors_search(module, view.x, view.y, initial, mask.double(), 2, 5, 0.05, list(order.split(16)),
                            -1.0, 2.0)
    assert torch.allclose(ours[mask], theirs[mask], atol=1e-12)


def test_the_trigger_search_with_adversarial_models_is_the_authors():
    # Prepare: a conv model (w averages over its conv layer), an adversarial model every 2 of 6 steps, and a
    # noise_lambda large enough that the adversarial term turns some of the signed steps
    view = conv_view()
    mask = torch.zeros(16, dtype=torch.bool)
    mask[[10, 11, 14, 15]] = True
    initial = torch.full((16,), 0.5, dtype=torch.float64)
    order = torch.randperm(40, generator=torch.Generator().manual_seed(4))
    options = dict(initial=initial, mask=mask, target=1, steps=6, trigger_lr=0.05, adv_every=2, adv_epochs=2,
                   adv_lr=0.1, noise_lambda=2.0, batch_size=16, low=-1.0, high=2.0)
    # Execute
    ours = search_trigger({}, view, torch.Generator().manual_seed(4), **options)[TRIGGER]
    theirs = authors_search(copy.deepcopy(view.model.module), view.x, view.y, initial, mask.double(), 1, 6, 0.05,
                            list(order.split(16)), -1.0, 2.0, adv_every=2, adv_epochs=2, adv_lr=0.1,
                            noise_lambda=2.0)
    without = authors_search(copy.deepcopy(view.model.module), view.x, view.y, initial, mask.double(), 1, 6, 0.05,
                             list(order.split(16)), -1.0, 2.0)
    # Assert: their trigger, and one the adversarial term moved (else this test could not see w)
    assert torch.allclose(ours[mask], theirs[mask], atol=1e-12)
    assert not torch.allclose(theirs[mask], without[mask])


def test_each_adversarial_weight_is_the_authors_over_the_whole_search_so_far(monkeypatch):
    # Prepare: three adversarial models (steps 2, 4 and 6 of 7); ours recorded as adversarial_weight returns them
    view = conv_view(seed=3)
    mask = torch.zeros(16, dtype=torch.bool)
    mask[[5, 6, 9, 10]] = True
    initial = torch.full((16,), 0.5, dtype=torch.float64)
    order = torch.randperm(40, generator=torch.Generator().manual_seed(5))
    ours = []

    def recorded(*args):
        ours.append(adversarial_weight(*args))
        return ours[-1]

    monkeypatch.setattr(a3fl_module, "adversarial_weight", recorded)
    options = dict(initial=initial, mask=mask, target=2, steps=7, trigger_lr=0.05, adv_every=2, adv_epochs=2,
                   adv_lr=0.1, noise_lambda=2.0, batch_size=16, low=-1.0, high=2.0)
    # Execute
    search_trigger({}, view, torch.Generator().manual_seed(5), **options)
    theirs = []
    authors_search(copy.deepcopy(view.model.module), view.x, view.y, initial, mask.double(), 2, 7, 0.05,
                   list(order.split(16)), -1.0, 2.0, adv_every=2, adv_epochs=2, adv_lr=0.1, noise_lambda=2.0,
                   weights=theirs)
    # Assert: each w reads the global gradient summed over every minibatch step since the search began
    assert len(ours) == 3
    assert ours == pytest.approx(theirs, abs=1e-12)


def test_the_patch_is_kept_in_each_pixels_own_box():
    # Prepare: a box narrower on some of the patch's pixels than on others, and steps that overshoot every box
    view = linear_view(seed=2)
    mask = torch.zeros(16, dtype=torch.bool)
    mask[[3, 4, 7, 8]] = True
    low, high = torch.full((16,), -1.0, dtype=torch.float64), torch.full((16,), 2.0, dtype=torch.float64)
    low[[4, 8]], high[[4, 8]] = 0.2, 0.4
    low[7], high[7] = -0.5, 0.1
    options = dict(initial=(low + high) / 2, mask=mask, target=0, steps=2, trigger_lr=10.0, adv_every=0,
                   adv_epochs=1, adv_lr=0.01, noise_lambda=0.01, batch_size=16, low=low, high=high)
    # Execute
    trigger = search_trigger({}, view, torch.Generator().manual_seed(0), **options)[TRIGGER]
    # Assert: every entry in its own pixel's box, and each of the patch's at its pixel's black or white
    assert bool(((low <= trigger) & (trigger <= high)).all())
    assert bool(((trigger == low) | (trigger == high))[mask].all())


def test_the_adversarial_model_and_its_gradient_are_the_authors_adv_model_and_its_grad():
    view = conv_view(seed=2)
    mask = torch.zeros(16, dtype=torch.bool)
    mask[[0, 1, 4, 5]] = True
    trigger = torch.full((16,), 1.5, dtype=torch.float64)
    batches = list(torch.randperm(40, generator=torch.Generator().manual_seed(1)).split(16))
    adv, grad = adversarial_model(view, batches, trigger, mask, epochs=3, lr=0.1)
    theirs = authors_adv_training(copy.deepcopy(view.model.module), batches, view.x, view.y, trigger,
                                  mask.double(), 3, 0.1)
    assert torch.allclose(adv, torch.nn.utils.parameters_to_vector(theirs.parameters()), atol=1e-12)
    assert torch.allclose(grad, torch.cat([p.grad.reshape(-1) for p in theirs.parameters()]), atol=1e-12)


def test_the_adversarial_weight_averages_the_conv_tensors_or_every_tensor_without_one():
    conv, linear = conv_view().model, linear_view().model
    assert weighted_tensors(conv) == [slice(0, 18), slice(18, 20)]  # conv.weight [2, 1, 3, 3], conv.bias [2]
    assert weighted_tensors(linear) == [slice(0, 48), slice(48, 51)]
    a, b = torch.tensor([1.0, 0.0, 1.0, 1.0]), torch.tensor([1.0, 1.0, -1.0, -1.0])
    expected = (F.cosine_similarity(a[:2], b[:2], dim=0) + F.cosine_similarity(a[2:], b[2:], dim=0)) / 2
    assert adversarial_weight(a, b, [slice(0, 2), slice(2, 4)]) == pytest.approx(float(expected))


@pytest.mark.parametrize("normalize", ["channel", "pixel"])
def test_the_patch_starts_half_a_standard_deviation_above_the_mean_pixel(normalize):
    # the authors' 0.5 in standardised units: the raw mean + 0.5 raw std, mapped to the inputs (0.5 on data
    # standardised per channel or per pixel); on data kept in raw units, the mean + 0.5 std of the values
    data = build_dataset("digits", {"num_clients": 10, "normalize": normalize}, np.random.default_rng(0))
    effect = ATTACKS.get("a3fl")(data, np.zeros(10, dtype=bool), np.random.default_rng(0))
    initial = effect.adapt.keywords["initial"]
    scale = data.meta[PIXELS]
    raw = np.broadcast_to(scale.mean + 0.5 * scale.std, (64,))  # half a std above each pixel's (channel's) mean
    gray = torch.as_tensor((raw - np.broadcast_to(scale.mean, (64,))) / np.broadcast_to(scale.std, (64,)))
    assert torch.allclose(gray.float(), torch.full((64,), 0.5)) and torch.equal(start_value(data), initial)
    assert torch.allclose(initial, gray.float())
    kept_raw = dataclasses.replace(data, meta={k: v for k, v in data.meta.items() if k != PIXELS})
    values = torch.cat([c.train.x.reshape(-1).double() for c in kept_raw.clients])
    assert float(start_value(kept_raw)[0]) == pytest.approx(float(values.mean() + 0.5 * values.std(correction=0)))


def test_the_search_makes_the_target_likelier_and_keeps_the_patch_a_valid_image():
    view = linear_view(seed=1)
    mask = torch.zeros(16, dtype=torch.bool)
    mask[:4] = True
    initial = torch.zeros(16, dtype=torch.float64)
    options = dict(initial=initial, mask=mask, target=1, steps=20, trigger_lr=0.05, adv_every=5, adv_epochs=2,
                   adv_lr=0.01, noise_lambda=0.01, batch_size=16, low=-1.0, high=1.0)
    trigger = search_trigger({}, view, torch.Generator().manual_seed(0), **options)[TRIGGER]

    def target_loss(t):
        out = view.model.forward(view.w, stamped(view.x, t, mask))
        return float(F.cross_entropy(out, torch.full((40,), 1)))

    assert target_loss(trigger) < target_loss(initial) - 0.1
    assert float(trigger[mask].abs().max()) <= 1.0


def test_the_round_poisons_malicious_samples_only_with_the_current_trigger():
    mask = torch.tensor([True, False, True, False])
    x = torch.zeros(6, 4)
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    bad = torch.tensor([True, True, True, False, False, False])
    state = {TRIGGER: torch.tensor([5.0, 6.0, 7.0, 8.0])}
    out_x, out_y = poison_round(x, y, torch.arange(6), bad, torch.Generator().manual_seed(0), state=state,
                                initial=torch.zeros(4), mask=mask, target=2, share=1.0)
    assert torch.equal(out_x[:3], torch.tensor([[5.0, 0.0, 7.0, 0.0]] * 3)) and torch.equal(out_x[3:], x[3:])
    assert out_y.tolist() == [2, 2, 2, 0, 1, 2]


def test_the_mask_is_the_patch_in_every_channel_of_the_flat_input():
    data = build_dataset("digits", {"name": "digits", "num_clients": 10}, np.random.default_rng(0))
    mask = trigger_mask(data, 3, "bottom_right")
    assert mask.shape == (64,) and int(mask.sum()) == 9
    assert mask.reshape(8, 8)[5:, 5:].all()


@pytest.mark.parametrize("params, message", [
    ({"steps": -1}, "steps must be a whole number >= 0"),
    ({"trigger_lr": 0.0}, "trigger_lr"),
    ({"adv_epochs": 0}, "adv_epochs must be a whole number >= 1"),
    ({"batch_size": 0}, "batch_size must be a whole number >= 1"),
    ({"size": 9}, "size must be a whole number of pixels in \\[1, 8\\]"),
    ({"target": 10}, "target must be a label in \\[0, 9\\]"),
    ({"poison_fraction": 1.5}, "poison_fraction"),
])
def test_bad_a3fl_options_are_one_error_line(params, message):
    data = build_dataset("digits", {"name": "digits", "num_clients": 10}, np.random.default_rng(0))
    with pytest.raises(ConfigError, match=message):
        ATTACKS.get("a3fl")(data, np.zeros(10, dtype=bool), np.random.default_rng(0), **params)


def small_config(rounds: int) -> ExperimentConfig:
    return attacked_digits_config({"name": "a3fl", "level": 0.3, "steps": 3, "adv_every": 2, "adv_epochs": 1}, rounds)


def test_a_resumed_run_goes_on_with_the_saved_trigger_to_the_uninterrupted_numbers(tmp_path):
    # Prepare: 6 rounds in one go
    trial = build_trial(small_config(6))
    whole, _ = simulate(trial)
    # Execute: 3 rounds, the state saved to disk and loaded in a new trial, then the other 3
    resumed_trial, state, resumed = run_interrupted(small_config(6), 3, tmp_path)
    assert TRIGGER in state.attack  # the trigger the first 3 rounds found
    # Assert: the same trigger, model and success rate as the uninterrupted run
    assert torch.allclose(resumed.attack[TRIGGER], whole.attack[TRIGGER], atol=1e-6)
    assert not torch.equal(whole.attack[TRIGGER], resumed_trial.threat.effect.adapt.keywords["initial"])
    assert torch.allclose(resumed.w, whole.w, atol=1e-5)
    _, metrics_whole = evaluate_state(trial, whole)
    _, metrics_resumed = evaluate_state(resumed_trial, resumed)
    assert metrics_resumed["asr_pooled"] == pytest.approx(metrics_whole["asr_pooled"], abs=1e-6)
