"""fedarena/attacks/optimized.py checked exactly, one behaviour per test: the knowledge and direction choices and
what each knowledge reads, the reference rows (full knowledge, its fallback in a round without benign rows, partial
knowledge), the three perturbations (the 1e-12 floor of the unit one, the std's correction for one, two and three
rows), Algorithm 1's halving search (its candidates one by one, its stop at exactly tol, nothing fitting),
``distances_along``'s quadratic, the Min-Max and Min-Sum tests (paper and reference) against direct float64 NumPy
computations and at their exact ties, the notebooks' gamma start per dataset, the malicious rows each attack sends
(hand-computed; the default tol's search written out as the authors' notebooks run it), Fang's interval per
coordinate (every sign case, b = 2 by default and as given), every refusal word for word and the registry entries
(make mutants MODULE=fedarena/attacks/optimized.py)."""

from collections.abc import Callable
from math import sqrt

import numpy as np
import pytest
import torch

from fedarena.attacks import optimized
from fedarena.attacks.base import ATTACKS, attack_reads
from fedarena.attacks.optimized import (
    distances_along,
    gamma_start,
    largest_gamma,
    min_max_fits,
    min_sum_fits,
    min_sum_fits_reference,
    perturbation,
    reference_rows,
)
from fedarena.datasets.base import ClientData, FederatedDataset, Split
from fedarena.errors import ConfigError

F64 = torch.float64


def dataset(name="tiny"):
    client = ClientData(*(Split(torch.zeros(2, 1), torch.tensor([0, 1])) for _ in range(3)))
    return FederatedDataset(name, [client, client], 2, (1,), "fp", "classification")


def effect(name, **params):
    return ATTACKS.get(name)(dataset(), np.array([False, True]), np.random.default_rng(0), **params)


def rows(*values):
    return torch.tensor(values, dtype=F64)


def mask(*flags):
    return torch.tensor(flags, dtype=torch.bool)


class Scripted:
    """A fits function that records the candidates asked and stops a runaway search."""

    def __init__(self, fits):
        self.fits, self.asked = fits, []

    def __call__(self, gamma):
        self.asked.append(gamma)
        assert len(self.asked) < 200, "the search does not stop"
        return self.fits(gamma)


def notebook_search(ok, start, tol):
    """The authors' notebooks' loop (``our_attack_dist`` / ``our_attack_score``), transcribed."""
    lamda, fail, succ = start, start, 0.0
    while abs(succ - lamda) > tol:
        if ok(lamda):
            succ, lamda = lamda, lamda + fail / 2
        else:
            lamda = lamda - fail / 2
        fail /= 2
    return succ


# ---- constants, choices, reads ------------------------------------------------------------------------------------

def test_the_knowledge_settings_and_directions():
    assert optimized.KNOWLEDGE == ("benign", "benign_strict", "malicious")
    assert optimized.DIRECTIONS == ("unit", "std", "sign")


def test_what_each_knowledge_reads():
    assert optimized.knowledge_reads() == ("honest_updates",)
    assert optimized.knowledge_reads(knowledge="benign") == ("honest_updates",)
    assert optimized.knowledge_reads(knowledge="benign_strict", direction="std") == ("honest_updates",)
    assert optimized.knowledge_reads(knowledge="malicious") == ()
    for name in ("min_max", "min_sum", "fang"):
        assert attack_reads({"name": name}) == ("honest_updates",)
        assert attack_reads({"name": name, "knowledge": "benign_strict"}) == ("honest_updates",)
        assert attack_reads({"name": name, "knowledge": "malicious"}) == ()


def test_a_search_against_the_rule_reads_the_honest_rows_whatever_its_knowledge():
    assert optimized.RULE_SEARCH_READS == ("honest_updates",)
    assert attack_reads({"name": "tailored_krum", "knowledge": "malicious"}) == ("honest_updates",)


