"""FedTilt's persistent outliers: which samples and pixels change, drawn anew every round, and what stays."""

import numpy as np
import pytest
import torch

from fedarena.attacks import ATTACKS, build_threat
from fedarena.attacks.outliers import feature_range, pick_samples
from fedarena.config import ExperimentConfig
from fedarena.datasets.base import ClientData, FederatedDataset, Split
from fedarena.errors import ConfigError
from fedarena.simulation.engine import _round_data, sample_clients
from fedarena.simulation.setup import build_trial

OWNER = torch.tensor([4] * 10 + [7] * 20 + [9] * 7)  # 3 clients: 10, 20 and 7 samples
NONE_BAD = torch.zeros(37, dtype=torch.bool)


def gen(seed):
    return torch.Generator().manual_seed(seed)


def corrupt_of(name, shape=(20,), malicious=(False, False), **params):
    """The attack's corrupt hook for a 2-client dataset whose features span [0, 1] (a sample of 0s and of 1s)."""
    x = torch.stack([torch.zeros(shape), torch.ones(shape)])
    split = Split(x, torch.tensor([0, 1]))
    ds = FederatedDataset("tiny", [ClientData(split, split, split)] * 2, 2, tuple(shape), "fp")
    return ATTACKS.get(name)(ds, np.array(malicious), np.random.default_rng(0), **params).corrupt


def far_data(shape):
    """Samples far outside [0, 1], so that every replaced value is recognisable."""
    return 1000.0 + torch.arange(int(np.prod(shape)), dtype=torch.float32).reshape(shape)


def test_pick_samples_takes_round_fraction_of_each_client():
    chosen = pick_samples(OWNER, 0.3, gen(0))
    assert [int(chosen[OWNER == k].sum()) for k in (4, 7, 9)] == [3, 6, 2]  # 3.0, 6.0, 2.1
    assert not torch.equal(chosen, pick_samples(OWNER, 0.3, gen(1)))


def test_random_corruption_replaces_fraction_of_pixels_of_fraction_of_samples():
    x, y = far_data((37, 20)), torch.arange(37)
    out_x, out_y = corrupt_of("persistent_random_corruption")(x, y, OWNER, NONE_BAD, gen(2))
    changed = out_x != x
    rows = changed.any(1)
    assert [int(rows[OWNER == k].sum()) for k in (4, 7, 9)] == [3, 6, 2]
    assert changed[rows].sum(1).tolist() == [6] * 11  # 30% of 20 pixels
    assert bool(((out_x[changed] >= 0) & (out_x[changed] <= 1)).all())  # drawn from the data's range
    assert torch.equal(out_y, y) and torch.equal(x, far_data((37, 20)))  # labels and input untouched


def test_random_corruption_is_redrawn_each_round():
    x, benign = far_data((37, 20)), torch.zeros(37, dtype=torch.bool)
    corrupt = corrupt_of("persistent_random_corruption")
    first, _ = corrupt(x, torch.zeros(37), OWNER, benign, gen(0))
    second, _ = corrupt(x, torch.zeros(37), OWNER, benign, gen(1))
    again, _ = corrupt(x, torch.zeros(37), OWNER, benign, gen(0))
    assert torch.equal(first, again)
    assert not torch.equal(first != x, second != x)


def test_random_corruption_of_images_replaces_whole_pixels_across_channels():
    x = far_data((10, 3, 4, 5))
    corrupt = corrupt_of("persistent_random_corruption", (3, 4, 5), sample_fraction=0.5, pixel_fraction=0.25)
    owner, bad = torch.zeros(10, dtype=torch.long), torch.zeros(10, dtype=torch.bool)
    out, _ = corrupt(x, torch.zeros(10), owner, bad, gen(3))
    changed = out != x
    rows = changed.flatten(1).any(1)
    assert int(rows.sum()) == 5
    assert torch.equal(changed[:, 0], changed[:, 1]) and torch.equal(changed[:, 0], changed[:, 2])
    assert changed[rows, 0].flatten(1).sum(1).tolist() == [5] * 5  # 25% of the 20 positions


