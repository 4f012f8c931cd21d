"""fedarena/attacks/a3fl.py checked against hand computations, one behaviour per test: the starting patch (0.5 in
standardised units, the raw values' mean + 0.5 std, kept in the valid box), the mask, the stamp and the target loss;
the adversarial model's SGD (momentum 0.9, weight decay 5e-4) and its weight (cosine with eps 1e-8); the search's
signed steps on a linear model's gradients written out, its schedule of adversarial models, the weighted adversarial
term and the global gradient summed over the search; the round's poisoning (the draw recomputed, its edge); and the
registry entry, its defaults, every range's edges and each refusal word for word
(make mutants MODULE=fedarena/attacks/a3fl.py)."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import fedarena.attacks.a3fl as a3fl_module
from fedarena.attacks.a3fl import (
    a3fl,
    adversarial_model,
    adversarial_weight,
    poison_round,
    restamp,
    search_trigger,
    stamped,
    start_value,
    trigger_loss,
    trigger_mask,
    weighted_tensors,
)
from fedarena.attacks.base import ATTACKS, AttackView, attack_reads
from fedarena.datasets.base import ClientData, FederatedDataset, Split
from fedarena.datasets.pixels import PIXELS, PixelScale
from fedarena.errors import ConfigError
from fedarena.models.functional import FlatModel

F32 = np.float32


def images(trains, *, shape=(1, 4, 4), classes=3, scale=None, others=None, task="classification"):
    """One client per entry of ``trains`` (its training inputs, reshaped to [n, *shape]); val and test hold
    ``others`` (default: the training inputs); labels 0, 1, 2, ... cycling; ``scale``: meta[PIXELS]."""
    clients = []
    for x in trains:
        x = torch.as_tensor(x, dtype=torch.float32).reshape(-1, *shape)
        y = torch.arange(len(x)) % classes
        rest = x if others is None else torch.as_tensor(others, dtype=torch.float32).reshape(-1, *shape)
        other = Split(rest, torch.arange(len(rest)) % classes)
        clients.append(ClientData(Split(x, y if task == "classification" else y.float()), other, other))
    meta = {} if scale is None else {PIXELS: scale}
    return FederatedDataset("tiny", clients, classes, shape, "fp", task, meta)


def channel_scale(mean=0.25, std=0.5, channels=1):
    """Per-channel standardisation of raw pixels in [0, 1]: the box is [-mean / std, (1 - mean) / std]."""
    return PixelScale(np.full((channels, 1, 1), mean, dtype=F32), np.full((channels, 1, 1), std, dtype=F32), 1.0,
                      "channel")


def standardised(**kwargs):
    return images([torch.linspace(-1, 1, 32)], scale=channel_scale(), **kwargs)


def linear_view(seed=0, n=6, dim=8, classes=3):
    """A float64 linear softmax model with weights W [classes, dim] and bias b; flat w = [W, b]."""
    gen = torch.Generator().manual_seed(seed)
    model = FlatModel(torch.nn.Linear(dim, classes).double(), "classification")
    w = torch.randn(dim * classes + classes, generator=gen, dtype=torch.float64)
    x = torch.randn(n, dim, generator=gen, dtype=torch.float64)
    y = torch.randint(0, classes, (n,), generator=gen)
    return AttackView(w, model, x, y, 0)


def unflat(w, dim, classes):
    return w[: dim * classes].reshape(classes, dim), w[dim * classes:]


def linear_grads(w, x, labels, classes):
    """(dCE/dw flat, dCE/dx) of the mean cross-entropy of the linear softmax model w, written out:
    d = (softmax(x W^T + b) - onehot) / m, dW = d^T x, db = sum d, dx = d W."""
    W, b = unflat(w, x.shape[1], classes)
    d = (torch.softmax(x @ W.T + b, -1) - F.one_hot(labels, classes).double()) / len(x)
    return torch.cat([(d.T @ x).reshape(-1), d.sum(0)]), d @ W


def trigger_grad(w, x, t, mask, target, classes):
    """d CE(target) / d trigger: the input gradient summed over the samples, on the mask's entries only."""
    stamped_x = torch.where(mask, t, x)
    _, dx = linear_grads(w, stamped_x, torch.full((len(x),), target), classes)
    return dx.sum(0) * mask


# the registry entry, its defaults, its ranges and its refusals


