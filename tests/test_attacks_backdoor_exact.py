"""fedarena/attacks/backdoor.py checked against hand computations, one behaviour per test: the patch (its pixels at
each corner or [row, col], its fill channel by channel, its stamp and DBA's parts), every range's edges (the least
value let through and the one just past it) and each refusal word for word, the poisoned samples recomputed from the
attack's draws, model replacement's boost and norm bound, Neurotoxin's mask (a stable sort's set, on heavy ties
too), the targeted flip, the registry entries and every attack's defaults (make mutants
MODULE=fedarena/attacks/backdoor.py)."""

import dataclasses

import numpy as np
import pytest
import torch

from fedarena.attacks.backdoor import Patch, boosted_updates, largest_mask, make_patch, masked_updates
from fedarena.attacks.base import ATTACKS, attack_reads
from fedarena.datasets.base import ClientData, FederatedDataset, Split
from fedarena.datasets.pixels import PIXELS, PixelScale
from fedarena.errors import ConfigError

NAMES = ("badnets", "dba", "model_replacement", "neurotoxin", "targeted_flip")
PATCHED = ("badnets", "dba", "model_replacement", "neurotoxin")


def samples(labels, shape) -> Split:
    """Sample k of ``labels``: every input value -(k + 1) (so each sample, and each stamped pixel, can be told)."""
    n = len(labels)
    x = -(torch.arange(n, dtype=torch.float32) + 1).reshape(n, *([1] * len(shape))).expand(n, *shape).clone()
    return Split(x, torch.as_tensor(labels, dtype=torch.long))


def dataset(train_labels, shape=(1, 4, 6), *, mean=(0.0,), std=(1.0,), task="classification", mode="channel",
            meta=None, num_classes=4) -> FederatedDataset:
    """One client per entry of ``train_labels`` (its training labels; two test samples of label 3); raw pixels
    0-10: a raw fraction v is (10 v - mean_c) / std_c in channel c."""
    clients = [ClientData(samples(y, shape), samples([3], shape), samples([3, 3], shape)) for y in train_labels]
    channel = (-1, 1, 1) if len(shape) == 3 else (-1,)
    scale = PixelScale(np.array(mean, dtype=np.float32).reshape(channel), np.array(std, dtype=np.float32).reshape(
        channel), 10.0, mode)
    return FederatedDataset("tiny", clients, num_classes, shape, "fp", task, meta={PIXELS: scale, **(meta or {})})


def build(name, ds=None, malicious=(False, True, True), seed=0, **params):
    ds = ds or dataset([[1, 2, 1, 2]] * len(malicious))
    return ATTACKS.get(name)(ds, np.array(malicious), np.random.default_rng(seed), **params)


def refusal(name, ds=None, **params) -> str:
    with pytest.raises(ConfigError) as err:
        build(name, ds, **params)
    return str(err.value)


def stamped_rows(x: torch.Tensor, clean_x: torch.Tensor) -> list[int]:
    return [k for k in range(len(x)) if not torch.equal(x[k], clean_x[k])]


# --- the patch ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("position,pixels", [
    ("top_left", ((0, 0), (0, 1), (1, 0), (1, 1))),
    ("top_right", ((0, 4), (0, 5), (1, 4), (1, 5))),
    ("bottom_left", ((2, 0), (2, 1), (3, 0), (3, 1))),
    ("bottom_right", ((2, 4), (2, 5), (3, 4), (3, 5))),
    ([1, 3], ((1, 3), (1, 4), (2, 3), (2, 4))),
    ((0, 0), ((0, 0), (0, 1), (1, 0), (1, 1))),
])
def test_a_2x2_patch_on_4x6_images_covers_the_named_corner_or_the_given_top_left_pixel_row_major(position, pixels):
    patch = make_patch(dataset([[1]]), "badnets", 2, position, None)
    assert patch.pixels == pixels and patch.shape == (4, 6)


