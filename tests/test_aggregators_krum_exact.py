"""Krum's, multi-Krum's and Bulyan's edges, exactly (the mutation score of ``methods/aggregators/krum.py``:
docs/testing.md): the checks' defaults, edges (k = n - f - 2 >= 1, f < n, 1 <= m <= n, n >= 4f + 3) and wording;
ties to the lowest index where the scores tie exactly; the [1] row Krum selects; multi-Krum's registry entry
(it reads the round, its m = n - f for a null m) and its draw-order ties in reference mode; Bulyan's n - 2f rows
chosen by iterated Krum, by hand on small integers, and its mean of the values closest to the median; the ties
that make numbers reproducible across CPUs (issue 69): exact, symmetric distances, scores quantised to 32 bits,
ties of equal distance to Bulyan's median to the lower row; Bulyan's distances to the median in float64 (float32
merges ones that differ) and its mean summed over the kept values (huge or infinite dropped ones leave them)."""

import inspect

import pytest
import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators import AGGREGATORS, make_aggregator
from fedarena.methods.aggregators.base import RoundDraw
from fedarena.methods.aggregators.krum import (
    bulyan,
    bulyan_selection,
    check_bulyan,
    check_krum,
    check_multi_krum,
    closest_to_median_mean,
    iterated_krum,
    krum,
    krum_scores,
    krum_selection,
    multi_krum_selection,
    quantised,
    sq_distances,
)
from fedarena.params import TrialFacts

F64 = torch.float64
# seven updates (squared distances by hand): h1 (1, 1) has Krum score .25 at f = 2 (k = 3), h3 .32, the others
# .59; the two outliers are > 60 away from everything
HONEST_AND_OUTLIERS = [(1.0, 1.0), (1.3, 0.9), (0.9, 1.1), (1.1, 1.4), (0.8, 0.7), (9.0, 7.0), (-6.0, 12.0)]
# seventeen equal updates: every Krum score is exactly 0, so every row ties (17 rows: enough that an unstable
# sort on the CPU no longer keeps the index order)
TIED = torch.zeros(17, 2, dtype=F64)
# Bulyan, f = 1, on the line: 0, 1, 3, 6, 10, 15, 100 (small integers: every squared distance exact)
LINE = torch.tensor([[0.0], [1.0], [3.0], [6.0], [10.0], [15.0], [100.0]], dtype=F64)

NO_NEIGHBOUR = ("krum scores the n - f - 2 nearest neighbours and needs n - f - 2 >= 1, got n={n}, f={f} (its "
                "robustness guarantee further assumes 2f + 2 < n); reference_mode=true scores k = 0 neighbours "
                "there, as Ditto's reference code")


def rows(values):
    return torch.tensor(values, dtype=F64)


def test_the_defaults_are_plain_krum_not_reference_mode():
    for fn in (check_krum, krum_selection, check_multi_krum, multi_krum_selection, krum):
        assert inspect.signature(fn).parameters["reference_mode"].default is False


def test_n_minus_f_minus_2_below_one_is_refused_in_words_unless_reference_mode():
    for n, f in ((5, 3), (3, 1), (4, 2)):
        with pytest.raises(ConfigError) as err:
            check_krum(n, f)
        assert str(err.value) == NO_NEIGHBOUR.format(n=n, f=f)
        check_krum(n, f, reference_mode=True)
    with pytest.raises(ConfigError) as err:
        check_multi_krum(4, 2)
    assert str(err.value) == NO_NEIGHBOUR.format(n=4, f=2)
    check_multi_krum(4, 2, reference_mode=True)


def test_one_scored_neighbour_is_enough():
    # n - f - 2 = 1 at n = 4, f = 1, and at n = 3, f = 0
    check_krum(4, 1)
    check_krum(3, 0)
    check_multi_krum(4, 1)
    # on the line 0, 4, 5, 20 with k = 1 (an update is no neighbour of itself): scores 16, 1, 1, 225; 4 and 5 tie,
    # the lower index wins
    line = rows([[0.0], [4.0], [5.0], [20.0]])
    assert krum_selection(line, f=1).tolist() == [1]
    assert make_aggregator({"name": "krum"}, f=1)(line, torch.ones(4)).tolist() == [4.0]


def test_f_must_be_below_n_even_in_reference_mode_and_is_refused_in_words():
    for n, f, ref in ((3, 3, False), (3, 3, True), (1, 1, True), (2, 5, True)):
        with pytest.raises(ConfigError) as err:
            check_krum(n, f, reference_mode=ref)
        assert str(err.value) == f"krum needs f < n, got n={n}, f={f}"
    check_krum(3, 2, reference_mode=True)  # f = n - 1: the largest f reference mode takes