def test_a3fl_is_registered_at_version_2_and_reads_nothing_else():
    assert ATTACKS.get("a3fl") is a3fl and ATTACKS.version("a3fl") == 2
    assert attack_reads({"name": "a3fl", "level": 0.3}) == ()


def test_the_defaults_are_the_documented_ones():
    # Prepare: 4x4 one-channel images standardised per channel (box [-0.5, 1.5])
    data = standardised()
    # Execute
    effect = a3fl(data, np.zeros(1, dtype=bool), np.random.default_rng(0))
    # Assert: the search's options, the round's poisoning and the backdoor's target
    search = effect.adapt
    assert search.func is search_trigger
    options = {k: v for k, v in search.keywords.items() if k not in ("initial", "mask", "low", "high")}
    assert options == {"target": 0, "steps": 100, "trigger_lr": 0.01, "adv_every": 10, "adv_epochs": 5,
                       "adv_lr": 0.01, "noise_lambda": 0.01, "batch_size": 64}
    bottom_right = torch.zeros(4, 4, dtype=torch.bool)
    bottom_right[1:, 1:] = True
    assert torch.equal(search.keywords["mask"], bottom_right.reshape(-1))
    assert torch.equal(search.keywords["initial"], torch.full((16,), 0.5))
    assert torch.equal(search.keywords["low"], torch.full((16,), -0.5))
    assert torch.equal(search.keywords["high"], torch.full((16,), 1.5))
    corrupt = effect.corrupt
    assert corrupt.func is poison_round
    assert set(corrupt.keywords) == {"initial", "mask", "target", "share"}
    assert corrupt.keywords["share"] == 0.25 and corrupt.keywords["target"] == 0
    assert torch.equal(corrupt.keywords["mask"], bottom_right.reshape(-1))
    assert torch.equal(corrupt.keywords["initial"], torch.full((16,), 0.5))
    assert effect.backdoor.target == 0 and effect.backdoor.stamp is None and effect.backdoor.source is None
    assert effect.bound.positions == tuple((r, c) for r in (1, 2, 3) for c in (1, 2, 3))
    assert effect.bound.linf is None and effect.bound.test_linf is None
    assert effect.stop_round is None and effect.dataset is data and effect.tamper is None


def test_the_options_given_reach_the_search_the_poisoning_and_the_backdoor():
    data = standardised()
    effect = a3fl(data, np.zeros(1, dtype=bool), np.random.default_rng(0), target=2, size=2, position=[0, 1],
                  poison_fraction=0.5, steps=7, trigger_lr=0.2, adv_every=3, adv_epochs=2, adv_lr=0.3,
                  noise_lambda=4, batch_size=5, stop_round=6)
    options = {k: v for k, v in effect.adapt.keywords.items() if k not in ("initial", "mask", "low", "high")}
    assert options == {"target": 2, "steps": 7, "trigger_lr": 0.2, "adv_every": 3, "adv_epochs": 2, "adv_lr": 0.3,
                       "noise_lambda": 4.0, "batch_size": 5}
    assert isinstance(options["noise_lambda"], float)
    assert effect.adapt.keywords["mask"].nonzero().reshape(-1).tolist() == [1, 2, 5, 6]  # rows 0-1, columns 1-2
    assert effect.corrupt.keywords["share"] == 0.5 and effect.corrupt.keywords["target"] == 2
    assert effect.backdoor.target == 2 and effect.stop_round == 6
    assert effect.bound.positions == ((0, 1), (0, 2), (1, 1), (1, 2))


def test_the_backdoor_restamps_test_samples_with_the_current_trigger():
    data = standardised()
    effect = a3fl(data, np.zeros(1, dtype=bool), np.random.default_rng(0), size=1, position=[3, 0])
    x = torch.zeros(2, 1, 4, 4)
    fresh = effect.backdoor.restamp(x, {})  # no trigger yet: the starting patch
    later = effect.backdoor.restamp(x, {"trigger": torch.full((16,), -0.25)})
    assert fresh[:, 0, 3, 0].tolist() == [0.5, 0.5] and later[:, 0, 3, 0].tolist() == [-0.25, -0.25]
    fresh[:, 0, 3, 0], later[:, 0, 3, 0] = 0.0, 0.0
    assert not fresh.any() and not later.any()  # nothing else is stamped
    assert torch.equal(restamp(x, {}, initial=torch.full((16,), 0.75), mask=torch.ones(16, dtype=torch.bool)),
                       torch.full((2, 1, 4, 4), 0.75))


