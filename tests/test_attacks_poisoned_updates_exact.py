"""fedarena/attacks/poisoned_updates.py checked exactly, one behaviour per test (the mutation score of the module:
docs/testing.md): A2's noise scaled by each device's population std (ddof 0, the reference's ``np.std``) or a fixed
std, the defaults of sign flipping (scale 1) and IPM (epsilon 0.1) both in the tamper functions and in the registered
attacks, ALIE's std with ddof 1 for two or more honest rows and ddof 0 for a single one, every hyperparameter refusal
word for word (attack and key named), A3's refusal on a task without labels, and the registry entries (what each
attack reads) (make mutants MODULE=fedarena/attacks/poisoned_updates.py)."""

import inspect
import math

import numpy as np
import pytest
import torch

from fedarena.attacks.base import ATTACKS, attack_reads
from fedarena.attacks.poisoned_updates import (
    alie_updates,
    boosted_updates,
    ipm_updates,
    random_updates,
    sign_flipped_updates,
)
from fedarena.datasets.base import ClientData, FederatedDataset, Split
from fedarena.errors import ConfigError

F64 = torch.float64
PHI_INV_2_3 = 0.4307272992954576  # Phi^-1(2/3), from a normal table: ALIE's z for n = 3, f = 1 or 2 (s = 1)
# two benign rows and two malicious ones, d = 3; benign mean [2, -1, 3]
UPDATES = torch.tensor([[1.0, -2.0, 4.0], [3.0, 0.0, 2.0], [0.5, 4.0, -1.0], [-2.0, 6.0, 0.0]], dtype=F64)
BAD = torch.tensor([False, False, True, True])


def dataset(task="classification", clients=2):
    clients_ = []
    for k in range(clients):
        y = torch.tensor([0, 1], dtype=torch.long if task == "classification" else torch.float32)
        split = Split(torch.full((2, 2), float(k)), y)
        clients_.append(ClientData(split, split, split))
    return FederatedDataset("tiny", clients_, 2 if task == "classification" else 1, (2,), "fp", task)


def build(name, ds=None, **params):
    return ATTACKS.get(name)(ds or dataset(), np.array([False, True]), np.random.default_rng(0), **params)


def refusal(name, ds=None, **params):
    with pytest.raises(ConfigError) as err:
        build(name, ds, **params)
    return str(err.value)


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


# --- A2 random updates ---------------------------------------------------------------------------------------------

def test_a2_noise_is_scaled_by_the_population_std_of_each_devices_own_update():
    # bad rows [1, 3] (mean 2, population std 1; the sample std would be sqrt 2) and [4, -2] (population std 3):
    # their noise is one randn draw of shape [2, 2] in float64 from the generator, times 1 and 3 row by row
    updates = torch.tensor([[1.0, 3.0], [7.0, 8.0], [4.0, -2.0]], dtype=F64)
    bad = torch.tensor([True, False, True])
    out = random_updates(updates, bad, gen(5))
    draws = torch.randn((2, 2), generator=gen(5), dtype=F64)
    torch.testing.assert_close(out[0], draws[0] * 1.0, rtol=0, atol=1e-15)
    torch.testing.assert_close(out[2], draws[1] * 3.0, rtol=0, atol=1e-15)
    assert out[1].tolist() == [7.0, 8.0]


def test_a2_through_the_registered_attack_uses_the_population_std():
    updates = torch.tensor([[0.0, 2.0, 4.0, 6.0], [1.0, 1.0, 1.0, 1.0]], dtype=F64)  # row 0: population std sqrt 5
    out = build("a2").tamper(updates, torch.tensor([True, False]), gen(2))
    draws = torch.randn((1, 4), generator=gen(2), dtype=F64)
    torch.testing.assert_close(out[0], draws[0] * math.sqrt(5.0), rtol=0, atol=1e-14)
    assert out[1].tolist() == [1.0, 1.0, 1.0, 1.0]


def test_a2_on_an_update_of_one_coordinate_sends_zero_not_nan():
    # one entry: population std 0 (a sample std of one entry would be NaN)
    updates = torch.tensor([[2.5], [-1.0]], dtype=F64)
    out = random_updates(updates, torch.tensor([True, False]), gen(0))
    assert out.tolist() == [[0.0], [-1.0]]


def test_a2_with_a_fixed_std_scales_the_draws_by_it_and_zero_sends_zeros():
    updates = torch.tensor([[1.0, 3.0], [4.0, -2.0]], dtype=F64)
    bad = torch.tensor([True, True])
    draws = torch.randn((2, 2), generator=gen(9), dtype=F64)
    torch.testing.assert_close(build("a2", std=0.5).tamper(updates, bad, gen(9)), 0.5 * draws, rtol=0, atol=1e-15)
    assert build("a2", std=0).tamper(updates, bad, gen(9)).tolist() == [[0.0, 0.0], [0.0, 0.0]]


def test_a2_refuses_a_negative_or_non_finite_std_in_words():
    assert refusal("a2", std=-1.0) == "attack 'a2': std must be >= 0, got -1.0"
    assert refusal("a2", std=math.inf) == "attack 'a2': std must be a finite number, got inf"


# --- A3 boosting ---------------------------------------------------------------------------------------------------

def test_a3_boosts_by_the_rounds_number_of_updates_or_the_given_scale():
    out = boosted_updates(UPDATES, BAD, gen())
    assert out[2:].tolist() == [[2.0, 16.0, -4.0], [-8.0, 24.0, 0.0]] and torch.equal(out[:2], UPDATES[:2])
    assert build("a3", scale=0.5).tamper(UPDATES, BAD, gen())[3].tolist() == [-1.0, 3.0, 0.0]


