"""A3FL: the trigger search against the global model (the authors' signed steps, transcribed in float64), the
round's poisoning with the current trigger, the success rate under the evaluated round's trigger, and a resumed
run that goes on with the saved trigger to the numbers of an uninterrupted one."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from resume import attacked_digits_config, run_interrupted

from fedarena.attacks import ATTACKS
from fedarena.attacks.a3fl import TRIGGER, poison_round, search_trigger, stamped, trigger_mask
from fedarena.attacks.base import AttackView
from fedarena.config import ExperimentConfig
from fedarena.datasets.catalog import build_dataset
from fedarena.errors import ConfigError
from fedarena.models.functional import FlatModel
from fedarena.simulation.engine import evaluate_state, simulate
from fedarena.simulation.setup import build_trial


def linear_view(seed=0, n=40, dim=16, classes=3):
    gen = torch.Generator().manual_seed(seed)
    model = FlatModel(torch.nn.Linear(dim, classes).double(), "classification")
    w = torch.randn(dim * classes + classes, generator=gen, dtype=torch.float64) * 0.3
    x = torch.randn(n, dim, generator=gen, dtype=torch.float64)
    y = torch.randint(0, classes, (n,), generator=gen)
    return AttackView(w, model, x, y, 0)


def authors_search(model, w, x, trigger, mask, target, steps, lr, batches, low, high):
    """hfzhang31/A3FL search_trigger without adversarial models: per step and minibatch, t <- clamp(t - lr *
    sign(grad_t CE(model(t * m + (1 - m) * x), target)))."""
    t = trigger.clone()
    for _ in range(steps):
        for rows in batches:
            t.requires_grad_()
            inputs = t * mask + (1 - mask) * x[rows]
            out = model.forward(w, inputs)
            loss = F.cross_entropy(out, torch.full((len(rows),), target, dtype=torch.long))
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
    theirs = authors_search(view.model, view.w, view.x, initial, mask.double(), 2, 5, 0.05, list(order.split(16)),
                            -1.0, 2.0)
    assert torch.allclose(ours[mask], theirs[mask], atol=1e-12)


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