@pytest.mark.parametrize("key, least", [("steps", 0), ("adv_every", 0), ("adv_epochs", 1), ("batch_size", 1)])
def test_each_whole_option_accepts_its_least_value_and_refuses_the_one_below(key, least):
    data = standardised()
    effect = a3fl(data, np.zeros(1, dtype=bool), np.random.default_rng(0), **{key: least})
    assert effect.adapt.keywords[key] == least
    with pytest.raises(ConfigError) as refused:
        a3fl(data, np.zeros(1, dtype=bool), np.random.default_rng(0), **{key: least - 1})
    assert str(refused.value) == f"attack 'a3fl': {key} must be a whole number >= {least}, got {least - 1}"
    with pytest.raises(ConfigError, match=f"^attack 'a3fl': {key} must be a whole number >= {least}, got True$"):
        a3fl(data, np.zeros(1, dtype=bool), np.random.default_rng(0), **{key: True})


@pytest.mark.parametrize("key", ["trigger_lr", "adv_lr"])
def test_each_learning_rate_must_be_above_zero(key):
    data = standardised()
    assert a3fl(data, np.zeros(1, dtype=bool), np.random.default_rng(0), **{key: 1e-300}).adapt.keywords[key] == 1e-300
    with pytest.raises(ConfigError) as refused:
        a3fl(data, np.zeros(1, dtype=bool), np.random.default_rng(0), **{key: 0.0})
    assert str(refused.value) == f"attack 'a3fl': {key} must be > 0, got 0.0"


def test_the_adversarial_terms_weight_is_a_finite_number_at_least_zero():
    # NaN once passed silently: torch.sign(nan) is 0, so every trigger step after the first adversarial model stood
    data = standardised()
    assert a3fl(data, np.zeros(1, dtype=bool), np.random.default_rng(0), noise_lambda=0.0).adapt.keywords[
        "noise_lambda"] == 0.0
    for bad in (-1e-300, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match=r"attack 'a3fl': noise_lambda must be"):
            a3fl(data, np.zeros(1, dtype=bool), np.random.default_rng(0), noise_lambda=bad)


def test_the_poisoned_share_is_a_fraction_in_0_1():
    data = standardised()
    assert a3fl(data, np.zeros(1, dtype=bool), np.random.default_rng(0), poison_fraction=1.0).corrupt.keywords[
        "share"] == 1.0
    for bad in (0.0, 1.0000001):
        with pytest.raises(ConfigError) as refused:
            a3fl(data, np.zeros(1, dtype=bool), np.random.default_rng(0), poison_fraction=bad)
        assert str(refused.value) == f"attack 'a3fl': poison_fraction must be a fraction in (0, 1], got {bad!r}"


@pytest.mark.parametrize("params, message", [
    ({"target": 3}, "attack 'a3fl': target must be a label in [0, 2] of dataset 'tiny', got 3"),
    ({"target": -1}, "attack 'a3fl': target must be a label in [0, 2] of dataset 'tiny', got -1"),
    ({"size": 5}, "attack 'a3fl': size must be a whole number of pixels in [1, 4] for the 4x4 images of dataset "
                  "'tiny', got 5"),
    ({"size": 0}, "attack 'a3fl': size must be a whole number of pixels in [1, 4] for the 4x4 images of dataset "
                  "'tiny', got 0"),
    ({"position": "middle"}, "attack 'a3fl': position must be one of bottom_right, top_left, top_right, "
                             "bottom_left or [row, col], got 'middle'"),
    ({"size": 2, "position": [3, 0]}, "attack 'a3fl': a 2x2 trigger at [3, 0] leaves the 4x4 image; rows and "
                                      "columns must lie in [0, 2] and [0, 2]"),
    ({"stop_round": -1}, "attack 'a3fl': stop_round must be a round number >= 0 or null, got -1"),
])
def test_each_refusal_names_a3fl_and_the_rule(params, message):
    with pytest.raises(ConfigError) as refused:
        a3fl(standardised(), np.zeros(1, dtype=bool), np.random.default_rng(0), **params)
    assert str(refused.value) == message


def test_the_edges_of_target_size_and_stop_round_are_accepted():
    data = standardised()
    effect = a3fl(data, np.zeros(1, dtype=bool), np.random.default_rng(0), target=2, size=4, stop_round=0)
    assert effect.backdoor.target == 2 and effect.stop_round == 0
    assert bool(effect.adapt.keywords["mask"].all())
    assert len(effect.bound.positions) == 16


