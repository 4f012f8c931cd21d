"""fedarena/attacks/adaptive.py checked exactly, one behaviour per test: the rows each direction sends at a given
magnitude (unit, std, sign, ipm, sign_flip, worked out by hand), golden-section search's first points, its result
and its ties (a flat objective keeps the lower part of the bracket, so it returns (high - low) x 0.618^calls above
low), the geometric scan of 13 magnitudes gamma_init x 2^-6 .. 2^6 in order, the refining bracket between the
best scanned magnitude's neighbours (in the middle and at both ends of the scan), a plateau sending the smallest
magnitude scanned, exactly ``calls`` rule evaluations, whole rounds against the plain mean (the largest scanned
magnitude wins), every default, the least ``calls`` accepted, every refusal word for word and the registry entry
(make mutants MODULE=fedarena/attacks/adaptive.py)."""

import math

import numpy as np
import pytest
import torch

from fedarena.attacks import adaptive as module
from fedarena.attacks.adaptive import (
    DIRECTIONS,
    adaptive,
    adaptive_updates,
    golden_max,
    malicious_rows,
    strongest_gamma,
)
from fedarena.attacks.base import ATTACKS, attack_reads
from fedarena.datasets.base import ClientData, FederatedDataset, Split
from fedarena.errors import ConfigError

F64 = torch.float64
R = 0.6180339887498949  # 1 / the golden ratio, (sqrt 5 - 1) / 2, written out
SCAN = [2.0**k for k in range(-6, 7)]  # the documented scan for gamma_init = 1: 1/64, 1/32, ..., 32, 64

# two honest rows (mean [2, 1, -3], per-coordinate std sqrt 2) then two malicious rows (their own honest updates)
UPDATES = torch.tensor([[1.0, 2.0, -4.0], [3.0, 0.0, -2.0], [0.5, -1.0, 2.0], [4.0, 4.0, 4.0]], dtype=F64)
BAD = torch.tensor([False, False, True, True])
HONEST = UPDATES[:2]
MEAN = torch.tensor([2.0, 1.0, -3.0], dtype=F64)


def build(**params):
    """The attack's effect on a two-client dataset."""
    client = ClientData(*(Split(torch.zeros(2, 1), torch.tensor([0, 1])) for _ in range(3)))
    ds = FederatedDataset("tiny", [client, client], 2, (1,), "fp", "classification")
    return ATTACKS.get("adaptive")(ds, np.array([False, True]), np.random.default_rng(0), **params)


class Recorded:
    """An objective that records every magnitude it is asked about."""

    def __init__(self, objective):
        self.objective, self.seen = objective, []

    def __call__(self, gamma):
        self.seen.append(gamma)
        return self.objective(gamma)


def plain_mean(updates):
    return updates.mean(0)


# ---- the rows sent at a magnitude ---------------------------------------------------------------------------

def test_the_module_constants():
    assert DIRECTIONS == ("unit", "std", "sign", "ipm", "sign_flip")
    assert (module.SCAN_HALF_WIDTH, module.SCAN_CALLS) == (6, 13)
    assert module.INV_PHI == pytest.approx(R, rel=1e-15)


def test_sign_flip_sends_minus_gamma_times_each_attackers_own_update():
    rows = malicious_rows(UPDATES, BAD, HONEST, "sign_flip")(2.0)
    assert rows.dtype == F64
    assert rows.tolist() == [[-1.0, 2.0, -4.0], [-8.0, -8.0, -8.0]]


def test_sign_flip_reads_the_attackers_rows_in_float64():
    rows = malicious_rows(UPDATES.float(), BAD, HONEST, "sign_flip")(0.5)
    assert rows.dtype == F64 and rows.tolist() == [[-0.25, 0.5, -1.0], [-2.0, -2.0, -2.0]]


def test_ipm_sends_minus_gamma_times_the_honest_mean_to_every_attacker():
    rows = malicious_rows(UPDATES, BAD, HONEST, "ipm")(0.5)
    assert rows.tolist() == [[-1.0, -0.5, 1.5], [-1.0, -0.5, 1.5]]


def test_std_sends_the_mean_minus_gamma_times_the_honest_std():
    rows = malicious_rows(UPDATES, BAD, HONEST, "std")(3.0)
    expected = (MEAN - 3.0 * math.sqrt(2.0)).expand(2, -1)  # each coordinate's two values are 2 apart: std sqrt 2
    torch.testing.assert_close(rows, expected, rtol=0, atol=1e-12)


def test_unit_sends_the_mean_minus_gamma_times_its_unit_vector():
    rows = malicious_rows(UPDATES, BAD, HONEST, "unit")(2.0)
    expected = (MEAN * (1 - 2.0 / math.sqrt(14.0))).expand(2, -1)  # ||[2, 1, -3]|| = sqrt 14
    torch.testing.assert_close(rows, expected, rtol=0, atol=1e-12)