def test_the_fill_is_the_raw_value_under_each_channels_normalisation():
    # Prepare: 3 channels with means 0, 1, 2 and stds 1, 2, 4; a raw value 0.5 of the range 0-10 is 5
    ds = dataset([[1]], shape=(3, 4, 6), mean=(0.0, 1.0, 2.0), std=(1.0, 2.0, 4.0))
    # Execute
    patch = make_patch(ds, "badnets", 1, "top_left", 0.5)
    # Assert: (5 - 0) / 1, (5 - 1) / 2, (5 - 2) / 4 at every pixel of every channel
    assert patch.fill.shape == (3, 4, 6) and patch.fill.dtype == torch.float32
    assert [torch.unique(patch.fill[c]).tolist() for c in range(3)] == [[5.0], [2.0], [0.75]]
    # null is white (raw 10); 0 is black (raw 0); whole numbers 0 and 1 are accepted as fractions too
    assert make_patch(ds, "badnets", 1, "top_left", None).fill[:, 0, 0].tolist() == [10.0, 4.5, 2.0]
    assert make_patch(ds, "badnets", 1, "top_left", 1).fill[:, 0, 0].tolist() == [10.0, 4.5, 2.0]
    assert make_patch(ds, "badnets", 1, "top_left", 0).fill[:, 0, 0].tolist() == [0.0, -0.5, -0.5]
    assert make_patch(ds, "badnets", 1, "top_left", 0.0).fill[:, 0, 0].tolist() == [0.0, -0.5, -0.5]


def test_stamp_sets_the_patch_pixels_in_every_channel_of_a_copy():
    ds = dataset([[1]], shape=(3, 4, 6), mean=(0.0, 1.0, 2.0), std=(1.0, 2.0, 4.0))
    patch = make_patch(ds, "badnets", 2, [1, 3], 0.5)
    x = samples([0, 0], (3, 4, 6)).x
    # Execute
    out = patch.stamp(x)
    # Assert: the four pixels take 5, 2, 0.75 channel by channel; every other value stays -(k + 1); x is untouched
    expected = x.clone()
    for c, v in enumerate((5.0, 2.0, 0.75)):
        expected[:, c, 1:3, 3:5] = v
    assert torch.equal(out, expected) and torch.equal(x, samples([0, 0], (3, 4, 6)).x)
    # a part of the patch: only its pixels
    part = patch.stamp(x, ((2, 4),))
    expected = x.clone()
    expected[:, :, 2, 4] = torch.tensor([5.0, 2.0, 0.75])
    assert torch.equal(part, expected)


def test_stamp_on_flat_inputs_uses_the_datasets_image_shape():
    # Prepare: digits-like flat inputs [m, 24] of 4 x 6 images
    ds = dataset([[1]], shape=(24,), meta={"image_shape": (4, 6)})
    patch = make_patch(ds, "badnets", 1, "bottom_right", 0.3)
    x = samples([0, 0, 0], (24,)).x
    # Execute
    out = patch.stamp(x)
    # Assert: the last pixel (row 3, column 5: flat 23) is raw 3; the shape stays [3, 24]
    expected = x.clone()
    expected[:, 23] = 3.0
    assert out.shape == (3, 24) and torch.allclose(out, expected, rtol=0, atol=1e-6)
    assert patch.pixels == ((3, 5),) and patch.fill.shape == (1, 4, 6)


def test_a_pixel_list_of_uneven_pairs_is_refused_not_truncated():
    patch = make_patch(dataset([[1]]), "badnets", 2, "top_left", 0.5)
    with pytest.raises(ValueError):
        patch.stamp(torch.zeros(1, 1, 4, 6), ((0, 0, 0), (1, 1)))


def test_a_patch_is_frozen_and_equal_only_to_itself():
    ds = dataset([[1]])
    one, other = make_patch(ds, "badnets", 2, "top_left", 0.5), make_patch(ds, "badnets", 2, "top_left", 0.5)
    assert one == one and one != other  # identity: the fill is a tensor
    with pytest.raises(dataclasses.FrozenInstanceError):
        one.pixels = ((0, 0),)