def test_a3fl_needs_a_classification_dataset():
    data = images([torch.zeros(2, 16)], task="regression")
    with pytest.raises(ConfigError) as refused:
        a3fl(data, np.zeros(1, dtype=bool), np.random.default_rng(0))
    assert str(refused.value) == "attack 'a3fl' needs a classification dataset; 'tiny' is a regression task"


# the starting patch, the mask, the stamp and the target loss


def test_standardised_data_start_half_a_std_above_the_mean_kept_in_each_pixels_box():
    # Prepare: pixels standardised one by one; pixel 0's white is 0.2 (so 0.5 is out of its box), pixel 1's black
    # is 1.0; the training values themselves (mean 3) are not read
    mean = np.full(16, 0.25, dtype=F32)
    std = np.full(16, 0.5, dtype=F32)
    mean[0], mean[1] = 0.9, -0.5
    data = images([torch.full((2, 16), 3.0), torch.full((1, 16), 3.5)], scale=PixelScale(
        mean.reshape(1, 4, 4), std.reshape(1, 4, 4), 1.0, "pixel"))
    # Execute
    start = start_value(data)
    # Assert
    expected = torch.full((16,), 0.5)
    expected[0], expected[1] = (1 - 0.9) / 0.5, 0.5 / 0.5
    assert start.shape == (16,) and start.dtype == torch.float32
    assert torch.allclose(start, expected, rtol=0, atol=1e-7)


def test_raw_data_start_at_the_training_values_mean_plus_half_their_std():
    # Prepare: training values 1, 3, ..., 11 twice (mean 6, population variance 35 / 3) over two clients; the
    # validation and test splits (0 and 20) widen the box but are not averaged
    a = torch.tensor([[1.0, 3, 5, 7]])
    b = torch.tensor([[9.0, 11, 1, 3], [5, 7, 9, 11]])
    data = images([a, b], shape=(2, 2), others=[[0.0, 20, 0, 20]])
    # Execute
    start = start_value(data)
    # Assert: 6 + 0.5 sqrt(35 / 3) = 7.7078... on every entry
    assert start.shape == (4,)
    assert start.tolist() == pytest.approx([6 + 0.5 * math.sqrt(35 / 3)] * 4, rel=1e-7)


def test_a_raw_start_past_the_whitest_value_is_kept_in_the_box():
    # training values 0 once and 1 nineteen times: mean 0.95 + half the std 0.218 > 1, the whitest value
    x = torch.tensor([0.0] + [1.0] * 19).reshape(5, 4)
    data = images([x], shape=(2, 2))
    values = x.double().reshape(-1)
    assert float(values.mean() + 0.5 * values.std(correction=0)) > 1.0
    assert start_value(data).tolist() == [1.0] * 4


def test_the_mask_is_the_patch_in_every_channel():
    # Prepare: 3-channel 4x4 images; a 2x2 patch with its top-left pixel at row 1, column 0
    data = images([torch.zeros(2, 48)], shape=(3, 4, 4), scale=channel_scale(channels=3))
    # Execute
    mask = trigger_mask(data, 2, [1, 0])
    # Assert: pixels (1, 0), (1, 1), (2, 0), (2, 1) of each channel, nothing else
    expected = [c * 16 + r * 4 + col for c in range(3) for r in (1, 2) for col in (0, 1)]
    assert mask.dtype == torch.bool and mask.shape == (48,)
    assert mask.nonzero().reshape(-1).tolist() == expected
    # one channel, flat: the bottom right corner
    flat = trigger_mask(standardised(), 3, "bottom_right")
    assert flat.nonzero().reshape(-1).tolist() == [5, 6, 7, 9, 10, 11, 13, 14, 15]


def test_a_stamp_writes_the_trigger_on_the_mask_and_keeps_the_rest():
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    trigger = torch.tensor([10.0, 20.0, 30.0, 40.0], dtype=torch.float64)
    mask = torch.tensor([True, False, False, True])
    out = stamped(x, trigger, mask)
    assert out.dtype == torch.float32
    assert out.tolist() == [[10.0, 1.0, 2.0, 40.0], [10.0, 5.0, 6.0, 40.0], [10.0, 9.0, 10.0, 40.0]]
    images_in = torch.zeros(3, 1, 2, 2)
    assert stamped(images_in, trigger, mask).tolist() == [[[[10.0, 0.0], [0.0, 40.0]]]] * 3
    assert x.tolist()[0] == [0.0, 1.0, 2.0, 3.0]  # the input itself is not written