def test_the_registry_entries():
    assert ATTACKS.get("min_max") is optimized.min_max
    assert ATTACKS.get("min_sum") is optimized.min_sum
    assert ATTACKS.get("fang") is optimized.fang
    for build in (optimized.min_max, optimized.min_sum, optimized.fang):
        assert build.device_reads is optimized.knowledge_reads


def test_the_fits_type():
    assert optimized.Fits == Callable[[torch.Tensor, torch.Tensor, torch.Tensor], Callable[[float], bool]]


def test_only_benign_strict_needs_a_benign_update_in_every_round():
    for name in ("min_max", "min_sum", "fang"):
        assert effect(name).needs_benign is False
        assert effect(name, knowledge="benign").needs_benign is False
        assert effect(name, knowledge="benign_strict").needs_benign is True
        assert effect(name, knowledge="malicious").needs_benign is False
        assert callable(effect(name).tamper)


# ---- refusals ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["min_max", "min_sum", "fang"])
def test_an_unknown_knowledge_is_refused(name):
    with pytest.raises(ConfigError, match=rf"^attack '{name}': knowledge must be one of benign, benign_strict, "
                                          r"malicious, got 'all'$"):
        effect(name, knowledge="all")


@pytest.mark.parametrize("name", ["min_max", "min_sum"])
def test_an_unknown_direction_is_refused(name):
    with pytest.raises(ConfigError, match=rf"^attack '{name}': direction must be one of unit, std, sign, "
                                          r"got 'north'$"):
        effect(name, direction="north")


@pytest.mark.parametrize("name", ["min_max", "min_sum"])
def test_a_tol_or_gamma_init_not_above_zero_is_refused(name):
    with pytest.raises(ConfigError, match=rf"^attack '{name}': tol must be > 0, got 0$"):
        effect(name, tol=0)
    with pytest.raises(ConfigError, match=rf"^attack '{name}': gamma_init must be > 0, got -1.0$"):
        effect(name, gamma_init=-1.0)


def test_min_sum_refuses_an_unknown_mode_naming_both():
    with pytest.raises(ConfigError, match=r"^attack 'min_sum': mode must be one of paper, reference, got 'min'$"):
        effect("min_sum", mode="min")


def test_fang_refuses_b_of_one_or_less_and_takes_anything_above():
    for b, shown in ((1, "1"), (1.0, "1.0"), (0.5, "0.5"), (-2, "-2")):
        with pytest.raises(ConfigError, match=rf"^attack 'fang': b must be > 1, got {shown}$"):
            effect("fang", b=b)
    assert callable(effect("fang", b=1.5).tamper)
    assert callable(effect("fang", b=2).tamper)


def test_fang_refuses_a_b_that_is_not_a_finite_number_before_comparing_it():
    # a NaN compared false with 1 and ran (every malicious row NaN); a string raised a TypeError
    for b, shown in ((float("nan"), "nan"), (float("inf"), "inf"), ("3", "'3'"), (True, "True")):
        with pytest.raises(ConfigError, match=rf"^attack 'fang': b must be a finite number, got {shown}$"):
            effect("fang", b=b)


# ---- reference rows and perturbations ------------------------------------------------------------------------------

UPDATES = rows([0.0, 1.0], [10.0, 11.0], [2.0, 3.0], [12.0, 13.0])


def test_full_knowledge_reads_the_benign_rows():
    bad = mask(False, True, False, True)
    for knowledge in ("benign", "benign_strict"):
        assert torch.equal(reference_rows(UPDATES, bad, knowledge), rows([0.0, 1.0], [2.0, 3.0]))


def test_partial_knowledge_reads_the_malicious_rows():
    bad = mask(False, True, False, True)
    assert torch.equal(reference_rows(UPDATES, bad, "malicious"), rows([10.0, 11.0], [12.0, 13.0]))


def test_full_knowledge_reads_every_row_of_a_round_without_malicious_or_without_benign_ones():
    assert torch.equal(reference_rows(UPDATES, mask(False, False, False, False), "benign"), UPDATES)
    assert torch.equal(reference_rows(UPDATES, mask(True, True, True, True), "benign"), UPDATES)


