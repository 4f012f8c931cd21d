"""Min-Max, Min-Sum (NDSS 2021) and Fang et al. (USENIX Security 2020): hand-computed malicious updates, the
knowledge settings, and the error when a round could hold no benign update."""

import numpy as np
import pytest
import torch

from fedarena.attacks import ATTACKS, build_threat
from fedarena.attacks.base import check_benign_in_every_round
from fedarena.attacks.optimized import largest_gamma
from fedarena.datasets.base import ClientData, FederatedDataset, Split
from fedarena.errors import ConfigError
from fedarena.methods.aggregators import make_aggregator

# Three benign updates 0, 1, 5 in one dimension (mean 2) and two malicious rows (their honest updates 8, 9).
UPDATES = torch.tensor([[0.0], [1.0], [5.0], [8.0], [9.0]], dtype=torch.float64)
BAD = torch.tensor([False, False, False, True, True])


def tamper_of(name, **params):
    client = ClientData(*(Split(torch.zeros(2, 1), torch.tensor([0, 1])) for _ in range(3)))
    ds = FederatedDataset("tiny", [client, client], 2, (1,), "fp", "classification")
    return ATTACKS.get(name)(ds, np.array([False, True]), np.random.default_rng(0), **params).tamper


def test_min_max_goes_as_far_as_the_benign_diameter():
    # m = 2 - gamma (unit direction -1); farthest benign is 5 at distance 3 + gamma <= diameter 5: gamma = 2
    out = tamper_of("min_max")(UPDATES, BAD, torch.Generator())
    torch.testing.assert_close(out[3:], torch.zeros(2, 1, dtype=torch.float64), atol=1e-4, rtol=0)
    assert torch.equal(out[:3], UPDATES[:3])


def test_min_sum_keeps_the_sum_of_squares_of_the_worst_benign_update():
    # sums of squared distances: 0 -> 26, 1 -> 17, 5 -> 41; (2 - g)^2 + (1 - g)^2 + (3 + g)^2 = 14 + 3 g^2
    # <= 41 gives gamma = 3, m = -1
    out = tamper_of("min_sum")(UPDATES, BAD, torch.Generator())
    torch.testing.assert_close(out[3:], torch.full((2, 1), -1.0, dtype=torch.float64), atol=1e-4, rtol=0)


def test_full_knowledge_falls_back_to_the_attackers_updates_in_a_round_without_benign_ones():
    everyone_bad = torch.ones(5, dtype=torch.bool)
    own = tamper_of("min_max", knowledge="malicious")(UPDATES, everyone_bad, torch.Generator())
    assert torch.equal(tamper_of("min_max")(UPDATES, everyone_bad, torch.Generator()), own)


def test_partial_knowledge_uses_the_attackers_own_updates():
    # reference 8, 9: mean 8.5, diameter 1; m = 8.5 - gamma with 0.5 + gamma <= 1: gamma = 0.5, m = 8
    out = tamper_of("min_max", knowledge="malicious")(UPDATES, BAD, torch.Generator())
    torch.testing.assert_close(out[3:], torch.full((2, 1), 8.0, dtype=torch.float64), atol=1e-4, rtol=0)


def test_gamma_search_finds_the_largest_fitting_value():
    assert largest_gamma(lambda g: g <= 3.3, 10.0, 1e-6) == pytest.approx(3.3, abs=1e-5)
    assert largest_gamma(lambda g: False, 10.0, 1e-6) == 0.0


def test_fang_sends_values_past_the_benign_extremes_against_their_direction():
    # coordinate 0: benign mean > 0, min 0.5 > 0 -> values in [0.25, 0.5];
    # coordinate 1: mean < 0, max -1 <= 0 -> values in [-1, -0.5]
    updates = torch.tensor([[0.5, -3.0], [1.0, -1.0], [2.0, -2.0], [7.0, 7.0], [7.0, 7.0]])
    out = tamper_of("fang")(updates, BAD, torch.Generator().manual_seed(0))
    assert bool(((out[3:, 0] >= 0.25) & (out[3:, 0] <= 0.5)).all())
    assert bool(((out[3:, 1] >= -1.0) & (out[3:, 1] <= -0.5)).all())
    assert not torch.equal(out[3], out[4])  # each attacker draws its own values
    median = make_aggregator({"name": "median"}, f=2)
    assert median(out, torch.ones(5))[0] < median(updates[:3], torch.ones(3))[0]  # pulled against the mean


def test_full_knowledge_needs_a_benign_update_in_every_round():
    client = ClientData(*(Split(torch.zeros(2, 1), torch.tensor([0, 1])) for _ in range(3)))
    ds = FederatedDataset("tiny", [client] * 10, 2, (1,), "fp", "classification")
    strict = {"name": "min_max", "level": 0.5, "knowledge": "benign_strict"}
    threat = build_threat(strict, ds, np.random.default_rng(0))
    with pytest.raises(ConfigError, match="5 malicious clients can fill all 5 places.*knowledge=benign"):
        check_benign_in_every_round(threat, 5)
    check_benign_in_every_round(threat, 6)
    for knowledge in ("benign", "malicious"):  # fall back to / always use the attackers' own updates
        lenient = build_threat({**strict, "knowledge": knowledge}, ds, np.random.default_rng(0))
        check_benign_in_every_round(lenient, 5)
    with pytest.raises(ConfigError, match="knowledge must be one of benign, benign_strict, malicious"):
        build_threat({"name": "fang", "level": 0.5, "knowledge": "all"}, ds, np.random.default_rng(0))