def test_the_trigger_loss_is_the_target_cross_entropy_of_the_stamped_samples():
    # Prepare: 2 samples of 4 inputs, 3 classes; the model's logits written out
    view = linear_view(seed=1, n=2, dim=4)
    mask = torch.tensor([False, True, True, False])
    trigger = torch.tensor([9.0, 0.5, -0.25, 9.0], dtype=torch.float64)
    W, b = unflat(view.w, 4, 3)
    x = torch.where(mask, trigger, view.x)
    logits = x @ W.T + b
    expected = sum(math.log(sum(math.exp(v) for v in row)) - row[2] for row in logits.tolist()) / 2
    # Execute / Assert
    assert float(trigger_loss(view.model, view.w, view.x, trigger, mask, 2)) == pytest.approx(expected, rel=1e-12)


# the adversarial model and its weight


def test_the_adversarial_model_is_sgd_with_momentum_0_9_and_weight_decay_5e_4_written_out():
    # Prepare: 6 samples in minibatches of 4 and 2, three epochs, a trigger on two inputs
    view = linear_view(seed=2)
    mask = torch.zeros(8, dtype=torch.bool)
    mask[[2, 5]] = True
    trigger = torch.full((8,), 1.5, dtype=torch.float64)
    batches = [torch.tensor([4, 0, 5, 2]), torch.tensor([1, 3])]
    # Execute
    adv, grad = adversarial_model(view, batches, trigger, mask, epochs=3, lr=0.1)
    # Assert: v <- 0.9 v + (g + 5e-4 w), w <- w - lr v on the stamped samples' true labels; the gradient is the
    # last minibatch's, at the weights before the last step, without the decay
    w, v = view.w.clone(), torch.zeros_like(view.w)
    for _ in range(3):
        for rows in batches:
            g, _ = linear_grads(w, torch.where(mask, trigger, view.x[rows]), view.y[rows], 3)
            v = 0.9 * v + (g + 5e-4 * w)
            last, w = g, w - 0.1 * v
    assert torch.allclose(adv, w, rtol=0, atol=1e-13)
    assert torch.allclose(grad, last, rtol=0, atol=1e-13)
    assert not adv.requires_grad and not grad.requires_grad


def test_the_adversarial_model_does_not_move_the_trigger_or_the_global_model():
    view = linear_view(seed=3)
    w0 = view.w.clone()
    trigger = torch.full((8,), 0.5, dtype=torch.float64, requires_grad=True)
    adversarial_model(view, [torch.arange(6)], trigger, torch.ones(8, dtype=torch.bool), epochs=1, lr=0.5)
    assert trigger.grad is None and torch.equal(view.w, w0)


def test_the_adversarial_weight_is_the_mean_cosine_over_the_spans_with_eps_1e_8():
    a = torch.tensor([3.0, 4.0, 1e-9, 0.0], dtype=torch.float64)
    b = torch.tensor([4.0, 3.0, 1.0, 0.0], dtype=torch.float64)
    # span 0: 24 / 25; span 1: a norm of 1e-9 counts as eps = 1e-8: 1e-9 / 1e-8 = 0.1
    assert adversarial_weight(a, b, [slice(0, 2)]) == pytest.approx(0.96, rel=1e-15)
    assert adversarial_weight(a, b, [slice(2, 4)]) == pytest.approx(0.1, rel=1e-12)
    assert adversarial_weight(a, b, [slice(0, 2), slice(2, 4)]) == pytest.approx(0.53, rel=1e-12)
    assert adversarial_weight(a, -b, [slice(0, 2), slice(2, 4)]) == pytest.approx(-0.53, rel=1e-12)
    assert adversarial_weight(torch.zeros(4), b.float(), [slice(0, 4)]) == 0.0


def test_the_weight_reads_a_models_own_parameter_tensors():
    # fc.weight 8, fc.bias 2, features.0.weight 2, features.0.bias 1, out.weight 6, out.bias 2: the convolution's
    # two tensors, found by the layer's type (not its name) at any depth
    net = torch.nn.Module()
    net.fc, net.features, net.out = torch.nn.Linear(4, 2), torch.nn.Sequential(torch.nn.Conv1d(1, 1, 2)), \
        torch.nn.Linear(3, 2)
    assert weighted_tensors(FlatModel(net, "classification")) == [slice(10, 12), slice(12, 13)]
    # without a convolution: every tensor
    mlp = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 2))
    assert weighted_tensors(FlatModel(mlp, "classification")) == [slice(0, 6), slice(6, 8), slice(8, 12),
                                                                  slice(12, 14)]