def test_the_unit_perturbation_is_minus_the_mean_over_its_norm():
    honest = rows([3.0, 4.0], [0.0, 0.0], [6.0, 8.0])  # mean (3, 4), norm 5
    torch.testing.assert_close(perturbation(honest, "unit"), rows(-0.6, -0.8), rtol=0, atol=1e-15)


def test_a_mean_shorter_than_1e_12_is_divided_by_1e_12():
    torch.testing.assert_close(perturbation(rows([3e-13, 4e-13]), "unit"), rows(-0.3, -0.4), rtol=1e-12, atol=0)
    # norm 1.5e-12, above the floor: a unit vector
    torch.testing.assert_close(perturbation(rows([0.0, 1.5e-12]), "unit"), rows(0.0, -1.0), rtol=1e-12, atol=0)
    assert torch.equal(perturbation(rows([0.0, 0.0], [0.0, 0.0]), "unit"), rows(0.0, 0.0))


def test_the_std_perturbation_is_minus_the_sample_std_per_coordinate():
    # x: 1, 3, 2 (variance (1 + 1 + 0) / 2 = 1); y: 1, 1, 4 (variance (1 + 1 + 4) / 2 = 3)
    got = perturbation(rows([1.0, 1.0], [3.0, 1.0], [2.0, 4.0]), "std")
    torch.testing.assert_close(got, rows(-1.0, -sqrt(3.0)), rtol=1e-14, atol=0)
    # one coordinate, three rows 0, 1, 5: variance (4 + 1 + 9) / 2 = 7
    torch.testing.assert_close(perturbation(rows([0.0], [1.0], [5.0]), "std"), rows(-sqrt(7.0)), rtol=1e-14, atol=0)


def test_the_std_of_two_rows_divides_by_one_and_of_one_row_is_zero():
    torch.testing.assert_close(perturbation(rows([0.0], [2.0]), "std"), rows(-sqrt(2.0)), rtol=1e-14, atol=0)
    got = perturbation(rows([3.0, -1.0]), "std")
    assert torch.equal(got, rows(0.0, 0.0))


def test_the_sign_perturbation_is_minus_the_sign_of_the_mean():
    got = perturbation(rows([1.0, -2.0, 0.0], [3.0, -4.0, 0.0]), "sign")
    assert torch.equal(got, rows(-1.0, 1.0, 0.0))


# ---- the gamma search ----------------------------------------------------------------------------------------------

def test_the_search_halves_its_step_up_after_a_fit_and_down_after_a_miss():
    # 10 no -> 5 no -> 2.5 yes -> 3.75 no -> next 3.125, within tol 1 of the last fit 2.5: stop
    fits = Scripted(lambda g: g <= 3.3)
    assert largest_gamma(fits, 10.0, 1.0) == 2.5
    assert fits.asked == [10.0, 5.0, 2.5, 3.75]


def test_the_search_stops_once_the_next_candidate_is_at_most_tol_from_the_last_fit():
    # after 3.75 misses the next candidate 3.125 is exactly 0.625 from 2.5: not more than tol, so not asked
    fits = Scripted(lambda g: g <= 3.3)
    assert largest_gamma(fits, 10.0, 0.625) == 2.5
    assert fits.asked == [10.0, 5.0, 2.5, 3.75]
    fits = Scripted(lambda g: g <= 3.3)
    assert largest_gamma(fits, 10.0, 0.5) == 3.125
    assert fits.asked == [10.0, 5.0, 2.5, 3.75, 3.125]


def test_the_search_climbs_towards_twice_the_start_when_everything_fits():
    fits = Scripted(lambda g: True)
    assert largest_gamma(fits, 10.0, 1.0) == 18.75
    assert fits.asked == [10.0, 15.0, 17.5, 18.75]


def test_the_search_ends_at_zero_when_nothing_fits():
    fits = Scripted(lambda g: False)
    assert largest_gamma(fits, 8.0, 1.0) == 0.0
    assert fits.asked == [8.0, 4.0, 2.0]  # next 1.0 is within tol 1 of 0