def test_dba_parts_are_row_major_runs_as_even_as_can_be():
    patch = Patch(tuple((r, c) for r in range(3) for c in range(3)), (3, 3), torch.zeros(1, 3, 3))
    assert patch.parts(4) == [((0, 0), (0, 1), (0, 2)), ((1, 0), (1, 1)), ((1, 2), (2, 0)), ((2, 1), (2, 2))]
    assert patch.parts(1) == [patch.pixels]
    assert patch.parts(9) == [(p,) for p in patch.pixels]


# --- the patch's ranges and refusals -----------------------------------------------------------------------------


def test_size_runs_from_one_pixel_to_the_shorter_side():
    ds = dataset([[1]])
    assert len(make_patch(ds, "badnets", 1, "top_left", None).pixels) == 1
    assert make_patch(ds, "badnets", 4, "bottom_right", None).pixels[0] == (0, 2)  # 4 of 4 x 6
    for size in (0, 5, True, 2.0, "2"):
        with pytest.raises(ConfigError) as err:
            make_patch(ds, "badnets", size, "top_left", None)
        assert str(err.value) == ("attack 'badnets': size must be a whole number of pixels in [1, 4] for the 4x6 images "
                                  f"of dataset 'tiny', got {size!r}")


@pytest.mark.parametrize("name", PATCHED)
def test_each_patch_attack_names_itself_when_refusing_a_size(name):
    assert refusal(name, size=5) == (f"attack {name!r}: size must be a whole number of pixels in [1, 4] for the 4x6 "
                                     "images of dataset 'tiny', got 5")


def test_a_position_is_accepted_up_to_the_last_row_and_column_the_patch_fits():
    ds = dataset([[1]])
    assert make_patch(ds, "badnets", 2, [0, 0], None).pixels[0] == (0, 0)
    assert make_patch(ds, "badnets", 2, [2, 4], None).pixels[-1] == (3, 5)
    for top, left in ((-1, 0), (0, -1), (3, 0), (0, 5), (3, 5)):
        with pytest.raises(ConfigError) as err:
            make_patch(ds, "badnets", 2, [top, left], None)
        assert str(err.value) == (f"attack 'badnets': a 2x2 trigger at [{top}, {left}] leaves the 4x6 image; rows and "
                                  "columns must lie in [0, 2] and [0, 4]")


@pytest.mark.parametrize("position", ["middle", [1, 2, 3], [1], [1.0, 2], 5, None])
def test_a_position_other_than_a_corner_or_a_row_and_column_is_one_error_line(position):
    with pytest.raises(ConfigError) as err:
        make_patch(dataset([[1]]), "badnets", 2, position, None)
    assert str(err.value) == ("attack 'badnets': position must be one of bottom_right, top_left, top_right, bottom_left "
                              f"or [row, col], got {position!r}")


def test_value_runs_from_black_to_white_and_nothing_else():
    ds = dataset([[1]])
    assert float(make_patch(ds, "badnets", 1, "top_left", 1.0).fill[0, 0, 0]) == 10.0
    assert float(make_patch(ds, "badnets", 1, "top_left", 0.0).fill[0, 0, 0]) == 0.0
    for value in (-1e-9, 1 + 1e-9, 1.5, True, "1", float("nan")):
        with pytest.raises(ConfigError) as err:
            make_patch(ds, "badnets", 1, "top_left", value)
        assert str(err.value) == ("attack 'badnets': value is a raw pixel value as a fraction of the raw range, in "
                                  f"[0, 1] (0 black, 1 white; null: white), got {value!r}")


def test_a_patch_on_a_pixel_that_never_varies_is_refused_where_pixels_are_standardised_one_by_one():
    # Prepare: per-pixel normalisation; pixel (0, 0) has the floor std (constant in the data)
    std = np.ones((1, 4, 6), dtype=np.float32)
    std[0, 0, 0] = 1e-8
    ds = dataclasses.replace(dataset([[1]]), meta={PIXELS: PixelScale(np.zeros((1, 4, 6), dtype=np.float32), std,
                                                                           10.0, "pixel")})
    # Execute / Assert: a patch covering it is refused, naming the attack; one beside it is not
    with pytest.raises(ConfigError) as err:
        make_patch(ds, "badnets", 2, "top_left", None)
    assert str(err.value) == ("attack 'badnets' changes raw pixels, but 1 of the values it touches never vary in dataset "
                              "'tiny', standardised pixel by pixel (normalize: pixel): a raw change there is ~1e+09 "
                              "input units. Use normalize: channel, or a trigger elsewhere")
    assert make_patch(ds, "badnets", 2, [0, 1], None).pixels[0] == (0, 1)