# the trigger search


def test_the_search_without_adversarial_models_is_the_signed_descent_written_out():
    # Prepare: 6 samples in minibatches of 4 and 2 (their order drawn from the generator), two steps
    view = linear_view(seed=4)
    mask = torch.zeros(8, dtype=torch.bool)
    mask[[1, 2, 6]] = True
    initial = torch.linspace(-0.6, 0.8, 8)
    low, high = torch.full((8,), -1.0), torch.full((8,), 1.0)
    low[6], high[6] = 0.3, 0.33
    options = dict(initial=initial, mask=mask, target=1, steps=2, trigger_lr=0.2, adv_every=0, adv_epochs=1,
                   adv_lr=0.1, noise_lambda=0.01, batch_size=4, low=low, high=high)
    # Execute
    out = search_trigger({}, view, torch.Generator().manual_seed(7), **options)
    # Assert: per step and minibatch, t <- clamp(t - lr sign(dCE(target)/dt), low, high); the rest as it was
    t = initial.double()
    for _ in range(2):
        for rows in torch.randperm(6, generator=torch.Generator().manual_seed(7)).split(4):
            t = torch.clamp(t - 0.2 * trigger_grad(view.w, view.x[rows], t, mask, 1, 3).sign(), low.double(),
                            high.double())
    assert set(out) == {"trigger"}
    assert out["trigger"].dtype == torch.float64 and out["trigger"].device.type == "cpu"
    assert torch.allclose(out["trigger"], t, rtol=0, atol=1e-15)
    assert torch.equal(out["trigger"][~mask], initial.double()[~mask])
    assert float(out["trigger"][6]) in (float(low[6]), float(high[6]))  # its own box's edge


def test_the_search_goes_on_from_the_states_trigger_and_keeps_the_states_other_keys():
    view = linear_view(seed=5)
    mask = torch.zeros(8, dtype=torch.bool)
    mask[[0, 3]] = True
    saved = torch.tensor([0.1, 5.0, 5.0, -0.1, 5.0, 5.0, 5.0, 5.0])
    options = dict(initial=torch.zeros(8), mask=mask, target=0, steps=1, trigger_lr=0.05, adv_every=0,
                   adv_epochs=1, adv_lr=0.1, noise_lambda=0.01, batch_size=6, low=-9.0, high=9.0)
    out = search_trigger({"trigger": saved, "other": torch.ones(1)}, view, torch.Generator().manual_seed(0),
                         **options)
    assert set(out) == {"trigger", "other"} and torch.equal(out["other"], torch.ones(1))
    step = trigger_grad(view.w, view.x, saved.double(), mask, 0, 3).sign()
    assert torch.allclose(out["trigger"], saved.double() - 0.05 * step, rtol=0, atol=1e-15)
    assert torch.equal(saved[0], torch.tensor(0.1))  # the state's own tensor is not written
    # no steps: the trigger as it was, in the samples' dtype
    zero = search_trigger({"trigger": saved}, view, torch.Generator().manual_seed(0), **{**options, "steps": 0})
    assert torch.equal(zero["trigger"], saved.double())


def test_a_patch_entry_the_model_ignores_is_not_moved():
    # Prepare: input 3 has no weight in any class, so the target loss's gradient there is exactly zero
    view = linear_view(seed=6)
    W, b = unflat(view.w.clone(), 8, 3)
    W[:, 3] = 0.0
    view = AttackView(torch.cat([W.reshape(-1), b]), view.model, view.x, view.y, 0)
    mask = torch.zeros(8, dtype=torch.bool)
    mask[[3, 4]] = True
    options = dict(initial=torch.full((8,), 0.25), mask=mask, target=2, steps=3, trigger_lr=0.1, adv_every=0,
                   adv_epochs=1, adv_lr=0.1, noise_lambda=0.01, batch_size=3, low=-1.0, high=1.0)
    # Execute
    out = search_trigger({}, view, torch.Generator().manual_seed(1), **options)["trigger"]
    # Assert: sign(0) = 0, no step; input 4 moves (3 minibatch steps of 0.1 each, every one a whole step)
    assert float(out[3]) == 0.25
    assert abs(float(out[4]) - 0.25) > 0.05


