"""Attacks: the malicious set, A1 label poisoning and the model attacks (a2, a3, sign_flip, alie, ipm).

Each test checks what an attack changes and what it must leave alone, on tiny hand-made inputs.
"""

import math

import numpy as np
import pytest
import torch

from fedarena.attacks import ATTACKS, build_threat
from fedarena.attacks.label_flip import poison_dataset
from fedarena.attacks.poisoned_updates import alie_z
from fedarena.datasets.base import ClientData, FederatedDataset, Split
from fedarena.errors import ConfigError
from fedarena.registry import UnknownNameError


def make_dataset(train_labels, task="classification", num_classes=4, dim=3):
    """One client per entry of ``train_labels``; val/test labels are 0..2 so that a change would show."""
    clients = []
    for k, labels in enumerate(train_labels):
        y = torch.tensor(labels, dtype=torch.float32 if task == "binary_pm1" else torch.long)
        x = torch.arange(len(labels) * dim, dtype=torch.float32).reshape(len(labels), dim) + 100 * k
        other = Split(torch.ones(3, dim) * k, torch.tensor([0, 1, 2], dtype=y.dtype))
        clients.append(ClientData(Split(x, y), other, Split(other.x + 1, other.y.clone())))
    return FederatedDataset("tiny", clients, num_classes, (dim,), "fp", task)


def snapshot(ds):
    return [[t.clone() for split in (c.train, c.val, c.test) for t in split] for c in ds.clients]


def assert_same_as(ds, snap):
    for client, tensors in zip(ds.clients, snap, strict=True):
        now = [t for split in (client.train, client.val, client.test) for t in split]
        assert all(torch.equal(a, b) for a, b in zip(now, tensors, strict=True))


# --- the malicious set and the level -------------------------------------------------------------------


def test_malicious_set_has_int_level_times_k_members_and_is_fixed_by_the_seed():
    ds = make_dataset([[0, 1]] * 10)
    a = build_threat({"name": "a2", "level": 0.37}, ds, np.random.default_rng(7))
    b = build_threat({"name": "a2", "level": 0.37}, ds, np.random.default_rng(7))
    assert a.malicious.sum() == 3  # int(3.7), as the reference code counts
    assert np.array_equal(a.malicious, b.malicious)
    section = {"name": "a2", "level": 0.37}
    others = [build_threat(section, ds, np.random.default_rng(s)).malicious for s in range(5)]
    assert any(not np.array_equal(m, a.malicious) for m in others)


@pytest.mark.parametrize("level", [1.0, 1.5, -0.1, float("nan"), "half"])
def test_level_outside_zero_one_is_an_error(level):
    with pytest.raises(ConfigError, match=r"\[0, 1\)"):
        build_threat({"name": "a1", "level": level}, make_dataset([[0, 1]] * 4), np.random.default_rng(0))


def test_a_level_below_one_always_leaves_a_benign_client_and_one_too_low_corrupts_none():
    # int(level * K) < K for every level < 1: 0.9 of 4 clients is 3; 0.2 of 4 is none, an error
    assert build_threat({"name": "a1", "level": 0.9}, make_dataset([[0, 1]] * 4),
                        np.random.default_rng(0)).malicious.sum() == 3
    with pytest.raises(ConfigError, match="corrupts no client of 4"):
        build_threat({"name": "a1", "level": 0.2}, make_dataset([[0, 1]] * 4), np.random.default_rng(0))


def test_unknown_attack_lists_the_available_ones():
    with pytest.raises(UnknownNameError) as err:
        build_threat({"name": "a4", "level": 0.2}, make_dataset([[0, 1]] * 4), np.random.default_rng(0))
    for name in ("a1", "a2", "a3", "sign_flip", "alie", "ipm", "persistent_random_corruption"):
        assert name in str(err.value)


@pytest.mark.parametrize("section, match", [
    ({"name": "a3", "scale": -2.0}, "scale must be > 0"),
    ({"name": "a2", "std": "big"}, "std must be a number, got .big."),
    ({"name": "ipm", "epsilon": 0}, "epsilon must be > 0"),
    ({"name": "a2", "sigma": 1.0}, "allowed: poison_labels, std"),
    ({"name": "none", "level": 0.2}, "choose an attack"),
])  # fmt: skip
def test_bad_attack_settings_are_errors(section, match):
    with pytest.raises(ConfigError, match=match):
        build_threat({"level": 0.25, **section}, make_dataset([[0, 1]] * 4), np.random.default_rng(0))


def test_strong_attack_is_every_a3_and_any_attack_above_half():
    ds = make_dataset([[0, 1]] * 10)
    strong = {(name, lv): build_threat({"name": name, "level": lv}, ds, np.random.default_rng(0)).strong
              for name, lv in [("a3", 0.1), ("a2", 0.5), ("a2", 0.6), ("a1", 0.8)]}
    assert strong == {("a3", 0.1): True, ("a2", 0.5): False, ("a2", 0.6): True, ("a1", 0.8): True}