# --- labels and stop_round ---------------------------------------------------------------------------------------


def test_target_runs_over_the_datasets_labels():
    assert build("badnets", target=0).backdoor.target == 0
    assert build("badnets", target=3).backdoor.target == 3
    for target in (-1, 4, True, 1.0):
        assert refusal("badnets", target=target) == (f"attack 'badnets': target must be a label in [0, 3] of dataset "
                                                     f"'tiny', got {target!r}")


def test_a_targeted_attack_needs_a_classification_dataset():
    ds = dataset([[1, 2]] * 3, task="regression")
    assert refusal("badnets", ds) == "attack 'badnets' needs a classification dataset; 'tiny' is a regression task"
    assert refusal("targeted_flip", ds) == ("attack 'targeted_flip' needs a classification dataset; 'tiny' is a "
                                            "regression task")


def test_targeted_flip_names_the_source_or_the_target_it_refuses():
    assert refusal("targeted_flip", source=4) == ("attack 'targeted_flip': source must be a label in [0, 3] of dataset "
                                                  "'tiny', got 4")
    assert refusal("targeted_flip", target=-1) == ("attack 'targeted_flip': target must be a label in [0, 3] of "
                                                   "dataset 'tiny', got -1")
    assert refusal("targeted_flip", source=2, target=2) == ("attack 'targeted_flip': source and target must differ, "
                                                            "both are 2")
    assert refusal("targeted_flip", poison_fraction=0) == ("attack 'targeted_flip': poison_fraction must be a "
                                                           "fraction in (0, 1], got 0")


@pytest.mark.parametrize("name", NAMES)
def test_stop_round_is_a_round_number_from_zero_or_null(name):
    assert build(name).stop_round is None
    assert build(name, stop_round=0).stop_round == 0 and build(name, stop_round=7).stop_round == 7
    for stop_round in (-1, True, 2.5, "3"):
        assert refusal(name, stop_round=stop_round) == (f"attack {name!r}: stop_round must be a round number >= 0 or "
                                                        f"null, got {stop_round!r}")


@pytest.mark.parametrize("name", PATCHED)
def test_poison_fraction_refusals_name_the_attack_and_the_key(name):
    assert refusal(name, poison_fraction=0) == (f"attack {name!r}: poison_fraction must be a fraction in (0, 1], "
                                                "got 0")


# --- the poisoned data -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("share,count", [(0.1, 1), (0.25, 1), (0.5, 2), (0.75, 3), (1.0, 4)])
def test_badnets_stamps_share_of_each_malicious_devices_samples_at_least_one_drawn_in_device_order(share, count):
    # Prepare: three devices of 4 samples (labels 1, 2, 1, 2); devices 0 and 2 malicious
    ds = dataset([[1, 2, 1, 2]] * 3)
    # Execute
    out = build("badnets", ds, malicious=(True, False, True), seed=5, size=1, position=[1, 2], value=0.5,
                poison_fraction=share)
    # Assert: the samples of one permutation per malicious device (from the attack's generator, in id order) get raw
    # 0.5 (5.0) at (1, 2) and label 0; nothing else changes
    rng = np.random.default_rng(5)
    for k in (0, 2):
        chosen = sorted(rng.permutation(4)[:count].tolist())
        x, y = out.dataset.clients[k].train
        clean = ds.clients[k].train
        assert stamped_rows(x, clean.x) == chosen
        assert all(float(x[j, 0, 1, 2]) == 5.0 for j in chosen)
        assert y.tolist() == [0 if j in chosen else clean.y[j].item() for j in range(4)]
    assert out.dataset.clients[1] is ds.clients[1]
    assert all(torch.equal(out.dataset.clients[k].test.x, ds.clients[k].test.x) for k in range(3))


