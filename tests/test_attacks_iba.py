"""IBA: the generator's trigger bounded by the round's eps, its training against the global model, the decay of the
bound, the round's poisoning of malicious samples only, and a resumed run that goes on with the saved generator to
the numbers of an uninterrupted one; bad input in one line."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from resume import attacked_digits_config, run_interrupted

from fedarena.attacks import ATTACKS
from fedarena.attacks.base import AttackView
from fedarena.attacks.iba import (
    FIRST,
    GENERATOR,
    current_bound,
    initial_generator,
    poison_round,
    train_generator,
    triggered,
)
from fedarena.config import ExperimentConfig
from fedarena.datasets.catalog import build_dataset
from fedarena.errors import ConfigError
from fedarena.models.functional import FlatModel
from fedarena.simulation.engine import evaluate_state, simulate
from fedarena.simulation.setup import build_trial

TRIGGER = dict(hidden=8, eps=0.5, low=-1.0, high=1.0)


def linear_view(seed=0, n=40, dim=16, classes=3, round_idx=0):
    gen = torch.Generator().manual_seed(seed)
    model = FlatModel(torch.nn.Linear(dim, classes), "classification")
    w = torch.randn(dim * classes + classes, generator=gen) * 0.3
    x = torch.rand(n, dim, generator=gen) * 1.6 - 0.8
    return AttackView(w, model, x, torch.randint(0, classes, (n,), generator=gen), round_idx)


def test_the_trigger_moves_each_input_by_at_most_eps_and_stays_in_the_pixel_range():
    params = initial_generator(16, 8, np.random.default_rng(0)) * 50  # a saturated generator: noise of +-1
    x = torch.rand(10, 16) * 2 - 1
    out = triggered(x, params, **TRIGGER)
    assert float((out - x).abs().max()) <= 0.5 + 1e-6 and float((out - x).abs().max()) > 0.45
    assert float(out.min()) >= -1.0 and float(out.max()) <= 1.0


def test_the_generator_learns_to_make_the_global_model_predict_the_target():
    view = linear_view()
    initial = initial_generator(16, 8, np.random.default_rng(1))
    state = train_generator({}, view, torch.Generator().manual_seed(0), initial=initial, target=2, epochs=30,
                            lr=0.05, batch_size=16, test_eps=0.5, decay=0.0, **TRIGGER)

    def target_loss(params):
        out = view.model.forward(view.w, triggered(view.x, params, **TRIGGER))
        return float(F.cross_entropy(out, torch.full((40,), 2)))

    assert target_loss(state[GENERATOR]) < target_loss(initial) - 0.1
    assert int(state[FIRST]) == 0 and float(state["eps"]) == pytest.approx(0.5)


def test_the_bound_decays_from_the_first_attacked_round_to_the_test_bound():
    state = {FIRST: torch.tensor(3)}
    assert current_bound(state, 3, eps=0.3, test_eps=0.05, decay=0.1) == pytest.approx(0.3)
    assert current_bound(state, 5, eps=0.3, test_eps=0.05, decay=0.1) == pytest.approx(0.3 * 0.81)
    assert current_bound(state, 40, eps=0.3, test_eps=0.05, decay=0.1) == pytest.approx(0.05)


def test_the_round_poisons_malicious_samples_only_with_the_rounds_bound():
    x, y = torch.zeros(6, 16), torch.tensor([0, 1, 2, 0, 1, 2])
    bad = torch.tensor([True, True, True, False, False, False])
    params = initial_generator(16, 8, np.random.default_rng(0))
    state = {GENERATOR: params, "eps": torch.tensor(0.2)}
    out_x, out_y = poison_round(x, y, torch.arange(6), bad, torch.Generator().manual_seed(0), state=state,
                                initial=params, target=2, share=1.0, **TRIGGER)
    assert torch.allclose(out_x[:3], triggered(x[:3], params, **{**TRIGGER, "eps": 0.2}))
    assert torch.equal(out_x[3:], x[3:]) and out_y.tolist() == [2, 2, 2, 0, 1, 2]


@pytest.mark.parametrize("params, message", [
    ({"eps": 0.0}, "0 < test_eps <= eps <= 1"), ({"test_eps": 0.5}, "0 < test_eps <= eps <= 1"),
    ({"decay": 1.0}, "0 <= decay < 1"), ({"hidden": 0}, "hidden must be a whole number >= 1"),
    ({"epochs": -1}, "epochs must be a whole number >= 0"), ({"lr": 0.0}, "lr"),
    ({"batch_size": 0}, "batch_size must be a whole number >= 1"), ({"target": 10}, "target must be a label"),
    ({"poison_fraction": 1.5}, "poison_fraction"),
])
def test_bad_iba_options_are_one_error_line(params, message):
    data = build_dataset("digits", {"name": "digits", "num_clients": 10}, np.random.default_rng(0))
    with pytest.raises(ConfigError, match=message):
        ATTACKS.get("iba")(data, np.zeros(10, dtype=bool), np.random.default_rng(0), **params)


def small_config(rounds: int) -> ExperimentConfig:
    return attacked_digits_config({"name": "iba", "level": 0.3, "epochs": 3}, rounds)


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