def test_vehicle_at_half_has_the_references_eleven_malicious_devices_and_is_not_strong():
    # round(0.5 * 23) = 12 would make the realised fraction 0.52 > 0.5; the reference has int(11.5) = 11
    threat = build_threat({"name": "a1", "level": 0.5}, make_dataset([[0, 1]] * 23), np.random.default_rng(0))
    assert threat.malicious.sum() == 11 and not threat.strong


# --- A1 label poisoning -----------------------------------------------------------------------------------


def test_a1_draws_uniform_labels_only_for_malicious_training_data():
    ds = make_dataset([[0, 1, 2, 3, 0], [3, 3, 3, 3, 3, 3, 3, 3], [1, 2, 1]])
    before = snapshot(ds)
    malicious = np.array([False, True, False])
    out = poison_dataset(ds, malicious, np.random.default_rng(11))
    expected = np.random.default_rng(11).integers(0, 4, size=8)
    assert out.clients[1].train.y.tolist() == expected.tolist()
    assert out.clients[1].train.y.dtype == torch.long
    assert torch.equal(out.clients[1].train.x, ds.clients[1].train.x)
    assert out.clients[0] is ds.clients[0] and out.clients[2] is ds.clients[2]
    assert out.clients[1].val is ds.clients[1].val and out.clients[1].test is ds.clients[1].test
    assert_same_as(ds, before)  # the input dataset is not mutated


def test_a1_random_labels_cover_every_class_and_stay_in_range():
    ds = make_dataset([[0] * 2000, [1] * 5], num_classes=10)
    y = poison_dataset(ds, np.array([True, False]), np.random.default_rng(3)).clients[0].train.y
    counts = torch.bincount(y, minlength=10)
    assert len(counts) == 10 and int(y.min()) >= 0
    assert counts.min() > 150 and counts.max() < 250  # uniform: 200 expected per class


def test_a1_flips_two_class_labels_to_one_minus_y():
    ds = make_dataset([[0, 1, 1, 0, 1], [1, 0]], num_classes=2)
    out = poison_dataset(ds, np.array([True, False]), np.random.default_rng(0))
    assert out.clients[0].train.y.tolist() == [1, 0, 0, 1, 0]
    assert out.clients[1].train.y.tolist() == [1, 0]


def test_a1_negates_plus_minus_one_labels():
    ds = make_dataset([[1, -1, -1], [1, 1]], task="binary_pm1", num_classes=2)
    out = poison_dataset(ds, np.array([False, True]), np.random.default_rng(0))
    assert out.clients[1].train.y.tolist() == [-1.0, -1.0]
    assert out.clients[0].train.y.tolist() == [1.0, -1.0, -1.0]


def test_a1_on_a_regression_dataset_is_an_error():
    ds = make_dataset([[0, 1], [1, 0]], task="regression", num_classes=1)
    with pytest.raises(ConfigError, match="classification"):
        build_threat({"name": "a1", "level": 0.5}, ds, np.random.default_rng(0))


@pytest.mark.parametrize("name", ["a2", "a3"])
def test_poison_labels_option_gives_a2_and_a3_devices_a1_labels(name):
    ds = make_dataset([[0, 1, 1, 0]] * 4, num_classes=2)
    plain = build_threat({"name": name, "level": 0.5, "poison_labels": False}, ds, np.random.default_rng(0))
    both = build_threat({"name": name, "level": 0.5, "poison_labels": True}, ds, np.random.default_rng(0))
    assert plain.effect.dataset is ds and both.effect.tamper is not None
    for k in range(4):
        expected = [1, 0, 0, 1] if both.malicious[k] else [0, 1, 1, 0]
        assert both.effect.dataset.clients[k].train.y.tolist() == expected


@pytest.mark.parametrize("name, poisons_by_default", [("a3", True), ("a2", False)])
def test_a3_sends_an_adversarial_update_by_default_and_a2_keeps_the_papers_noise(name, poisons_by_default):
    # Ditto's A3 is model replacement of *adversarial* updates: its devices train on A1 labels and boost that
    # update; A2's noise is adversarial whatever its scale, so its default stays the paper's text.
    ds = make_dataset([[0, 1, 1, 0]] * 4, num_classes=2)
    threat = build_threat({"name": name, "level": 0.5}, ds, np.random.default_rng(0))
    poisoned = [threat.effect.dataset.clients[k].train.y.tolist() != [0, 1, 1, 0] for k in range(4)]
    assert poisoned == (threat.malicious.tolist() if poisons_by_default else [False] * 4)


def test_a3_on_a_regression_dataset_names_the_honest_boost_option():
    ds = make_dataset([[0, 1], [1, 0]], task="regression", num_classes=1)
    with pytest.raises(ConfigError, match="poison_labels=false"):
        build_threat({"name": "a3", "level": 0.5}, ds, np.random.default_rng(0))
    honest = build_threat({"name": "a3", "level": 0.5, "poison_labels": False}, ds, np.random.default_rng(0))
    assert honest.effect.dataset is ds


