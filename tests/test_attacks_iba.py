"""IBA: the generator's trigger bounded per pixel by eps in raw pixel units and kept in the valid box without moving
a valid image (on real per-pixel and per-channel data), its training against the global model, the authors'
two-phase schedule (clean data until the success rate reaches 0.85, then poisoning with the bound decaying from
the switch and the generator retrained every other round), the engine's check of the declared bound (an attack
that oversteps it by 1% fails the run), and a resumed run that goes on with the saved generator to the numbers of
an uninterrupted one; bad input in one line."""

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from resume import attacked_digits_config, run_interrupted

from fedarena.attacks import ATTACKS
from fedarena.attacks.base import AttackView
from fedarena.attacks.bounds import BoundExceeded
from fedarena.attacks.iba import (
    GENERATOR,
    SUCCESS,
    SWITCH,
    current_bound,
    initial_generator,
    poison_round,
    scheduled,
    train_generator,
    triggered,
)
from fedarena.config import ExperimentConfig
from fedarena.datasets.catalog import build_dataset
from fedarena.datasets.pixels import PIXELS, valid_box
from fedarena.errors import ConfigError
from fedarena.models.functional import FlatModel
from fedarena.simulation.engine import evaluate_state, simulate
from fedarena.simulation.setup import build_trial

TRIGGER = dict(hidden=8, eps=0.25, low=torch.full((16,), -1.0), high=torch.full((16,), 1.0))


def linear_view(seed=0, n=40, dim=16, classes=3, round_idx=0):
    gen = torch.Generator().manual_seed(seed)
    model = FlatModel(torch.nn.Linear(dim, classes), "classification")
    w = torch.randn(dim * classes + classes, generator=gen) * 0.3
    x = torch.rand(n, dim, generator=gen) * 1.6 - 0.8
    return AttackView(w, model, x, torch.randint(0, classes, (n,), generator=gen), round_idx)


def digits_images(normalize: str):
    data = build_dataset("digits", {"num_clients": 10, "normalize": normalize}, np.random.default_rng(0))
    low, high = (b.reshape(-1) for b in valid_box(data))
    return torch.cat([c.train.x for c in data.clients]), low, high, data


@pytest.mark.parametrize("normalize", ["pixel", "channel"])
def test_a_zero_trigger_leaves_every_real_image_as_it_is(normalize):
    # Prepare: real digits under either normalisation; a generator whose output is 0 (no trigger at all)
    x, low, high, _ = digits_images(normalize)
    zero = torch.zeros_like(initial_generator(64, 8, np.random.default_rng(0)))
    # Assert: the clamp to the valid box moves no pixel of a valid image (a dataset-wide box moved 17% of digits'
    # per-pixel standardised values, by up to 9.4 against eps 0.13)
    assert torch.equal(triggered(x, zero, hidden=8, eps=0.3, low=low, high=high), x)


@pytest.mark.parametrize("normalize", ["pixel", "channel"])
def test_the_trigger_moves_each_pixel_by_at_most_eps_of_its_raw_range(normalize):
    # Prepare: a saturated generator (noise of +-1) on real digits
    x, low, high, data = digits_images(normalize)
    params = initial_generator(64, 8, np.random.default_rng(0)) * 50
    out = triggered(x, params, hidden=8, eps=0.05, low=low, high=high)
    # Assert: in raw units (16 per white pixel) no pixel moves by more than 0.05 of the range, most move that far,
    # and every stamped image stays in the box
    scale = data.meta[PIXELS]
    raw_change = ((out - x) * torch.as_tensor(np.broadcast_to(scale.std, (64,)).copy()) / scale.white).abs()
    assert float(raw_change.max()) <= 0.05 + 1e-5 and float(raw_change.max()) > 0.045
    assert bool((out >= low - 1e-5).all()) and bool((out <= high + 1e-5).all())


