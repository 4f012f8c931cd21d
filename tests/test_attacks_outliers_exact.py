"""fedarena/attacks/outliers.py checked exactly, one behaviour per test (the mutation score of the module:
docs/testing.md): both attacks registered under their names (version 1, reading nothing of other devices) with
FedTilt's defaults; the seeded draw pinned (the attack's version promises its numbers): ``pick_samples`` takes, in
each client, the round(fraction * n_k) samples of lowest key in the generator's first float64 draw (ties of
rounding to even), random corruption's values are low + (high - low) * u from the next draw, in every feature's own
range, and Gaussian noise adds (never subtracts) std times the next standard normal draw, row by row over the chosen
samples; ``feature_range`` skips clients without training data; every refusal word for word, naming the attack and
the key (make mutants MODULE=fedarena/attacks/outliers.py)."""

import inspect

import numpy as np
import pytest
import torch

from fedarena.attacks.base import ATTACKS, attack_reads
from fedarena.attacks.outliers import (
    feature_range,
    persistent_gaussian_noise,
    persistent_random_corruption,
    pick_samples,
)
from fedarena.datasets.base import ClientData, FederatedDataset, Split
from fedarena.errors import ConfigError

F64 = torch.float64
RC, GN = "persistent_random_corruption", "persistent_gaussian_noise"


def gen(seed):
    return torch.Generator().manual_seed(seed)


def dataset(*train_xs, shape=(2,)):
    """One client per training tensor (val and test hold one far-away sample, never read for the range)."""
    far = Split(torch.full((1, *shape), 1e6, dtype=F64), torch.zeros(1))
    clients = [ClientData(Split(x, torch.zeros(len(x))), far, far) for x in train_xs]
    return FederatedDataset("tiny", clients, 2, tuple(shape), "fp")


UNIT = dataset(torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=F64), torch.tensor([[0.5, 0.5]], dtype=F64))


def build(name, ds=UNIT, malicious=(False, False), **params):
    return ATTACKS.get(name)(ds, np.array(malicious), np.random.default_rng(0), **params)


def refusal(name, ds=UNIT, malicious=(False, False), **params):
    with pytest.raises(ConfigError) as err:
        build(name, ds, malicious, **params)
    return str(err.value)


def lowest_keys(owner, fraction, seed):
    """Reference: keys = the generator's first float64 draw [m]; in each client the round(fraction * n_k) samples of
    lowest key (a plain loop over the clients)."""
    keys = torch.rand(len(owner), generator=gen(seed), dtype=F64)
    chosen = torch.zeros(len(owner), dtype=torch.bool)
    for k in owner.unique().tolist():
        rows = (owner == k).nonzero().flatten()
        quota = round(fraction * len(rows))
        chosen[rows[keys[rows].argsort()[:quota]]] = True
    return chosen


# --- registry and defaults -----------------------------------------------------------------------------------------

def test_both_attacks_are_registered_at_version_1_and_read_nothing_of_other_devices():
    assert ATTACKS.get(RC) is persistent_random_corruption and ATTACKS.version(RC) == 1
    assert ATTACKS.get(GN) is persistent_gaussian_noise and ATTACKS.version(GN) == 1
    assert attack_reads({"name": RC, "level": 0.0}) == () and attack_reads({"name": GN, "level": 0.0}) == ()


def test_defaults_are_fedtilts_30_percent_of_30_percent_standard_normal_and_every_client():
    rc = inspect.signature(persistent_random_corruption).parameters
    gn = inspect.signature(persistent_gaussian_noise).parameters
    assert (rc["sample_fraction"].default, rc["pixel_fraction"].default, rc["scope"].default) == (0.3, 0.3, "all")
    assert (gn["sample_fraction"].default, gn["std"].default, gn["scope"].default) == (0.3, 1.0, "all")


def test_the_effect_only_corrupts_and_keeps_the_dataset():
    for name in (RC, GN):
        effect = build(name)
        assert effect.dataset is UNIT and effect.corrupt is not None
        assert effect.tamper is None and effect.backdoor is None and effect.adapt is None