def test_sign_sends_the_mean_minus_gamma_times_its_sign():
    rows = malicious_rows(UPDATES, BAD, HONEST, "sign")(0.25)
    assert rows.tolist() == [[1.75, 0.75, -2.75]] * 2


# ---- golden-section search --------------------------------------------------------------------------------------

def test_golden_max_starts_at_the_two_golden_points_of_the_bracket():
    seen = Recorded(lambda x: -(x - 0.7) ** 2)
    golden_max(seen, 2.0, 4.0, 2)
    assert seen.seen == pytest.approx([4.0 - 2 * R, 2.0 + 2 * R], rel=1e-14)


def test_golden_max_moves_towards_the_larger_value():
    # on [0, 1]: f(0.382) < f(0.618) keeps [0.382, 1], whose new upper point is 0.382 + 0.618 x 0.618 = 2 x 0.382
    seen = Recorded(lambda x: -(x - 0.7) ** 2)
    best, value = golden_max(seen, 0.0, 1.0, 3)
    assert seen.seen == pytest.approx([1 - R, R, 2 * (1 - R)], rel=1e-14)
    assert best == pytest.approx(2 * (1 - R), rel=1e-14)
    assert value == pytest.approx(-(2 * (1 - R) - 0.7) ** 2, rel=1e-12)


def test_golden_max_converges_to_the_maximum_in_the_calls_given():
    best, value = golden_max(lambda x: -(x - 0.3) ** 2, 0.0, 1.0, 30)
    assert best == pytest.approx(0.3, abs=R**28) and value <= 0.0


@pytest.mark.parametrize("calls", [2, 3, 5, 8])
def test_on_a_flat_objective_golden_max_keeps_the_lower_part_of_the_bracket(calls):
    # a tie keeps [low, d]; after k ties the bracket is [low, low + R^k] and its lower point is low + R^(k+2)
    seen = Recorded(lambda x: 1.5)
    best, value = golden_max(seen, 2.0, 3.0, calls)
    assert len(seen.seen) == calls
    assert best == pytest.approx(2.0 + R**calls, rel=1e-13) and value == 1.5


# ---- the scan, then the refinement --------------------------------------------------------------------------------

@pytest.mark.parametrize("gamma_init", [1.0, 3.0])
def test_the_scan_is_13_magnitudes_gamma_init_times_2_to_the_minus_6_to_6_in_order(gamma_init):
    seen = Recorded(lambda g: -abs(math.log2(g / gamma_init) - 0.3))
    strongest_gamma(seen, gamma_init, 15)
    assert seen.seen[:13] == [gamma_init * g for g in SCAN]


def test_the_refinement_searches_between_the_best_scanned_magnitudes_neighbours():
    # the peak at 1.3: the scan's best is 1, the refinement runs on [1/2, 2] and finds 1.3
    seen = Recorded(lambda g: -(g - 1.3) ** 2)
    gamma = strongest_gamma(seen, 1.0, 32)
    assert len(seen.seen) == 32
    assert seen.seen[13:15] == pytest.approx([2.0 - 1.5 * R, 0.5 + 1.5 * R], rel=1e-14)
    assert all(0.5 <= g <= 2.0 for g in seen.seen[13:])
    assert gamma == pytest.approx(1.3, abs=1e-3) and gamma != 1.0


def test_at_the_scans_low_end_the_refinement_runs_on_its_first_two_magnitudes():
    seen = Recorded(lambda g: -g)
    gamma = strongest_gamma(seen, 1.0, 16)
    assert seen.seen[13:15] == pytest.approx([1 / 32 - R / 64, 1 / 64 + R / 64], rel=1e-14)
    assert all(1 / 64 <= g <= 1 / 32 for g in seen.seen[13:])
    assert gamma == 1 / 64  # nothing refined beats the scan's own best


def test_at_the_scans_high_end_the_refinement_runs_on_its_last_two_magnitudes():
    seen = Recorded(lambda g: g)
    gamma = strongest_gamma(seen, 1.0, 16)
    assert seen.seen[13:15] == pytest.approx([64 - 32 * R, 32 + 32 * R], rel=1e-14)
    assert all(32 <= g <= 64 for g in seen.seen[13:])
    assert gamma == 64.0


@pytest.mark.parametrize("calls", [15, 32])
def test_on_a_plateau_the_smallest_scanned_magnitude_is_sent(calls):
    # every magnitude ties: the first scanned wins and a refined one that only ties it does not replace it
    assert strongest_gamma(lambda g: 7.0, 1.0, calls) == 1 / 64
    assert strongest_gamma(lambda g: 7.0, 4.0, calls) == 4 / 64