# ---- the tests along the line m = mean + gamma push ----------------------------------------------------------------

HONEST = rows([1.0, 1.0], [3.0, 1.0], [2.0, 4.0])
CENTRE = rows(0.0, 1.0)  # any point of the line, not only the honest mean
PUSH = rows(1.0, 0.5)
GRID = [float(g) for g in np.linspace(-4.1, 6.3, 53)]


def test_distances_along_the_line_are_a_quadratic_in_gamma():
    a, b, c = distances_along(HONEST, rows(2.0, 2.0), rows(0.5, -1.0))
    # mean - g_i: (1, 1), (-1, 1), (0, -2)
    torch.testing.assert_close(a, rows(2.0, 2.0, 4.0), rtol=0, atol=0)
    torch.testing.assert_close(b, rows(-0.5, -1.5, 2.0), rtol=0, atol=0)
    assert float(c) == 1.25


def direct_farthest(gamma):
    m = CENTRE.numpy() + gamma * PUSH.numpy()
    return ((HONEST.numpy() - m) ** 2).sum(1).max()


def direct_score(gamma):
    m = CENTRE.numpy() + gamma * PUSH.numpy()
    return ((HONEST.numpy() - m) ** 2).sum()


def honest_scores():
    h = HONEST.numpy()
    return ((h[:, None, :] - h[None, :, :]) ** 2).sum(-1).sum(1)  # 14, 14, 20


def test_min_max_fits_where_the_farthest_honest_update_is_within_the_honest_diameter():
    fits = min_max_fits(HONEST, CENTRE, PUSH)
    diameter_sq = 10.0  # (1, 1) - (2, 4) and (3, 1) - (2, 4)
    expected = [bool(direct_farthest(g) <= diameter_sq) for g in GRID]
    assert [fits(g) for g in GRID] == expected
    assert True in expected and False in expected


def test_min_sum_fits_where_the_score_is_within_the_largest_honest_score():
    assert list(honest_scores()) == [14.0, 14.0, 20.0]
    fits = min_sum_fits(HONEST, CENTRE, PUSH)
    expected = [bool(direct_score(g) <= 20.0) for g in GRID]
    assert [fits(g) for g in GRID] == expected
    assert True in expected and False in expected


def test_min_sum_reference_fits_where_the_score_is_within_the_smallest_honest_score():
    fits = min_sum_fits_reference(HONEST, CENTRE, PUSH)
    expected = [bool(direct_score(g) <= 14.0) for g in GRID]
    assert [fits(g) for g in GRID] == expected
    assert True in expected and False in expected
    assert expected != [bool(direct_score(g) <= 20.0) for g in GRID]


def test_each_test_holds_at_its_exact_tie():
    honest, mean = rows([0.0], [1.0], [5.0]), rows(2.0)
    # Min-Max: |2 - 2 g - 5| <= 5 up to g = 1 (push -2); |2 - g - 5| <= 5 up to g = 2 (push -1)
    fits = min_max_fits(honest, mean, rows(-2.0))
    assert fits(1.0) is True and fits(1.0 + 1e-9) is False and fits(0.5) is True
    fits = min_max_fits(honest, mean, rows(-1.0))
    assert fits(2.0) is True and fits(2.0 + 1e-9) is False and fits(2.25) is False
    # scores 26, 17, 41; the line's score 14 + 3 g^2 (push -1): 41 at g = 3, 17 at g = 1
    fits = min_sum_fits(honest, mean, rows(-1.0))
    assert bool(fits(3.0)) is True and bool(fits(3.0 + 1e-9)) is False
    fits = min_sum_fits_reference(honest, mean, rows(-1.0))
    assert bool(fits(1.0)) is True and bool(fits(1.0 + 1e-9)) is False
    # push -2: 14 + 12 g^2 <= 41 up to g = 1.5
    fits = min_sum_fits(honest, mean, rows(-2.0))
    assert bool(fits(1.5)) is True and bool(fits(1.5 + 1e-9)) is False


# ---- gamma start ---------------------------------------------------------------------------------------------------