def test_krum_selects_exactly_one_row_as_a_one_element_index():
    sel = krum_selection(rows(HONEST_AND_OUTLIERS), f=2)
    assert sel.shape == (1,) and sel.tolist() == [0]
    assert krum_selection(rows(HONEST_AND_OUTLIERS), f=2, reference_mode=True).tolist() == [0]


def test_the_selections_refuse_an_undefined_krum_without_reference_mode():
    for select in (krum_selection, multi_krum_selection):
        with pytest.raises(ConfigError) as err:
            select(torch.zeros(4, 2, dtype=F64), f=2)
        assert str(err.value) == NO_NEIGHBOUR.format(n=4, f=2)


def test_exact_ties_go_to_the_lowest_index():
    assert krum_selection(TIED, f=2).tolist() == [0]
    assert multi_krum_selection(TIED, f=2, m=4).tolist() == [0, 1, 2, 3]
    assert multi_krum_selection(TIED, f=2).tolist() == list(range(15))  # m = n - f


def test_m_must_be_a_whole_number_and_is_refused_in_words():
    for m in (True, False, 2.0, "2"):
        with pytest.raises(ConfigError) as err:
            check_multi_krum(7, 2, m=m)
        assert str(err.value) == f"multi_krum m must be a whole number of updates (or null for n - f), got {m!r}"
    for m in (None, 1, 5, 7):
        check_multi_krum(7, 2, m=m)


def test_m_out_of_range_is_refused_in_words():
    for m in (0, -1, 8):
        with pytest.raises(ConfigError) as err:
            check_multi_krum(7, 2, m=m)
        assert str(err.value) == f"multi_krum averages m updates and needs 1 <= m <= n = 7, got m={m}"


def test_multi_krum_registry_entry_reads_the_round_and_its_null_m_is_n_minus_f():
    entry = AGGREGATORS.get("multi_krum")
    assert entry.reads == ("round",)
    assert entry.selects is multi_krum_selection
    assert AGGREGATORS.get("krum").reads == ("round",)
    effective = AGGREGATORS.effective("multi_krum")
    assert set(effective) == {"m"}
    assert effective["m"](TrialFacts(n=7, f=2)) == 5
    assert effective["m"](TrialFacts(n=10, f=0)) == 10
    assert effective["m"](TrialFacts(n=7, f=None)) is None


def test_reference_mode_ties_follow_the_rounds_draw_order():
    # f = 8 of n = 10: k = 0, every score 0; drawn in reverse, the first m = 2 drawn are rows 9 and 8
    updates = rows([[float(i), 1.0] for i in range(10)])
    draw = RoundDraw(torch.arange(9, -1, -1))
    multi = make_aggregator({"name": "multi_krum", "reference_mode": True}, f=8).for_round(draw)
    assert multi(updates, torch.ones(10)).tolist() == [8.5, 1.0]
    one = make_aggregator({"name": "krum", "reference_mode": True}, f=8).for_round(draw)
    assert one(updates, torch.ones(10)).tolist() == [9.0, 1.0]
    assert multi_krum_selection(updates, f=8, reference_mode=True, round=draw).tolist() == [9, 8]


def test_bulyan_needs_4f_plus_3_and_is_refused_in_words():
    for n, f in ((6, 1), (10, 2), (2, 0)):
        with pytest.raises(ConfigError) as err:
            check_bulyan(n, f)
        assert str(err.value) == f"bulyan needs n >= 4f + 3, got n={n}, f={f} (needs n >= {4 * f + 3})"
    check_bulyan(7, 1)
    check_bulyan(3, 0)


def test_bulyan_chooses_n_minus_2f_rows_by_iterated_krum():
    # f = 1 on the line 0, 1, 3, 6, 10, 15, 100, by hand:
    # 7 left, k = 4: 0 -> 146, 1 -> 111, 3 -> 71, 6 -> 86, 10 -> 171, 15 -> 446: row 2 (3)
    # 6 left, k = 3: 0 -> 137, 1 -> 107, 6 -> 77, 10 -> 122, 15 -> 302: row 3 (6)
    # 5 left, k = 2: 0 -> 101, 1 -> 82, 10 -> 106, 15 -> 221: row 1 (1)
    # 4 left, k = max(1, 1): 0 -> 100, 10 -> 25, 15 -> 25: the tie to the lower index, row 4 (10)
    # 3 left, k = max(0, 1) = 1: 0 -> 225, 15 -> 225, 100 -> 7225: the tie to row 0
    assert bulyan_selection(LINE, f=1).tolist() == [2, 3, 1, 4, 0]
    assert bulyan_selection(LINE, f=0).shape == (7,)