@pytest.mark.parametrize("calls", [15, 16, 20, 32])
def test_the_search_evaluates_the_objective_exactly_calls_times(calls):
    seen = Recorded(lambda g: -(g - 5.0) ** 2)
    strongest_gamma(seen, 1.0, calls)
    assert len(seen.seen) == calls


# ---- whole rounds ---------------------------------------------------------------------------------------------

def test_against_the_mean_ipm_sends_the_largest_scanned_magnitude():
    # ||mean(rows) - honest mean|| grows with gamma: the scan's largest, 64 x gamma_init = 32, is sent
    out = build(direction="ipm", gamma_init=0.5).tamper(UPDATES, BAD, torch.Generator(), rule=plain_mean)
    assert out[:2].tolist() == HONEST.tolist()
    assert out[2:].tolist() == [[-64.0, -32.0, 96.0]] * 2


def test_against_the_mean_sign_flip_sends_minus_64_times_the_own_updates():
    out = build(direction="sign_flip").tamper(UPDATES, BAD, torch.Generator(), rule=plain_mean)
    assert out.tolist() == [[1.0, 2.0, -4.0], [3.0, 0.0, -2.0], [-32.0, 64.0, -128.0], [-256.0, -256.0, -256.0]]


def test_malicious_knowledge_reads_the_attackers_own_updates():
    # the attackers' mean is [2.25, 1.5, 3]: ipm at gamma 64 sends -64 times it
    out = adaptive_updates(UPDATES, BAD, torch.Generator(), rule=plain_mean, direction="ipm", knowledge="malicious",
                           gamma_init=1.0, calls=15)
    assert out[2:].tolist() == [[-144.0, -96.0, -192.0]] * 2


def test_the_round_calls_the_rule_exactly_calls_times_in_the_updates_dtype():
    seen = []

    def rule(updates):
        seen.append(updates.dtype)
        return updates.mean(0)

    out = build(direction="ipm", calls=20).tamper(UPDATES.float(), BAD, torch.Generator(), rule=rule)
    assert seen == [torch.float32] * 20 and out.dtype == torch.float32


# ---- options, defaults, refusals and the registry ----------------------------------------------------------

def test_the_defaults():
    effect = build()
    assert effect.tamper.func is adaptive_updates
    assert dict(effect.tamper.keywords) == {"direction": "std", "knowledge": "benign", "gamma_init": 1.0, "calls": 32}
    assert effect.needs_rule is True and effect.needs_benign is False


def test_given_options_are_kept_and_15_calls_accepted():
    effect = build(direction="sign_flip", knowledge="benign_strict", gamma_init=0.25, calls=15)
    assert dict(effect.tamper.keywords) == {"direction": "sign_flip", "knowledge": "benign_strict",
                                            "gamma_init": 0.25, "calls": 15}
    assert effect.needs_rule and effect.needs_benign
    assert build(knowledge="malicious", gamma_init=3).tamper.keywords["gamma_init"] == 3.0


@pytest.mark.parametrize("calls", [14, 0, -3, 15.0, 32.0, True, "20", None])
def test_calls_below_15_or_not_a_whole_number_are_refused_word_for_word(calls):
    with pytest.raises(ConfigError) as error:
        build(calls=calls)
    assert str(error.value) == ("attack 'adaptive': calls must be a whole number >= 15 (a scan of 13 magnitudes, then "
                                f"at least 2 refining ones), got {calls!r}")


@pytest.mark.parametrize("params,message", [
    ({"direction": "alie"}, "direction must be one of unit, std, sign, ipm, sign_flip, got 'alie'"),
    ({"knowledge": "full"}, "knowledge must be one of benign, benign_strict, malicious, got 'full'"),
    ({"gamma_init": 0.0}, "gamma_init must be > 0, got 0.0"),
    ({"gamma_init": -1}, "gamma_init must be > 0, got -1"),
    ({"gamma_init": float("inf")}, "gamma_init must be a finite number, got inf"),
])
def test_refusals_word_for_word(params, message):
    with pytest.raises(ConfigError) as error:
        build(**params)
    assert str(error.value) == f"attack 'adaptive': {message}"


def test_the_attack_is_registered_with_its_version_and_reads():
    assert ATTACKS.get("adaptive") is adaptive
    assert ATTACKS.version("adaptive") == 1
    # the search evaluates the server's rule on the honest rows, whatever the attacker's knowledge
    for knowledge in ("benign", "malicious"):
        assert attack_reads({"name": "adaptive", "level": 0.2, "knowledge": knowledge}) == ("honest_updates",)