def test_gamma_starts_at_50_on_femnist_10_elsewhere_or_as_given():
    assert optimized.NOTEBOOK_GAMMA_INIT == {"femnist": 50.0, "femnist_skewed": 50.0}
    assert optimized.DEFAULT_GAMMA_INIT == 10.0
    assert gamma_start("min_max", dataset("femnist"), None) == 50.0
    assert gamma_start("min_max", dataset("femnist_skewed"), None) == 50.0
    assert gamma_start("min_max", dataset("cifar10"), None) == 10.0
    assert gamma_start("min_max", dataset("femnist"), 3) == 3.0
    with pytest.raises(ConfigError, match=r"^attack 'min_sum': gamma_init must be > 0, got 0$"):
        gamma_start("min_sum", dataset(), 0)


# ---- what Min-Max and Min-Sum send ---------------------------------------------------------------------------------

# honest (1, 1), (3, 1), (2, 4) (mean (2, 2)) in rows 0, 2, 3; two malicious rows 1, 4 with their own (0, 3), (0, 5)
ROUND = rows([1.0, 1.0], [0.0, 3.0], [3.0, 1.0], [2.0, 4.0], [0.0, 5.0])
BAD = mask(False, True, False, False, True)


def sent(name, updates=ROUND, bad=BAD, **params):
    out = effect(name, **params).tamper(updates, bad, torch.Generator())
    assert torch.equal(out[~bad], updates[~bad])
    assert out.dtype == updates.dtype
    return out[bad]


def test_min_max_unit_sends_the_mean_pushed_back_to_the_diameter():
    # m = (2 - t, 2 - t) (t = gamma / sqrt 2); farthest is (2, 4): 2 t^2 + 4 t + 4 <= 10 up to t = 1
    for knowledge in ("benign", "benign_strict"):
        out = sent("min_max", knowledge=knowledge)
        torch.testing.assert_close(out, rows([1.0, 1.0], [1.0, 1.0]), rtol=0, atol=1e-4)


def test_min_max_std_pushes_each_coordinate_by_its_std():
    # push -(1, sqrt 3); farthest (2, 4): 4 g^2 + 4 sqrt3 g + 4 <= 10 up to g = (3 - sqrt 3) / 2
    out = sent("min_max", direction="std")
    m = [(1 + sqrt(3.0)) / 2, (7 - 3 * sqrt(3.0)) / 2]
    torch.testing.assert_close(out, rows(m, m), rtol=0, atol=1e-4)


def test_min_max_sign_pushes_by_minus_the_sign():
    # honest (0, 0), (4, 0), (2, 3): mean (2, 1), push -(1, 1) (the unit one would be -(2, 1) / sqrt 5);
    # diameter^2 16; farthest (2, 3): 2 g^2 + 4 g + 4 <= 16 up to g = sqrt 7 - 1
    updates = rows([0.0, 0.0], [4.0, 0.0], [2.0, 3.0], [9.0, 9.0])
    out = sent("min_max", updates, mask(False, False, False, True), direction="sign")
    torch.testing.assert_close(out, rows([3 - sqrt(7.0), 2 - sqrt(7.0)]), rtol=0, atol=1e-4)


def test_min_max_with_partial_knowledge_uses_the_malicious_rows():
    # own rows (0, 3), (0, 5): mean (0, 4), push (0, -1), diameter 2: 1 + g <= 2 up to g = 1
    out = sent("min_max", knowledge="malicious")
    torch.testing.assert_close(out, rows([0.0, 3.0], [0.0, 3.0]), rtol=0, atol=1e-4)


def test_min_sum_sends_the_mean_pushed_to_the_largest_or_smallest_honest_score():
    # score of (2 - t, 2 - t): 8 + 6 t^2; <= 20 (paper) up to t = sqrt 2, <= 14 (reference) up to t = 1
    far = 2 - sqrt(2.0)
    torch.testing.assert_close(sent("min_sum"), rows([far, far], [far, far]), rtol=0, atol=1e-4)
    torch.testing.assert_close(sent("min_sum", mode="paper"), rows([far, far], [far, far]), rtol=0, atol=1e-4)
    torch.testing.assert_close(sent("min_sum", mode="reference"), rows([1.0, 1.0], [1.0, 1.0]), rtol=0, atol=1e-4)