def test_bulyan_averages_the_beta_values_closest_to_the_median():
    # f = 1 on the line -0.5, 2, 3, 6, 10, 15, 100 (squared distances exact in binary), by hand:
    # 7 left, k = 4: -0.5 -> 171, 2 -> 87.25, 3 -> 71.25, 6 -> 83.25, 10 -> 154, 15 -> 419: row 2 (3)
    # 6 left, k = 3: -0.5 -> 158.75, 2 -> 86.25, 6 -> 74.25, 10 -> 105, 15 -> 275: row 3 (6)
    # 5 left, k = 2: -0.5 -> 116.5, 2 -> 70.25, 10 -> 89, 15 -> 194: row 1 (2)
    # 4 left, k = 1: -0.5 -> 110.25, 10 -> 25, 15 -> 25: row 4 (10); 3 left, k = 1: -0.5 and 15 tie: row 0
    # theta = 5 chosen: 3, 6, 2, 10, -0.5; median 3, |x - 3| = 0, 3, 1, 7, 3.5; beta = 3 kept: 3, 6, 2 -> 11 / 3
    line = rows([[-0.5], [2.0], [3.0], [6.0], [10.0], [15.0], [100.0]])
    assert bulyan_selection(line, f=1).tolist() == [2, 3, 1, 4, 0]
    out = bulyan(line, weights=torch.ones(7), losses=None, f=1)
    assert torch.allclose(out, rows([11.0 / 3.0]), rtol=0, atol=1e-12)


def test_closest_to_median_mean_drops_the_farthest_values():
    block = rows([[0.0, 1.0, 10.0], [4.0, -2.0, 3.0]])
    # keep 2: row 0 median 1, drop 10 -> 0.5; row 1 median 3, drop -2 -> 3.5
    assert closest_to_median_mean(block, 2).tolist() == [0.5, 3.5]
    # keep 1: only the median
    assert closest_to_median_mean(block, 1).tolist() == [1.0, 3.0]
    # keep all: the mean
    assert torch.allclose(closest_to_median_mean(block, 3), rows([11.0 / 3.0, 5.0 / 3.0]), rtol=0, atol=1e-15)


def test_iterated_krum_scores_at_least_one_neighbour():
    # f = 1 of 3 left: r - f - 2 = 0, floored to 1 neighbour. On the line 0, 10, 11: scores 100, 1, 1: the closest
    # pair's lower index, row 1 (not row 0, as 0 neighbours, every score 0, would give); then 0 and 11 tie (121)
    line = rows([[0.0], [10.0], [11.0]])
    assert iterated_krum(sq_distances(line), 1, 3).tolist() == [1, 0, 2]
    assert iterated_krum(sq_distances(line), 1, 1).tolist() == [1]


# --- ties reproducible across CPUs (issue 69) ---------------------------------------------------------------------


def test_distances_are_exact_symmetric_float64_sums_of_squared_differences():
    # Prepare: float32 updates with a large common part (where |a|^2 + |b|^2 - 2ab cancels), rows 3 and 7 equal
    gen = torch.Generator().manual_seed(0)
    x = 100.0 + torch.randn(9, 3000, generator=gen)
    x[7] = x[3]
    wide = x.double()
    direct = ((wide[:, None, :] - wide[None, :, :]) ** 2).sum(dim=-1)
    # Execute
    dist = sq_distances(x)
    # Assert: float64, the same numbers both ways round, zero between equal rows, as a float64 direct sum
    assert dist.dtype == F64 and torch.equal(dist, dist.T)
    assert dist[3, 7] == 0 and dist.diagonal().eq(0).all()
    assert torch.allclose(dist, direct, rtol=1e-13, atol=0)


def test_scores_keep_32_significant_bits():
    one = rows([1.0])
    assert quantised(one + 2.0**-34) == 1.0 and quantised(one + 2.0**-31) == 1.0 + 2.0**-31
    assert quantised(rows([0.0, float("inf"), 3.0])).tolist() == [0.0, float("inf"), 3.0]


def test_scores_within_the_quantum_tie_to_the_lowest_index():
    # Prepare: the line 0, 1 + e, 10, 11 with f = 1 (k = 1): scores (1 + e)^2, (1 + e)^2, 1, 1
    def line(e):
        return rows([[0.0], [1.0 + e], [10.0], [11.0]])
    # Assert: e = 2^-40 is below the 2^-32 quantum: all four tie, row 0 (unquantised: row 2); e = 2^-20 is not
    assert krum_selection(line(2.0**-40), f=1).tolist() == [0]
    assert multi_krum_selection(line(2.0**-40), f=1, m=4).tolist() == [0, 1, 2, 3]
    assert krum_selection(line(2.0**-20), f=1).tolist() == [2]
    assert multi_krum_selection(line(2.0**-20), f=1, m=4).tolist() == [2, 3, 0, 1]