def test_the_generator_learns_to_make_the_global_model_predict_the_target():
    view = linear_view()
    initial = initial_generator(16, 8, np.random.default_rng(1))
    state = train_generator({}, view, torch.Generator().manual_seed(0), initial=initial, target=2, epochs=30,
                            lr=0.05, batch_size=16, test_eps=0.25, decay=0.0, **TRIGGER)

    def target_loss(params):
        out = view.model.forward(view.w, triggered(view.x, params, **TRIGGER))
        return float(F.cross_entropy(out, torch.full((40,), 2)))

    assert target_loss(state[GENERATOR]) < target_loss(initial) - 0.1
    assert SWITCH not in state and float(state["eps"]) == pytest.approx(0.25) and 0 <= float(state[SUCCESS]) <= 1


def test_the_first_phase_trains_every_round_and_switches_after_a_success_of_085():
    state, trains = scheduled({SUCCESS: torch.tensor(0.84)}, 4)
    assert trains and SWITCH not in state
    state, trains = scheduled({**state, SUCCESS: torch.tensor(0.85)}, 5)
    assert trains and int(state[SWITCH]) == 5
    # from the switch on, the generator retrains every other round: 5 (yes), 6 (no), 7 (yes), 8 (no)
    plan = []
    for round_idx in (6, 7, 8):
        state, trains = scheduled(state, round_idx)
        plan.append(trains)
    assert plan == [False, True, False]


def test_the_bound_is_eps_until_the_switch_then_decays_from_it_to_the_test_bound():
    assert current_bound({}, 20, eps=0.3, test_eps=0.05, decay=0.001) == pytest.approx(0.3)
    state = {SWITCH: torch.tensor(3)}
    assert current_bound(state, 3, eps=0.3, test_eps=0.05, decay=0.001) == pytest.approx(0.3)
    assert current_bound(state, 30, eps=0.3, test_eps=0.05, decay=0.001) == pytest.approx(0.3 * 0.999 ** 27)
    assert current_bound(state, 5000, eps=0.3, test_eps=0.05, decay=0.001) == pytest.approx(0.05)


def test_the_round_poisons_nothing_before_the_switch_then_malicious_samples_only_with_the_rounds_bound():
    x, y = torch.zeros(6, 16), torch.tensor([0, 1, 2, 0, 1, 2])
    bad = torch.tensor([True, True, True, False, False, False])
    params = initial_generator(16, 8, np.random.default_rng(0))
    before = {GENERATOR: params, "eps": torch.tensor(0.2)}
    out_x, out_y = poison_round(x, y, torch.arange(6), bad, torch.Generator().manual_seed(0), state=before,
                                initial=params, target=2, share=1.0, **TRIGGER)
    assert torch.equal(out_x, x) and torch.equal(out_y, y)
    after = {**before, SWITCH: torch.tensor(1)}
    out_x, out_y = poison_round(x, y, torch.arange(6), bad, torch.Generator().manual_seed(0), state=after,
                                initial=params, target=2, share=1.0, **TRIGGER)
    assert torch.allclose(out_x[:3], triggered(x[:3], params, **{**TRIGGER, "eps": 0.2}))
    assert torch.equal(out_x[3:], x[3:]) and out_y.tolist() == [2, 2, 2, 0, 1, 2]


def overstepping_iba(dataset, malicious, rng, *, eps: float = 0.1, test_eps: float = 0.1, epochs: int = 1):
    """IBA whose success-rate trigger moves every pixel 1% further than the eps it declares (a broken trigger)."""
    effect = ATTACKS.get("iba")(dataset, malicious, rng, eps=eps, test_eps=test_eps, epochs=epochs)
    low, high, eps = effect.corrupt.keywords["low"], effect.corrupt.keywords["high"], effect.bound.linf

    def restamp(x, state):
        flat = x.reshape(len(x), -1)
        return (flat + 1.01 * eps * (high - low)).clamp(low, high).reshape(x.shape)

    return dataclasses.replace(effect, backdoor=dataclasses.replace(effect.backdoor, restamp=restamp))


@pytest.fixture
def registered_overstepping_iba():
    ATTACKS.register("overstepping_iba")(overstepping_iba)
    yield
    ATTACKS.remove("overstepping_iba")