def test_a3_refuses_a_scale_of_zero_in_words():
    assert refusal("a3", scale=0) == "attack 'a3': scale must be > 0, got 0"


def test_a3_on_a_regression_dataset_is_refused_naming_the_dataset_its_task_and_the_honest_option():
    assert refusal("a3", dataset("regression")) == (
        "a3 boosts an update trained on poisoned labels, which needs a classification task; dataset 'tiny' is a "
        "regression task. Set poison_labels=false to boost honest updates instead")
    assert build("a3", dataset("regression"), poison_labels=False).tamper is not None


# --- sign flipping -------------------------------------------------------------------------------------------------

def test_sign_flip_defaults_to_scale_one_the_negated_update():
    assert inspect.signature(sign_flipped_updates).parameters["scale"].default == 1.0
    direct = sign_flipped_updates(UPDATES, BAD, gen())
    built = build("sign_flip").tamper(UPDATES, BAD, gen())
    for out in (direct, built):
        assert out[2:].tolist() == [[-0.5, -4.0, 1.0], [2.0, -6.0, -0.0]]
        assert torch.equal(out[:2], UPDATES[:2])


def test_sign_flip_refuses_a_negative_scale_in_words():
    assert refusal("sign_flip", scale=-2) == "attack 'sign_flip': scale must be > 0, got -2"


# --- ALIE ----------------------------------------------------------------------------------------------------------

def test_alie_with_two_honest_rows_takes_their_sample_std():
    # honest [1, 0] and [3, 4]: mean [2, 2], sample std (ddof 1) [sqrt 2, 2 sqrt 2]; ddof 0 would give [1, 2]
    updates = torch.tensor([[1.0, 0.0], [3.0, 4.0], [9.0, 9.0]], dtype=F64)
    out = alie_updates(updates, torch.tensor([False, False, True]), gen(), z=1.0)
    torch.testing.assert_close(out[2], torch.tensor([2.0 - math.sqrt(2), 2.0 - 2 * math.sqrt(2)], dtype=F64),
                               rtol=0, atol=1e-15)


def test_alie_on_one_coordinate_with_two_honest_rows_takes_their_sample_std_and_the_default_z():
    # honest [1] and [3]: mean 2, sample std sqrt 2; n = 3, f = 1: s = max(2 - 1, 1) = 1, z = Phi^-1(2/3)
    updates = torch.tensor([[1.0], [3.0], [-5.0]], dtype=F64)
    out = build("alie").tamper(updates, torch.tensor([False, False, True]), gen())
    assert out[2].item() == pytest.approx(2.0 - PHI_INV_2_3 * math.sqrt(2), abs=1e-12)
    assert out[:2].tolist() == [[1.0], [3.0]]


def test_alie_with_a_single_honest_row_sends_that_row_std_zero_not_nan():
    # one honest row: ddof 0, std 0, so every malicious device sends the honest row whatever z
    updates = torch.tensor([[2.0, -1.0], [9.0, 9.0], [7.0, 7.0]], dtype=F64)
    bad = torch.tensor([False, True, True])
    for out in (build("alie").tamper(updates, bad, gen()), alie_updates(updates, bad, gen(), z=3.0)):
        assert out.tolist() == [[2.0, -1.0], [2.0, -1.0], [2.0, -1.0]]


def test_alie_with_a_single_update_all_malicious_sends_it_back():
    # n = 1, f = 1: the fallback to the attackers' own rows, one row: std 0 and z = Phi^-1(1/2) = 0
    updates = torch.tensor([[1.5, -4.0]], dtype=F64)
    assert build("alie").tamper(updates, torch.tensor([True]), gen()).tolist() == [[1.5, -4.0]]


def test_alie_with_z_zero_sends_the_honest_mean():
    assert build("alie", z=0).tamper(UPDATES, BAD, gen())[2:].tolist() == [[2.0, -1.0, 3.0]] * 2


def test_alie_refuses_a_negative_z_in_words():
    assert refusal("alie", z=-0.5) == "attack 'alie': z must be >= 0, got -0.5"


# --- IPM -----------------------------------------------------------------------------------------------------------

def test_ipm_defaults_to_epsilon_a_tenth_of_the_negated_honest_mean():
    assert inspect.signature(ipm_updates).parameters["epsilon"].default == 0.1
    for out in (ipm_updates(UPDATES, BAD, gen()), build("ipm").tamper(UPDATES, BAD, gen())):
        torch.testing.assert_close(out[2:], torch.tensor([[-0.2, 0.1, -0.3]] * 2, dtype=F64), rtol=0, atol=1e-15)
        assert torch.equal(out[:2], UPDATES[:2])


def test_ipm_refuses_an_epsilon_of_zero_in_words():
    assert refusal("ipm", epsilon=0.0) == "attack 'ipm': epsilon must be > 0, got 0.0"


# --- registry ------------------------------------------------------------------------------------------------------

def test_registry_entries_declare_what_each_attack_reads():
    reads = {name: attack_reads({"name": name}) for name in ("a2", "a3", "sign_flip", "alie", "ipm")}
    assert reads == {"a2": (), "a3": (), "sign_flip": (), "alie": ("honest_updates",),
                     "ipm": ("honest_updates",)}
    assert all(ATTACKS.version(name) == 1 for name in reads)