def test_adversarial_models_come_every_adv_every_steps_never_at_step_0(monkeypatch):
    # Prepare: count the target losses (one per minibatch, two once an adversarial model is there) and note the
    # count whenever an adversarial model is built
    calls, built = [], []

    def counted(*args):
        calls.append(1)
        return trigger_loss(*args)

    def noted(*args, **kwargs):
        built.append(len(calls))
        return adversarial_model(*args, **kwargs)

    monkeypatch.setattr(a3fl_module, "trigger_loss", counted)
    monkeypatch.setattr(a3fl_module, "adversarial_model", noted)
    view = linear_view(seed=7)
    mask = torch.zeros(8, dtype=torch.bool)
    mask[[0, 7]] = True

    def run(steps, adv_every):
        calls.clear()
        built.clear()
        options = dict(initial=torch.zeros(8), mask=mask, target=1, steps=steps, trigger_lr=0.1,
                       adv_every=adv_every, adv_epochs=1, adv_lr=0.1, noise_lambda=0.5, batch_size=4, low=-2.0,
                       high=2.0)
        search_trigger({}, view, torch.Generator().manual_seed(2), **options)
        return list(built), len(calls)

    # Execute / Assert: 2 minibatches a step; models at steps 3 and 6 of 7 (after 3 x 2 and 6 + 3 x 4 losses)
    assert run(7, 3) == ([6, 18], 22)
    assert run(2, 1) == ([2], 6)  # every step from step 1
    assert run(3, 1) == ([2, 6], 10)
    assert run(4, 0) == ([], 8)  # adv_every 0: none
    assert run(4, 4) == ([], 8)  # the first would come at step 4, past the last step


def test_the_global_gradient_the_weight_reads_is_summed_over_every_minibatch_step_so_far(monkeypatch):
    # Prepare: a model every 2 steps of 3 (at step 2), 2 minibatches a step; record what the weight reads
    seen = []

    def recorded(adv_grad, global_grad, spans):
        seen.append((adv_grad.clone(), global_grad.clone(), list(spans)))
        return adversarial_weight(adv_grad, global_grad, spans)

    monkeypatch.setattr(a3fl_module, "adversarial_weight", recorded)
    view = linear_view(seed=8)
    mask = torch.zeros(8, dtype=torch.bool)
    mask[[2, 3, 4]] = True
    initial = torch.full((8,), 0.1, dtype=torch.float64)
    options = dict(initial=initial, mask=mask, target=0, steps=3, trigger_lr=0.05, adv_every=2, adv_epochs=1,
                   adv_lr=0.1, noise_lambda=0.01, batch_size=4, low=-3.0, high=3.0)
    # Execute
    search_trigger({}, view, torch.Generator().manual_seed(3), **options)
    # Assert: the global model's target-loss gradient (w and b) summed over the 4 minibatch steps before step 2,
    # each at the trigger of its step; the adversarial gradient the model's own; the linear model's two tensors
    batches = torch.randperm(6, generator=torch.Generator().manual_seed(3)).split(4)
    t, total = initial, torch.zeros_like(view.w)
    for _ in range(2):
        for rows in batches:
            x = torch.where(mask, t, view.x[rows])
            g, _ = linear_grads(view.w, x, torch.zeros(len(rows), dtype=torch.long), 3)
            total = total + g
            t = torch.clamp(t - 0.05 * trigger_grad(view.w, view.x[rows], t, mask, 0, 3).sign(), -3.0, 3.0)
    assert len(seen) == 1
    adv_grad, global_grad, spans = seen[0]
    assert torch.allclose(global_grad, total, rtol=0, atol=1e-14)
    assert torch.allclose(adv_grad, adversarial_model(view, list(batches), t, mask, epochs=1, lr=0.1)[1], rtol=0,
                          atol=1e-14)
    assert spans == [slice(0, 24), slice(24, 27)]