def test_min_sum_std_and_partial_knowledge():
    # push -(1, sqrt 3), score 8 + 3 (1 + 3) g^2 <= 20 up to g = 1
    out = sent("min_sum", direction="std")
    torch.testing.assert_close(out, rows([1.0, 2 - sqrt(3.0)], [1.0, 2 - sqrt(3.0)]), rtol=0, atol=1e-4)
    # own rows (0, 3), (0, 5): scores 4, 4; the line's 2 + 2 g^2 <= 4 up to g = 1
    out = sent("min_sum", knowledge="malicious")
    torch.testing.assert_close(out, rows([0.0, 3.0], [0.0, 3.0]), rtol=0, atol=1e-4)


def test_the_reference_bound_can_leave_the_mean_itself():
    # honest 0, 2, 4: scores 20, 8, 20; the line's 8 + 3 g^2 exceeds the smallest (8) for every g > 0
    updates, bad = rows([0.0], [2.0], [4.0], [7.0]), mask(False, False, False, True)
    assert torch.equal(sent("min_sum", updates, bad, mode="reference"), rows([2.0]))


@pytest.mark.parametrize("name", ["min_max", "min_sum"])
def test_the_default_search_starts_at_10_with_tol_1e_5_as_the_notebooks(name):
    # honest 0, 2, 4, mean 2, push -1: Min-Max's farthest 2 + g <= diameter 4 and Min-Sum's 8 + 3 g^2 <= 20 both
    # hold up to g = 2, which the halving from 10 never hits: where it stops depends on tol
    honest = np.array([0.0, 2.0, 4.0])
    ok = {"min_max": lambda g: np.abs(2 - g - honest).max() <= 4.0,
          "min_sum": lambda g: ((2 - g - honest) ** 2).sum() <= 20.0}[name]
    gamma = notebook_search(ok, 10.0, 1e-5)
    assert gamma != notebook_search(ok, 10.0, 2e-5) and gamma != notebook_search(ok, 11.0, 1e-5)
    updates, bad = rows([0.0], [2.0], [4.0], [7.0]), mask(False, False, False, True)
    assert float(sent(name, updates, bad)[0, 0]) == pytest.approx(2.0 - gamma, abs=1e-12)


# ---- Fang ----------------------------------------------------------------------------------------------------------

# honest rows 0, 2, 3; malicious rows 1, 4. Per coordinate (b = 2):
# 0: 0.5, 1, 3      mean 1.5 > 0, min 0.5 > 0  -> [min / b, min]   = [0.25, 0.5]
# 1: -4, 2.5, 3     mean 0.5 > 0, min -4 <= 0  -> [b min, min]     = [-8, -4]
# 2: -3, -1.5, 0.5  mean < 0,     max 0.5 > 0  -> [max, b max]     = [0.5, 1]
# 3: -3, -2, -1     mean < 0,     max -1 <= 0  -> [max, max / b]   = [-1, -0.5]
# 4: -1, 0, 1       mean 0 (<= 0), max 1 > 0   -> [max, b max]     = [1, 2]
FANG_ROUND = rows([0.5, -4.0, -3.0, -3.0, -1.0], [50.0, 50.0, 50.0, 50.0, 50.0], [1.0, 2.5, -1.5, -2.0, 0.0],
                  [3.0, 3.0, 0.5, -1.0, 1.0], [-50.0, -50.0, -50.0, -50.0, -50.0])
FANG_BAD = mask(False, True, False, False, True)


def fang_sent(updates=FANG_ROUND, bad=FANG_BAD, seed=3, **params):
    out = effect("fang", **params).tamper(updates, bad, torch.Generator().manual_seed(seed))
    assert torch.equal(out[~bad], updates[~bad])
    return out[bad]