def test_dba_attackers_stamp_their_own_part_in_turn_and_the_test_trigger_is_the_whole_patch():
    # Prepare: five malicious devices (ids 0, 2, 3, 4, 5), a 2 x 2 patch in 3 parts: [(0, 0), (0, 1)], [(1, 0)], [(1, 1)]
    ds = dataset([[1, 2]] * 6)
    malicious = (True, False, True, True, True, True)
    # Execute
    out = build("dba", ds, malicious=malicious, size=2, position="top_left", value=0.5, parts=3, poison_fraction=1.0)
    # Assert: ranks 0-4 stamp parts 0, 1, 2, 0, 1 on every sample
    parts = [[(0, 0), (0, 1)], [(1, 0)], [(1, 1)], [(0, 0), (0, 1)], [(1, 0)]]
    for k, part in zip((0, 2, 3, 4, 5), parts, strict=True):
        x = out.dataset.clients[k].train.x
        assert [tuple(p) for p in torch.nonzero(x[0, 0] == 5.0).tolist()] == part
        assert torch.equal(x[1, 0] == 5.0, x[0, 0] == 5.0)
        assert out.dataset.clients[k].train.y.tolist() == [0, 0]
    stamped = out.backdoor.stamp(torch.zeros(1, 1, 4, 6))[0, 0]
    assert torch.nonzero(stamped).tolist() == [[0, 0], [0, 1], [1, 0], [1, 1]]
    assert out.bound.positions == ((0, 0), (0, 1), (1, 0), (1, 1))


def test_dba_parts_run_from_one_to_the_patch_pixels():
    # one part: every attacker stamps the whole patch
    whole = build("dba", size=2, position="top_left", parts=1, poison_fraction=1.0)
    assert all(torch.equal(whole.dataset.clients[k].train.x[0, 0, :2, :2], torch.full((2, 2), 10.0)) for k in (1, 2))
    # as many parts as pixels: one pixel each
    single = build("dba", size=2, position="top_left", parts=4, poison_fraction=1.0)
    assert torch.nonzero(single.dataset.clients[2].train.x[0, 0] == 10.0).tolist() == [[0, 1]]
    for parts in (0, 5, True, 2.0):
        assert refusal("dba", size=2, parts=parts) == ("attack 'dba': parts must be a whole number in [1, 4] (the "
                                                       f"trigger's pixels), got {parts!r}")


def test_the_backdoor_of_a_patch_attack_is_its_target_and_its_whole_patch_within_its_own_pixels():
    out = build("badnets", target=2, size=2, position=[1, 1], value=0.2)
    assert out.backdoor.target == 2 and out.backdoor.source is None
    assert out.backdoor.stamp.__self__.pixels == ((1, 1), (1, 2), (2, 1), (2, 2))
    assert out.bound.positions == ((1, 1), (1, 2), (2, 1), (2, 2))
    assert out.tamper is None and out.corrupt is None


# --- the defaults ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["badnets", "model_replacement", "neurotoxin"])
def test_at_its_defaults_a_badnets_attack_stamps_a_white_3x3_bottom_right_on_half_the_samples_as_label_0(name):
    # Prepare: digits-like flat inputs of 8 x 8 images; two malicious devices of 4 samples
    ds = dataset([[1, 2, 3, 1]] * 3, shape=(64,), meta={"image_shape": (8, 8)})
    # Execute
    out = build(name, ds, seed=3)
    # Assert: the draws as the attack makes them, the white (raw 10) 3 x 3 patch in rows and columns 5-7
    rng = np.random.default_rng(3)
    white = -(torch.arange(4, dtype=torch.float32) + 1)[:, None].expand(4, 64).clone().reshape(4, 8, 8)
    white[:, 5:, 5:] = 10.0
    for k in (1, 2):
        chosen = sorted(rng.permutation(4)[:2].tolist())
        x, y = out.dataset.clients[k].train
        assert stamped_rows(x, ds.clients[k].train.x) == chosen
        assert all(torch.equal(x[j].reshape(8, 8), white[j]) for j in chosen)
        assert [y[j].item() for j in chosen] == [0, 0]
    assert out.backdoor.target == 0 and out.stop_round is None
    assert out.bound.positions == tuple((r, c) for r in range(5, 8) for c in range(5, 8))