def test_a_trigger_that_oversteps_its_declared_eps_by_1_percent_fails_the_run_naming_the_attack(
        registered_overstepping_iba):
    # Prepare: a short digits run under IBA whose test trigger moves pixels 1.01 eps (eps = test_eps = 0.1)
    cfg = attacked_digits_config({"name": "overstepping_iba", "level": 0.3, "epochs": 1, "eps": 0.1,
                                  "test_eps": 0.1}, 3)
    # Execute / Assert: the engine's check of the declared bound stops the run at its first evaluation
    with pytest.raises(BoundExceeded, match=r"attack 'overstepping_iba' changed a pixel by 0\.101 of the raw range, "
                                            r"beyond its declared L-infinity bound 0\.1"):
        simulate(build_trial(cfg))


def test_the_same_run_within_its_bound_passes_the_check():
    cfg = attacked_digits_config({"name": "iba", "level": 0.3, "epochs": 1, "eps": 0.1, "test_eps": 0.1}, 3)
    state, _ = simulate(build_trial(cfg))
    assert GENERATOR in state.attack


@pytest.mark.parametrize("params, message", [
    ({"eps": 0.0}, "0 < test_eps <= eps <= 1"), ({"test_eps": 0.5}, "0 < test_eps <= eps <= 1"),
    ({"decay": 1.0}, "0 <= decay < 1"), ({"hidden": 0}, "hidden must be a whole number >= 1"),
    ({"epochs": 0}, "epochs must be a whole number >= 1"), ({"lr": 0.0}, "lr"),
    ({"batch_size": 0}, "batch_size must be a whole number >= 1"), ({"target": 10}, "target must be a label"),
    ({"poison_fraction": 1.5}, "poison_fraction"),
])
def test_bad_iba_options_are_one_error_line(params, message):
    data = build_dataset("digits", {"name": "digits", "num_clients": 10}, np.random.default_rng(0))
    with pytest.raises(ConfigError, match=message):
        ATTACKS.get("iba")(data, np.zeros(10, dtype=bool), np.random.default_rng(0), **params)


def small_config(rounds: int) -> ExperimentConfig:
    return attacked_digits_config({"name": "iba", "level": 0.3, "epochs": 3, "decay": 0.1}, rounds)


def test_a_run_resumed_after_the_switch_goes_on_with_the_schedule_to_the_uninterrupted_numbers(tmp_path):
    # Prepare: 12 rounds in one go (the generator's success reaches 0.85 and poisoning starts before round 10)
    whole, _ = simulate(build_trial(small_config(12)))
    assert SWITCH in whole.attack and int(whole.attack[SWITCH]) < 10
    # Execute: 10 rounds, saved and loaded, then the last 2
    _, state, resumed = run_interrupted(small_config(12), 10, tmp_path)
    # Assert: the same phase, trainings, bound, generator and model
    for key in (SWITCH, "trainings"):
        assert int(resumed.attack[key]) == int(whole.attack[key])
    assert float(resumed.attack["eps"]) == pytest.approx(float(whole.attack["eps"]))
    assert torch.allclose(resumed.attack[GENERATOR], whole.attack[GENERATOR], atol=1e-6)
    assert torch.allclose(resumed.w, whole.w, atol=1e-5)


def test_a_resumed_run_goes_on_with_the_saved_generator_to_the_uninterrupted_numbers(tmp_path):
    # Prepare: 6 rounds in one go
    trial = build_trial(small_config(6))
    whole, _ = simulate(trial)
    # Execute: 3 rounds, the state saved to disk and loaded in a new trial, then the other 3
    resumed_trial, state, resumed = run_interrupted(small_config(6), 3, tmp_path)
    assert GENERATOR in state.attack
    # Assert: the same generator, bound, model and success rate as the uninterrupted run
    assert torch.allclose(resumed.attack[GENERATOR], whole.attack[GENERATOR], atol=1e-6)
    assert float(resumed.attack["eps"]) == pytest.approx(float(whole.attack["eps"]))
    assert torch.allclose(resumed.w, whole.w, atol=1e-5)
    _, metrics_whole = evaluate_state(trial, whole)
    _, metrics_resumed = evaluate_state(resumed_trial, resumed)
    assert metrics_resumed["asr_pooled"] == pytest.approx(metrics_whole["asr_pooled"], abs=1e-6)