def uniform_in(low, high, count, seed=3):
    """``count`` rows drawn uniformly in [low, high] per coordinate, from the round's generator."""
    u = torch.rand((count, len(low)), generator=torch.Generator().manual_seed(seed), dtype=F64)
    low, high = rows(*low), rows(*high)
    return low + u * (high - low)


def test_fang_draws_each_value_in_its_coordinates_interval_with_b_2():
    expected = uniform_in([0.25, -8.0, 0.5, -1.0, 1.0], [0.5, -4.0, 1.0, -0.5, 2.0], 2)
    out = fang_sent()
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
    assert not torch.equal(out[0], out[1])


def test_fang_uses_b_as_given():
    # b = 1.5: [0.5 / 1.5, 0.5], [-6, -4], [0.5, 0.75], [-1, -1 / 1.5], [1, 1.5]
    expected = uniform_in([0.5 / 1.5, -6.0, 0.5, -1.0, 1.0], [0.5, -4.0, 0.75, -1.0 / 1.5, 1.5], 2)
    torch.testing.assert_close(fang_sent(b=1.5), expected, rtol=0, atol=1e-12)


def test_fang_with_partial_knowledge_reads_the_malicious_rows():
    # own rows (2, -2), (4, -6): mean (3, -4); min 2 > 0 -> [1, 2]; max -2 <= 0 -> [-2, -1]
    updates = rows([-5.0, 5.0], [2.0, -2.0], [-7.0, 9.0], [4.0, -6.0])
    bad = mask(False, True, False, True)
    expected = uniform_in([1.0, -2.0], [2.0, -1.0], 2, seed=5)
    torch.testing.assert_close(fang_sent(updates, bad, seed=5, knowledge="malicious"), expected, rtol=0, atol=1e-12)
    # full knowledge: benign (-5, 5), (-7, 9): mean (-6, 7); max -5 <= 0 -> [-5, -2.5]; min 5 > 0 -> [2.5, 5]
    expected = uniform_in([-5.0, 2.5], [-2.5, 5.0], 2, seed=5)
    torch.testing.assert_close(fang_sent(updates, bad, seed=5), expected, rtol=0, atol=1e-12)


def test_fang_with_a_huge_b_sends_finite_values_past_the_honest_extremes():
    # in float32 b x 3 and b x -3 overflow at b = 1e39 (past 3.4e38); the interval then was [-inf, -3] and the
    # draw -inf + u x inf = NaN. Its ends now saturate at half float32's largest value.
    honest = torch.tensor([[3.0, -3.0], [-1.0, 1.0], [2.0, -1.0]], dtype=torch.float32)  # mean (4/3, -1)
    updates = torch.cat([honest, torch.zeros(2, 2)])
    bad = mask(False, False, False, True, True)
    out = effect("fang", b=1e39).tamper(updates, bad, torch.Generator().manual_seed(0))[bad]
    half = torch.finfo(torch.float32).max / 2
    assert torch.isfinite(out).all()
    assert (out[:, 0] >= -half).all() and (out[:, 0] <= -1.0).all()  # mean > 0: at or below the honest minimum -1
    assert (out[:, 1] <= half).all() and (out[:, 1] >= 1.0).all()  # mean < 0: at or above the honest maximum 1


def test_fangs_saturation_leaves_ends_within_half_the_largest_float_as_they_are():
    # float32's largest is 3.4e38: an honest minimum of -1.5e38 with b = 1.1 gives the interval [-1.65e38, -1.5e38],
    # inside +-1.7e38, which the draw must keep (mean (1.6e38 - 1.5e38) / 2 > 0: below the honest minimum)
    honest = torch.tensor([[1.6e38], [-1.5e38]], dtype=torch.float32)
    updates = torch.cat([honest, torch.zeros(2, 1)])
    bad = mask(False, False, True, True)
    out = effect("fang", b=1.1).tamper(updates, bad, torch.Generator().manual_seed(0))[bad]
    assert (out <= -1.5e38).all() and (out >= -1.65e38 * (1 + 1e-6)).all()