# --- model attacks ----------------------------------------------------------------------------------------

UPDATES = torch.tensor([[1.0, -2.0, 0.5], [3.0, 2.0, 1.0], [2.0, 7.0, -1.5],  # benign
                        [0.0, 4.0, 2.0], [-1.0, 1.0, 1.0]])  # malicious
BAD = torch.tensor([False, False, False, True, True])


def tamper_of(name, **params):
    ds = make_dataset([[0, 1]] * 2)
    return ATTACKS.get(name)(ds, np.array([False, True]), np.random.default_rng(0), **params).tamper


def test_a2_sends_zero_mean_noise_with_each_devices_own_std():
    d = 40000
    spread = 0.5 * torch.randn(d, generator=torch.Generator().manual_seed(0))
    honest = torch.stack([torch.full((d,), 0.25), 3.0 * (-1.0) ** torch.arange(d), spread])
    bad = torch.tensor([False, True, True])
    before = honest.clone()
    out = tamper_of("a2")(honest, bad, torch.Generator().manual_seed(1))
    assert torch.equal(honest, before) and torch.equal(out[0], honest[0])
    for row, std in ((1, 3.0), (2, float(honest[2].std(correction=0)))):
        assert out[row].std().item() == pytest.approx(std, rel=0.02)
        assert abs(out[row].mean().item()) < 0.02 * std
        assert abs(torch.corrcoef(torch.stack([out[row], honest[row]]))[0, 1].item()) < 0.03  # not derived


def test_a2_fixed_std_and_reproducible_noise():
    updates = torch.zeros(3, 50000)
    bad = torch.tensor([True, False, True])
    out = tamper_of("a2", std=0.1)(updates, bad, torch.Generator().manual_seed(4))
    again = tamper_of("a2", std=0.1)(updates, bad, torch.Generator().manual_seed(4))
    assert torch.equal(out, again) and torch.equal(out[1], updates[1])
    assert out[0].std().item() == pytest.approx(0.1, rel=0.02)
    assert not torch.equal(out[0], out[2])


def test_a3_scales_by_the_number_of_updates_by_default():
    out = tamper_of("a3")(UPDATES, BAD, torch.Generator())
    assert torch.equal(out[:3], UPDATES[:3])
    assert torch.equal(out[3:], 5.0 * UPDATES[3:])


def test_a3_and_sign_flip_with_an_explicit_scale():
    boosted = tamper_of("a3", scale=2.5)(UPDATES, BAD, torch.Generator())
    flipped = tamper_of("sign_flip", scale=2.0)(UPDATES, BAD, torch.Generator())
    assert boosted[3].tolist() == [0.0, 10.0, 5.0] and flipped[4].tolist() == [2.0, -2.0, -2.0]
    assert torch.equal(boosted[:3], UPDATES[:3]) and torch.equal(flipped[:3], UPDATES[:3])


@pytest.mark.parametrize("n, f, z", [(10, 3, 0.5244005), (10, 1, 0.0), (5, 2, 0.8416212), (10, 8, 1.2815516)])
def test_alie_z_follows_baruch_et_al(n, f, z):
    assert alie_z(n, f) == pytest.approx(z, abs=1e-6)  # Phi^-1((n - s) / n), s = max(floor(n/2+1) - f, 1)


def test_alie_sends_mean_minus_z_std_of_the_benign_updates():
    # benign rows 0-2: mean [2, 7/3, 0], sample std [1, 4.5092, 1.3229]; n = 5, f = 2 -> z = 0.8416
    out = tamper_of("alie")(UPDATES, BAD, torch.Generator())
    std = torch.tensor([1.0, math.sqrt(61 / 3), math.sqrt(7 / 4)])
    expected = torch.tensor([2.0, 7 / 3, 0.0]) - 0.8416212 * std
    torch.testing.assert_close(out[3], expected)
    torch.testing.assert_close(out[4], expected)
    assert torch.equal(out[:3], UPDATES[:3])
    override = tamper_of("alie", z=2.0)(UPDATES, BAD, torch.Generator())
    torch.testing.assert_close(override[3], torch.tensor([2.0, 7 / 3, 0.0]) - 2.0 * std)


def test_ipm_sends_minus_epsilon_times_the_benign_mean():
    out = tamper_of("ipm", epsilon=0.5)(UPDATES, BAD, torch.Generator())
    torch.testing.assert_close(out[3:], torch.tensor([[-1.0, -7 / 6, 0.0]] * 2))
    assert torch.equal(out[:3], UPDATES[:3])


def test_omniscient_attacks_fall_back_to_all_updates_when_no_device_is_benign():
    two = UPDATES[3:]  # [[0, 4, 2], [-1, 1, 1]], both malicious: the reference mean is [-0.5, 2.5, 1.5]
    out = tamper_of("ipm", epsilon=1.0)(two, torch.tensor([True, True]), torch.Generator())
    torch.testing.assert_close(out, torch.tensor([[0.5, -2.5, -1.5]] * 2))