def test_malicious_scope_corrupts_only_malicious_clients():
    x, bad = far_data((37, 20)), OWNER == 7
    corrupt = corrupt_of("persistent_random_corruption", malicious=(True, False), scope="malicious")
    out, _ = corrupt(x, torch.zeros(37), OWNER, bad, gen(0))
    rows = (out != x).any(1)
    assert int(rows[bad].sum()) == 6 and not bool(rows[~bad].any())


def test_gaussian_noise_adds_standard_normal_noise_to_fraction_of_samples():
    x = far_data((37, 4000))
    out, _ = corrupt_of("persistent_gaussian_noise", (4000,))(x, torch.zeros(37), OWNER, NONE_BAD, gen(5))
    rows = (out != x).any(1)
    assert [int(rows[OWNER == k].sum()) for k in (4, 7, 9)] == [3, 6, 2]
    noise = out[rows] - x[rows]
    assert noise.std().item() == pytest.approx(1.0, rel=0.02) and abs(noise.mean().item()) < 0.02
    assert torch.equal(out[~rows], x[~rows])


def test_feature_range_is_per_feature_over_every_clients_training_data():
    ds = FederatedDataset("tiny", [ClientData(Split(torch.tensor([[0.0, 5.0], [2.0, -1.0]]), torch.zeros(2)),
                                              Split(torch.full((1, 2), 99.0), torch.zeros(1)),
                                              Split(torch.full((1, 2), -99.0), torch.zeros(1))),
                                   ClientData(Split(torch.tensor([[-3.0, 1.0]]), torch.zeros(1)),
                                              Split(torch.zeros(1, 2), torch.zeros(1)),
                                              Split(torch.zeros(1, 2), torch.zeros(1)))], 2, (2,), "fp")
    low, high = feature_range(ds)
    assert low.tolist() == [-3.0, -1.0] and high.tolist() == [2.0, 5.0]  # val/test ignored


@pytest.mark.parametrize("section, match", [
    ({"level": 0.5}, "takes level 0"),
    ({"level": 0.0, "scope": "malicious"}, "needs a level > 0"),
    ({"level": 0.0, "scope": "some"}, "scope must be one of all, malicious"),
    ({"level": 0.0, "sample_fraction": 0.0}, r"fraction in \(0, 1\]"),
    ({"level": 0.0, "pixel_fraction": 1.5}, r"fraction in \(0, 1\]"),
])  # fmt: skip
def test_bad_outlier_settings_are_errors(section, match):
    client = ClientData(*[Split(torch.zeros(2, 3), torch.zeros(2))] * 3)
    ds = FederatedDataset("tiny", [client] * 4, 2, (3,), "fp")
    with pytest.raises(ConfigError, match=match):
        build_threat({"name": "persistent_random_corruption", **section}, ds, np.random.default_rng(0))


def test_engine_injects_outliers_into_the_selected_clients_every_round_and_never_into_val_or_test():
    cfg = ExperimentConfig.from_dict({"dataset": {"name": "digits", "num_clients": 20}, "clients_per_round": 5,
                                      "attack": {"name": "persistent_random_corruption"}})
    trial = build_trial(cfg)
    before = trial.train.x.clone()
    masks = []
    for t in (0, 1):
        ids = sample_clients(trial, t)
        pool = _round_data(trial, ids, t)
        changed = (pool.x != trial.train.x).any(1)
        for k in range(20):
            part = changed[trial.train.offsets[k]: trial.train.offsets[k] + trial.train.sizes[k]]
            assert int(part.sum()) == (round(0.3 * trial.train.sizes[k]) if k in ids else 0)
        masks.append(changed)
    assert not torch.equal(masks[0], masks[1])
    assert torch.equal(trial.train.x, before)  # each round corrupts a copy
    for split, pool in (("train", trial.train), ("val", trial.val), ("test", trial.test)):
        assert torch.equal(pool.x, torch.cat([getattr(c, split).x for c in trial.dataset.clients]))