# --- pick_samples: the seeded draw ---------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5])
def test_pick_samples_takes_the_lowest_keys_of_each_client_interleaved_or_not(seed):
    owner = torch.tensor([3, 0, 3, 1, 0, 3, 3, 0, 1, 3, 0])  # interleaved: 4 of client 0, 2 of client 1, 5 of 3
    chosen = pick_samples(owner, 0.5, gen(seed))
    assert torch.equal(chosen, lowest_keys(owner, 0.5, seed))
    # round to even: 4 * 0.5 = 2, 2 * 0.5 = 1, 5 * 0.5 = 2.5 -> 2
    assert [int(chosen[owner == k].sum()) for k in (0, 1, 3)] == [2, 1, 2]


def test_pick_samples_of_one_of_two_samples_is_the_one_of_lower_key():
    keys = torch.rand(2, generator=gen(7), dtype=F64)
    chosen = pick_samples(torch.tensor([5, 5]), 0.5, gen(7))
    assert chosen.tolist() == [bool(keys[0] < keys[1]), bool(keys[1] < keys[0])]


def test_pick_samples_rounds_one_and_a_half_up_and_takes_all_at_fraction_one():
    owner = torch.tensor([0, 0, 0, 2, 2])
    assert [int(pick_samples(owner, 0.5, gen(0))[owner == k].sum()) for k in (0, 2)] == [2, 1]  # 1.5 -> 2, 1
    assert bool(pick_samples(owner, 1.0, gen(0)).all())
    assert not bool(pick_samples(owner, 0.1, gen(0)).any())  # 0.3 and 0.2 round to none


# --- random corruption ---------------------------------------------------------------------------------------------

def test_random_corruption_value_is_low_plus_span_times_the_draw_after_the_sample_keys():
    ds = dataset(torch.tensor([[10.0, -5.0]], dtype=F64), torch.tensor([[12.0, -4.0]], dtype=F64))
    corrupt = build(RC, ds, sample_fraction=1.0, pixel_fraction=1.0).corrupt
    x = torch.tensor([[100.0, 100.0], [200.0, 200.0]], dtype=F64)
    out, _ = corrupt(x, torch.zeros(2), torch.tensor([0, 1]), torch.zeros(2, dtype=torch.bool), gen(4))
    g = gen(4)
    torch.rand(2, generator=g, dtype=F64)  # the sample keys
    u = torch.rand((2, 2), generator=g, dtype=F64)
    expected = torch.stack([10.0 + 2.0 * u[:, 0], -5.0 + 1.0 * u[:, 1]], 1)
    assert torch.allclose(out, expected, rtol=0, atol=1e-12)


def test_random_corruption_draws_each_feature_within_its_own_clean_training_range():
    # feature 0 spans [10, 11], feature 1 spans [-5, -4]: neither range starts at 0
    ds = dataset(torch.tensor([[10.0, -4.0]], dtype=F64), torch.tensor([[11.0, -5.0]], dtype=F64))
    corrupt = build(RC, ds, sample_fraction=1.0, pixel_fraction=0.5).corrupt
    x = torch.full((400, 2), 1000.0, dtype=F64)
    out, _ = corrupt(x, torch.zeros(400), torch.zeros(400, dtype=torch.long), torch.zeros(400, dtype=torch.bool),
                     gen(0))
    changed = out != x
    assert changed.sum(1).tolist() == [1] * 400  # round(0.5 * 2) = 1 pixel of every sample
    for feature, (low, high) in enumerate([(10.0, 11.0), (-5.0, -4.0)]):
        values = out[changed[:, feature], feature]
        assert len(values) > 100
        assert bool(((values >= low) & (values <= high)).all())
        assert float(values.max() - values.min()) > 0.9  # spread over the whole range


def test_random_corruption_of_the_malicious_scope_leaves_benign_clients_and_labels_alone():
    ds = dataset(torch.zeros(1, 2, dtype=F64), torch.ones(1, 2, dtype=F64))
    corrupt = build(RC, ds, malicious=(False, True), scope="malicious", sample_fraction=1.0, pixel_fraction=1.0).corrupt
    x, y, owner = torch.full((4, 2), 7.0, dtype=F64), torch.tensor([0, 1, 0, 1]), torch.tensor([0, 0, 1, 1])
    out, out_y = corrupt(x, y, owner, owner == 1, gen(0))
    assert torch.equal(out[:2], x[:2]) and bool((out[2:] <= 1).all()) and out_y is y