def test_at_its_defaults_dba_splits_a_white_4x4_bottom_right_patch_in_four_rows():
    ds = dataset([[1, 2, 3, 1]] * 5, shape=(1, 8, 8))
    out = build("dba", ds, malicious=(True,) * 5, seed=1)
    rng = np.random.default_rng(1)
    for k in range(5):
        chosen = sorted(rng.permutation(4)[:2].tolist())
        x, y = out.dataset.clients[k].train
        assert stamped_rows(x, ds.clients[k].train.x) == chosen
        row = 4 + k % 4  # rank k stamps part k mod 4: row 4 + k mod 4, columns 4-7
        assert all(torch.nonzero(x[j, 0] == 10.0).tolist() == [[row, c] for c in range(4, 8)] for j in chosen)
        assert [y[j].item() for j in chosen] == [0, 0]
    assert out.backdoor.target == 0 and out.bound.positions == tuple((r, c) for r in range(4, 8) for c in range(4, 8))


def test_model_replacement_and_neurotoxin_tamper_at_their_defaults():
    replacement = build("model_replacement")
    assert replacement.tamper.func is boosted_updates and replacement.tamper.keywords == {"boost": None,
                                                                                          "max_norm": None}
    neuro = build("neurotoxin")
    assert neuro.tamper.func is masked_updates and neuro.tamper.keywords == {"top_fraction": 0.1}
    # 0.1 of 20 coordinates: the 2 largest of the benign mean
    updates = torch.cat([torch.arange(1.0, 21.0)[None], torch.ones(1, 20)])
    out = neuro.tamper(updates, torch.tensor([False, True]), torch.Generator())
    assert out[1].tolist() == [1.0] * 18 + [0.0, 0.0]


def test_at_its_defaults_targeted_flip_relabels_every_class_1_sample_of_the_malicious_devices_as_0():
    ds = dataset([[1, 2, 1, 3], [2, 1, 1, 0], [1, 1, 2, 1]])
    out = build("targeted_flip", ds)
    assert out.dataset.clients[0] is ds.clients[0]
    assert out.dataset.clients[1].train.y.tolist() == [2, 0, 0, 0]
    assert out.dataset.clients[2].train.y.tolist() == [0, 0, 2, 0]
    assert torch.equal(out.dataset.clients[2].train.x, ds.clients[2].train.x)
    assert (out.backdoor.target, out.backdoor.stamp, out.backdoor.source) == (0, None, 1)
    assert out.tamper is None and out.bound is None and out.stop_round is None


def test_targeted_flip_relabels_a_rounded_share_of_the_source_samples_drawn_in_device_order():
    # Prepare: device 0 holds 4 samples of class 2, device 2 holds 3 (and two others); both malicious
    ds = dataset([[2, 2, 0, 2, 2], [2, 2], [1, 2, 2, 3, 2]])
    # Execute
    out = build("targeted_flip", ds, malicious=(True, False, True), seed=9, source=2, target=3, poison_fraction=0.75)
    # Assert: round(0.75 * 4) = 3 and round(0.75 * 3) = 2 of them, as one permutation of their indices each draws
    rng = np.random.default_rng(9)
    first = sorted(rng.permutation(np.array([0, 1, 3, 4]))[:3].tolist())
    second = sorted(rng.permutation(np.array([1, 2, 4]))[:2].tolist())
    assert out.dataset.clients[0].train.y.tolist() == [3 if j in first else [2, 2, 0, 2, 2][j] for j in range(5)]
    assert out.dataset.clients[2].train.y.tolist() == [3 if j in second else [1, 2, 2, 3, 2][j] for j in range(5)]
    # a share that rounds to none relabels nothing
    none = build("targeted_flip", ds, malicious=(True, False, True), source=2, target=3, poison_fraction=0.1)
    assert none.dataset.clients[2].train.y.tolist() == [1, 2, 2, 3, 2]