def test_equal_updates_score_exactly_equal():
    # Prepare: float32 updates, rows 1, 4, 6 and 8 one update (the copies of an attack)
    gen = torch.Generator().manual_seed(1)
    x = 0.3 + 0.01 * torch.randn(10, 5000, generator=gen)
    x[[1, 4, 6, 8]] = torch.linspace(0.25, 0.35, 5000)
    # Execute
    scores = krum_scores(sq_distances(x), 5)
    # Assert: bitwise equal scores (the Gram-based distances set them a float32 rounding apart), ranked by index
    assert scores[[1, 4, 6, 8]].unique().numel() == 1
    order = multi_krum_selection(x, f=1, m=10).tolist()
    assert [row for row in order if row in (1, 4, 6, 8)] == [1, 4, 6, 8]


def test_values_equally_far_from_the_median_keep_the_earlier_column():
    # Prepare: median 2, the farthest two (0 and 4) equally far; one of them dropped
    block = rows([[0.0, 1.0, 2.0, 3.0, 4.0], [4.0, 3.0, 2.0, 1.0, 0.0]])
    # Assert: the later column dropped: mean(0, 1, 2, 3) and mean(4, 3, 2, 1)
    assert closest_to_median_mean(block, 4).tolist() == [1.5, 2.5]


def test_bulyans_median_ties_go_to_the_lower_row_not_the_earlier_chosen():
    # Prepare: f = 1 on -3, 2, -8, 11, 8, -6, -4 (rows 0-6), by hand:
    # 7 left, k = 4: -4 -> 57, -3 -> 60, -6 -> 81, ...: row 6; 6 left, k = 3: -3 -> 59, -6 -> 77, ...: row 0
    # 5 left, k = 2: 8 -> 45, -6 -> 68, 11 -> 90, ...: row 4; 4 left, k = 1: -8 and -6 tie at 4: row 2
    # 3 left, k = 1: 2 and -6 tie at 64: row 1
    line = rows([[-3.0], [2.0], [-8.0], [11.0], [8.0], [-6.0], [-4.0]])
    assert bulyan_selection(line, f=1).tolist() == [6, 0, 4, 2, 1]
    # theta = 5 chosen: -4, -3, 8, -8, 2; median -3, |x + 3| = 1, 0, 11, 5, 5; beta = 3 kept: -3, -4 and of 2 (row 1)
    # and -8 (row 2, chosen before row 1) the lower row: (-3 - 4 + 2) / 3
    out = bulyan(line, weights=torch.ones(7), losses=None, f=1)
    assert torch.allclose(out, rows([-5.0 / 3.0]), rtol=0, atol=1e-12)


def test_distances_to_bulyans_median_tell_apart_what_float32_rounds_equal():
    # Prepare: float32 values, median (0 + 2^-29) / 2 = 2^-30: -1 is 1 + 2^-30 away, +1 is 1 - 2^-30 (both 1.0 in
    # float32, where the tie went to -1, the earlier column)
    column = torch.tensor([[-1.0, -0.5, 0.0, 2.0**-29, 1.0, 5.0]])
    # Execute / Assert: the four closest are -0.5, 0, 2^-29 and +1, as exact arithmetic keeps them (not -0.375)
    assert closest_to_median_mean(column, 4).tolist() == [0.125]
    # end to end: n = 8, f = 1 (theta 6, beta 4), the column's six rows chosen, two far rows not
    updates = torch.zeros(8, 2)
    updates[:6, 0] = column[0]
    updates[6:, 1] = torch.tensor([-1e6, 1e6])
    assert sorted(bulyan_selection(updates, f=1).tolist()) == [0, 1, 2, 3, 4, 5]
    assert bulyan(updates, weights=torch.ones(8), losses=None, f=1)[0] == 0.125


def test_bulyans_mean_keeps_small_values_beside_huge_dropped_ones():
    # Prepare: median 0.3; the three closest 0.3, 0.1, 0.7; dropped -0.2, -0.4 and two outliers 2^66 times larger
    # (a float64 total less the dropped values gave 0.0) or infinite (it gave NaN)
    small = [0.3, -0.2, 0.1, 0.7, -0.4]
    block = torch.tensor([small + [1e20, 7e19], small + [float("inf"), 1e20]])
    kept = torch.tensor([0.3, 0.1, 0.7]).double().sum() / 3
    # Execute / Assert: the mean of the kept values in both rows
    assert closest_to_median_mean(block, 3).tolist() == [kept.float().item()] * 2


def test_a_nan_among_bulyans_values_gives_nan_as_the_median_does():
    block = torch.tensor([[0.0, 1.0, 2.0, 3.0, float("nan")], [0.0, 1.0, 2.0, 3.0, 4.0]])
    out = closest_to_median_mean(block, 3)
    assert out[0].isnan() and out[1] == 2.0