def test_the_step_with_an_adversarial_model_descends_the_weighted_sum_of_both_losses(monkeypatch):
    # Prepare: an adversarial model fixed in advance (the global one's rows permuted, negated and shifted) and its
    # weight fixed at 0.7; noise_lambda 3: the term weighs 2.1; one minibatch, two steps (the model at step 1)
    view = linear_view(seed=9, n=5, dim=12)
    W, b = unflat(view.w, 12, 3)
    adv = torch.cat([(-W[[2, 0, 1]] + 0.5).reshape(-1), b])
    monkeypatch.setattr(a3fl_module, "adversarial_model", lambda *args, **kwargs: (adv, torch.zeros_like(adv)))
    monkeypatch.setattr(a3fl_module, "adversarial_weight", lambda *args: 0.7)
    mask = torch.zeros(12, dtype=torch.bool)
    mask[:10] = True
    initial = torch.linspace(-0.5, 0.5, 12)
    options = dict(initial=initial, mask=mask, target=1, steps=2, trigger_lr=0.1, adv_every=1, adv_epochs=1,
                   adv_lr=0.1, noise_lambda=3.0, batch_size=8, low=-5.0, high=5.0)
    # Execute
    out = search_trigger({}, view, torch.Generator().manual_seed(4), **options)["trigger"]
    # Assert: step 0 on the global loss alone; step 1 on CE(global) + 3 x 0.7 x CE(adversarial)
    t0 = initial.double()
    t1 = t0 - 0.1 * trigger_grad(view.w, view.x, t0, mask, 1, 3).sign()
    both = trigger_grad(view.w, view.x, t1, mask, 1, 3) + 2.1 * trigger_grad(adv, view.x, t1, mask, 1, 3)
    assert torch.allclose(out, t1 - 0.1 * both.sign(), rtol=0, atol=1e-15)
    # the term turns some steps (else this test could not see its weight)
    alone = t1 - 0.1 * trigger_grad(view.w, view.x, t1, mask, 1, 3).sign()
    assert not torch.allclose(out, alone)


# the round's poisoning


def test_each_malicious_sample_is_poisoned_where_its_draw_is_below_the_share():
    # Prepare: 8 samples, the first 5 malicious; the share is exactly one malicious sample's draw (not below it)
    draws = torch.rand(8, generator=torch.Generator().manual_seed(5))
    bad = torch.tensor([True] * 5 + [False] * 3)
    ordered = draws[:5].sort().values
    share = float(ordered[3])  # 3 malicious draws below it, one equal
    x = torch.arange(16, dtype=torch.float32).reshape(8, 2)
    y = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    state = {"trigger": torch.tensor([-7.0, 9.0])}
    mask = torch.tensor([False, True])
    # Execute
    out_x, out_y = poison_round(x, y, torch.arange(8), bad, torch.Generator().manual_seed(5), state=state,
                                initial=torch.zeros(2), mask=mask, target=2, share=share)
    # Assert
    chosen = bad & (draws < share)
    assert int(chosen.sum()) == 3 and bool((draws[5:] < share).any())  # an honest draw below it too
    expected_x, expected_y = x.clone(), y.clone()
    expected_x[chosen, 1] = 9.0
    expected_y[chosen] = 2
    assert torch.equal(out_x, expected_x) and torch.equal(out_y, expected_y)
    assert x[:, 1].tolist() == [1.0, 3.0, 5.0, 7.0, 9.0, 11.0, 13.0, 15.0]  # the inputs themselves are not written


def test_honest_samples_are_never_poisoned_and_the_start_comes_before_any_trigger():
    x = torch.zeros(4, 3)
    y = torch.tensor([0, 1, 0, 1])
    bad = torch.tensor([False, True, False, True])
    out_x, out_y = poison_round(x, y, torch.arange(4), bad, torch.Generator().manual_seed(0), state={},
                                initial=torch.tensor([4.0, 5.0, 6.0]), mask=torch.tensor([True, True, False]),
                                target=0, share=1.0)
    assert out_x.tolist() == [[0.0, 0.0, 0.0], [4.0, 5.0, 0.0], [0.0, 0.0, 0.0], [4.0, 5.0, 0.0]]
    assert out_y.tolist() == [0, 0, 0, 0]


def test_a_round_that_draws_no_sample_returns_the_data_as_it_is():
    x, y = torch.zeros(3, 2), torch.tensor([1, 1, 1])
    draws = torch.rand(3, generator=torch.Generator().manual_seed(6))
    share = float(draws.min())  # no draw is below the least one
    out_x, out_y = poison_round(x, y, torch.arange(3), torch.ones(3, dtype=torch.bool),
                                torch.Generator().manual_seed(6), state={}, initial=torch.ones(2),
                                mask=torch.ones(2, dtype=torch.bool), target=0, share=share)
    assert out_x is x and out_y is y