# --- model replacement -------------------------------------------------------------------------------------------


def test_the_boost_is_the_round_size_over_its_malicious_rows_or_the_given_factor():
    # Prepare: five rows, rows 1 and 4 malicious: n / k = 2.5
    updates = torch.arange(10, dtype=torch.float64).reshape(5, 2)
    bad = torch.tensor([False, True, False, False, True])
    # Execute
    out = boosted_updates(updates, bad, torch.Generator(), boost=None, max_norm=None)
    # Assert
    assert out[bad].tolist() == [[5.0, 7.5], [20.0, 22.5]] and torch.equal(out[~bad], updates[~bad])
    assert boosted_updates(updates, bad, torch.Generator(), boost=0.5, max_norm=None)[bad].tolist() == [[1.0, 1.5],
                                                                                                       [4.0, 4.5]]
    assert build("model_replacement", boost=3).tamper.keywords == {"boost": 3.0, "max_norm": None}


def test_a_boosted_row_beyond_max_norm_is_scaled_to_it_and_one_within_it_is_kept():
    updates = torch.tensor([[3.0, 4.0], [0.6, 0.8], [0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    bad = torch.tensor([True, True, True, False])
    # Execute: boost 1, bound 2: norms 5 (scaled by 2 / 5), 1 (kept, not scaled up), 0 (kept, no NaN)
    out = boosted_updates(updates, bad, torch.Generator(), boost=1.0, max_norm=2.0)
    # Assert
    assert out[0].tolist() == pytest.approx([1.2, 1.6], rel=1e-15, abs=0)
    assert out[1:].tolist() == [[0.6, 0.8], [0.0, 0.0], [1.0, 1.0]]


def test_a_tiny_row_is_scaled_to_a_tiny_bound_the_guard_only_keeps_zero_rows_finite():
    # a row of norm 1.5e-12 bounded at 1e-12: the guard (1e-12) must not stand in for its norm
    updates = torch.tensor([[1.5e-12, 0.0]], dtype=torch.float64)
    out = boosted_updates(updates, torch.tensor([True]), torch.Generator(), boost=1.0, max_norm=1e-12)
    assert out[0, 0].item() == pytest.approx(1e-12, rel=1e-12, abs=0) and out[0, 1].item() == 0.0


def test_boost_and_max_norm_must_be_positive_numbers():
    assert build("model_replacement", boost=1e-9, max_norm=1e-9).tamper.keywords == {"boost": 1e-9, "max_norm": 1e-9}
    for key in ("boost", "max_norm"):
        assert refusal("model_replacement", **{key: 0}) == f"attack 'model_replacement': {key} must be > 0, got 0"
        assert refusal("model_replacement", **{key: "1"}) == (f"attack 'model_replacement': {key} must be a finite "
                                                              "number, got '1'")


# --- neurotoxin --------------------------------------------------------------------------------------------------


def test_neurotoxin_zeroes_the_benign_means_largest_coordinates_at_least_one():
    # Prepare: benign mean (1, -4, 2, 0.5); malicious rows 1 and 3
    updates = torch.tensor([[1.0, -3.0, 2.0, 0.0], [1.0, 1.0, 1.0, 1.0], [1.0, -5.0, 2.0, 1.0], [2.0, 2.0, 2.0, 2.0]])
    bad = torch.tensor([False, True, False, True])
    # Execute / Assert: 0.25 of 4 is one coordinate (1); 0.1 of 4 rounds down to none, but one is masked
    for fraction in (0.25, 0.1):
        out = masked_updates(updates, bad, torch.Generator(), top_fraction=fraction)
        assert out[bad].tolist() == [[1.0, 0.0, 1.0, 1.0], [2.0, 0.0, 2.0, 2.0]]
        assert torch.equal(out[~bad], updates[~bad])
    # 0.5: coordinates 1 and 2; 0.99: three of four
    assert masked_updates(updates, bad, torch.Generator(), top_fraction=0.5)[1].tolist() == [1.0, 0.0, 0.0, 1.0]
    assert masked_updates(updates, bad, torch.Generator(), top_fraction=0.99)[1].tolist() == [0.0, 0.0, 0.0, 1.0]


def test_neurotoxins_ties_mask_the_lowest_coordinates():
    # Prepare: 40 coordinates of equal benign magnitude; 0.1 of them (4) masked
    updates, bad = torch.ones(3, 40), torch.tensor([False, False, True])
    # Execute
    out = masked_updates(updates, bad, torch.Generator(), top_fraction=0.1)
    # Assert: coordinates 0-3 (top-k's pick among the tie is its kernel's: 25-28 on an AVX-512 CPU)
    assert out[2].eq(0).nonzero().flatten().tolist() == [0, 1, 2, 3]


def test_neurotoxins_mask_is_the_stable_sorts_on_heavy_ties():
    # Prepare: 300 vectors of four distinct magnitudes (ties everywhere), some with NaNs (largest, as the sort ranks
    # them) and infinities, each with a count from 1 to its length
    gen = torch.Generator().manual_seed(0)
    for case in range(300):
        d = int(torch.randint(1, 300, (1,), generator=gen))
        values = torch.randint(0, 4, (d,), generator=gen).double()
        if case % 3 == 0:
            values[torch.randint(0, d, (3,), generator=gen)] = float("nan")
        if case % 5 == 0:
            values[torch.randint(0, d, (2,), generator=gen)] = float("inf")
        count = int(torch.randint(1, d + 1, (1,), generator=gen))
        expected = torch.zeros(d, dtype=torch.bool)
        expected[torch.sort(values, descending=True, stable=True).indices[:count]] = True
        # Execute / Assert: the set of the stable descending sort's first ``count``
        assert torch.equal(largest_mask(values, count), expected), (case, values.tolist(), count)


def test_neurotoxin_ranks_the_benign_rows_exact_float64_sum():
    # Prepare: benign sums 1 and 1 + 2^-30 in coordinates 0 and 1: equal as float32 means, not as float64 sums
    updates = torch.tensor([[1.0, 1.0, 0.1], [0.0, 2.0**-30, 0.1], [9.0, 9.0, 9.0]])
    bad = torch.tensor([False, False, True])
    # Assert: one coordinate (0.34 of 3) masked: coordinate 1, the larger
    out = masked_updates(updates, bad, torch.Generator(), top_fraction=0.34)
    assert out[2].tolist() == [9.0, 0.0, 9.0]


def test_neurotoxin_without_benign_rows_masks_by_its_own_mean():
    updates = torch.tensor([[0.0, 4.0, 1.0], [2.0, -8.0, 1.0]])
    out = masked_updates(updates, torch.tensor([True, True]), torch.Generator(), top_fraction=0.4)
    assert out.tolist() == [[0.0, 0.0, 1.0], [2.0, 0.0, 1.0]]


def test_top_fraction_is_strictly_between_zero_and_one():
    assert build("neurotoxin", top_fraction=1e-9).tamper.keywords == {"top_fraction": 1e-9}
    assert build("neurotoxin", top_fraction=0.999).tamper.keywords == {"top_fraction": 0.999}
    for value in (0, 1, 1.5, -0.1, True, "0.5"):
        assert refusal("neurotoxin", top_fraction=value) == ("attack 'neurotoxin': top_fraction must be in (0, 1), got "
                                                             f"{value!r}")


# --- the registry ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name,version,reads", [
    ("badnets", 3, ()), ("dba", 3, ()), ("model_replacement", 3, ()), ("neurotoxin", 4, ("honest_updates",)),
    ("targeted_flip", 1, ()),
])
def test_each_attack_is_registered_with_its_version_and_what_it_reads(name, version, reads):
    import fedarena.attacks.backdoor as module

    assert ATTACKS.get(name) is getattr(module, name)
    assert ATTACKS.version(name) == version and attack_reads({"name": name, "level": 0.2}) == reads