# --- gaussian noise ------------------------------------------------------------------------------------------------

def test_gaussian_noise_adds_std_times_the_normal_draw_after_the_sample_keys():
    corrupt = build(GN, sample_fraction=1.0, std=2.0).corrupt
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], dtype=F64)
    out, _ = corrupt(x, torch.zeros(3), torch.tensor([0, 0, 1]), torch.zeros(3, dtype=torch.bool), gen(9))
    g = gen(9)
    torch.rand(3, generator=g, dtype=F64)  # the sample keys
    noise = torch.randn((3, 2), generator=g, dtype=F64)
    assert torch.allclose(out, x + 2.0 * noise, rtol=0, atol=1e-12)


def test_gaussian_noise_fills_the_chosen_rows_in_order_with_the_draws_rows():
    corrupt = build(GN, malicious=(True, False), scope="malicious", sample_fraction=0.5, std=0.5).corrupt
    owner = torch.tensor([0, 1, 1, 0, 1, 1])
    bad = owner == 1
    x = torch.arange(12, dtype=F64).reshape(6, 2)
    out, _ = corrupt(x, torch.zeros(6), owner, bad, gen(3))
    chosen = lowest_keys(owner, 0.5, 3) & bad  # 2 of client 1's 4 samples
    g = gen(3)
    torch.rand(6, generator=g, dtype=F64)
    noise = torch.randn((2, 2), generator=g, dtype=F64)
    expected = x.clone()
    expected[chosen.nonzero().flatten()] += 0.5 * noise
    assert int(chosen.sum()) == 2 and torch.allclose(out, expected, rtol=0, atol=1e-12)


# --- feature_range -------------------------------------------------------------------------------------------------

def test_feature_range_skips_a_client_without_training_data():
    ds = dataset(torch.tensor([[1.0, 4.0]], dtype=F64), torch.zeros(0, 2, dtype=F64),
                 torch.tensor([[3.0, 2.0]], dtype=F64))
    low, high = feature_range(ds)
    assert low.tolist() == [1.0, 2.0] and high.tolist() == [3.0, 4.0]


# --- refusals, word for word ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", [RC, GN])
def test_an_unknown_scope_is_refused_naming_the_allowed_ones(name):
    assert refusal(name, scope="some") == f"attack '{name}': scope must be one of all, malicious; got 'some'"


@pytest.mark.parametrize("name", [RC, GN])
def test_scope_all_with_malicious_clients_is_refused_pointing_to_scope_malicious(name):
    assert refusal(name, malicious=(True, False)) == (
        f"attack '{name}' with scope='all' puts outliers into every participating client (FedTilt), so it takes "
        "level 0; set scope='malicious' to restrict the outliers to a malicious fraction of the clients")


@pytest.mark.parametrize("name", [RC, GN])
def test_scope_malicious_without_malicious_clients_is_refused(name):
    assert refusal(name, scope="malicious") == (
        f"attack '{name}' with scope='malicious' needs a level > 0 (no malicious client)")


@pytest.mark.parametrize("name", [RC, GN])
def test_a_sample_fraction_outside_0_1_is_refused_naming_attack_and_key(name):
    assert refusal(name, sample_fraction=0.0) == (
        f"attack '{name}': sample_fraction must be a fraction in (0, 1], got 0.0")


def test_a_pixel_fraction_outside_0_1_is_refused_naming_attack_and_key():
    assert refusal(RC, pixel_fraction=1.5) == f"attack '{RC}': pixel_fraction must be a fraction in (0, 1], got 1.5"


def test_a_std_not_positive_or_not_finite_is_refused_naming_attack_and_key():
    assert refusal(GN, std=0.0) == f"attack '{GN}': std must be > 0, got 0.0"
    assert refusal(GN, std=float("nan")) == f"attack '{GN}': std must be a finite number, got nan"
