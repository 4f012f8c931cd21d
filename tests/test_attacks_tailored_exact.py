"""fedarena/attacks/tailored.py checked against hand computations and float64 NumPy transcriptions, one behaviour
per test: the masks of Krum's pick, multi-Krum's set, Bulyan's iterated Krum and the notebooks' multi_krum (every
k, every edge where a count reaches 1, ties kept in row order), what 'holds the malicious updates' means, the
coordinate-wise median and trimmed mean and their merge into the sorted honest rows, both deviation searches on
scripted deviations, the gamma each attack sends (recomputed with the halving search written out), every default,
range edge and refusal word for word, and the registry entries (make mutants MODULE=fedarena/attacks/tailored.py)."""

from functools import partial

import numpy as np
import pytest
import torch

from fedarena.attacks.base import ATTACKS, RoundRule, attack_reads
from fedarena.attacks.tailored import (
    as_mask,
    best_deviation_gamma,
    bulyan_chosen,
    holds_malicious,
    krum_chosen,
    merged_rows,
    multi_krum_chosen,
    notebook_deviation_gamma,
    notebook_multi_krum_chosen,
    selection_updates,
    spread,
    spread_of,
    spread_updates,
    tailored_bulyan,
    tailored_krum,
    tailored_median,
)
from fedarena.datasets.base import ClientData, FederatedDataset, Split
from fedarena.errors import ConfigError
from fedarena.methods.aggregators import RoundDraw, make_aggregator


def build(name, dataset="tiny", **params):
    """The attack's effect on a two-client dataset called ``dataset`` (its defaults depend on the name alone)."""
    client = ClientData(*(Split(torch.zeros(2, 1), torch.tensor([0, 1])) for _ in range(3)))
    ds = FederatedDataset(dataset, [client, client], 2, (1,), "fp", "classification")
    return ATTACKS.get(name)(ds, np.array([False, True]), np.random.default_rng(0), **params)


def mask(n, rows):
    out = [False] * n
    for row in rows:
        out[row] = True
    return out


# ---- float64 NumPy transcriptions -------------------------------------------------------------------------

def sq_distances(x):
    """Squared distances as sums of squared differences (the module's are too, exactly symmetric: the ties of one
    scored neighbour, the closest pair, are ties here as there)."""
    x = np.asarray(x, dtype=np.float64)
    return ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)


def scores_of(sq, rows, k):
    """Per row of ``rows``: the sum of its k smallest squared distances to the other rows of ``rows``."""
    return np.array([np.sort([sq[i, j] for j in rows if j != i])[:k].sum() for i in rows])


def ref_krum(x, f):
    n = len(x)
    return [int(np.argmin(scores_of(sq_distances(x), range(n), max(n - f - 2, 1))))]


def ref_multi_krum(x, f):
    n = len(x)
    scores = scores_of(sq_distances(x), range(n), max(n - f - 2, 1))
    return [int(i) for i in np.argsort(scores, kind="stable")[: max(n - f, 1)]]


def ref_bulyan(x, f):
    """Iterated Krum: n - 2f picks (at least 1), each Krum on the rows left with max(r - f - 2, 1) neighbours."""
    n, sq = len(x), sq_distances(x)
    left, picked = list(range(n)), []
    for _ in range(max(n - 2 * f, 1)):
        best = left[0] if len(left) == 1 else left[int(np.argmin(scores_of(sq, left, max(len(left) - f - 2, 1))))]
        picked.append(best)
        left.remove(best)
    return picked


def ref_notebook(x, f, multi=True):
    """The notebooks' multi_krum: r - 2 - f smallest distances, the own 0 included, while r > 2f + 2."""
    sq = sq_distances(x)
    left, picked = list(range(len(x))), []
    while len(left) > 2 * f + 2:
        scores = [np.sort(sq[i, left])[: len(left) - 2 - f].sum() for i in left]
        picked.append(left.pop(int(np.argmin(scores))))
        if not multi:
            break
    return picked


def ref_holds(kept, bad):
    kept, bad = np.asarray(kept, dtype=bool), np.asarray(bad, dtype=bool)
    if kept.sum() == 0:
        return False
    if kept.sum() == 1:
        return bool((kept & bad).any())
    return bool(kept[bad].all() or not (kept & ~bad).any())


def halving(fits, gamma_init, tol):
    """Algorithm 1's search as the notebooks run it, written out."""
    gamma, step, found = gamma_init, gamma_init, 0.0
    while abs(found - gamma) > tol:
        if fits(gamma):
            found, gamma = gamma, gamma + step / 2
        else:
            gamma = gamma - step / 2
        step = step / 2
    return found


def ref_median(x):
    return np.median(np.asarray(x, dtype=np.float64), axis=0)


def ref_trimmed(x, t):
    x = np.sort(np.asarray(x, dtype=np.float64), axis=0)
    return ref_median(x) if 2 * t >= len(x) else x[t: len(x) - t].mean(0)


def honest_round(seed, n_honest, copies, d=3):
    """Honest rows of an asymmetric Gaussian cluster (seeded), followed by the attackers' (their own rows unread)."""
    gen = np.random.default_rng(seed)
    honest = gen.normal(size=(n_honest, d)) * np.array([0.4, 1.0, 0.7])[:d] + np.array([1.0, -2.0, 0.5])[:d]
    updates = np.vstack([honest, gen.normal(size=(copies, d))])
    return torch.tensor(updates), torch.tensor([False] * n_honest + [True] * copies)


def unit_push(honest):
    mean = honest.mean(0)
    return mean, -mean / np.linalg.norm(mean)


def server(section, f, n):
    """The round's rule as the engine hands it to an attack."""
    return RoundRule(make_aggregator(section, f=f).for_round(RoundDraw.rows_in_order(n)), torch.ones(n))


# ---- the selections' masks ---------------------------------------------------------------------------------

def test_a_mask_marks_the_given_rows():
    assert as_mask(5, torch.tensor([3, 0])).tolist() == [True, False, False, True, False]
    assert as_mask(3, torch.tensor([], dtype=torch.long)).tolist() == [False] * 3
    assert as_mask(2, torch.tensor([1])).dtype == torch.bool


def test_krum_scores_n_minus_f_minus_2_neighbours():
    # Prepare: 1-D points 0, 1, 2, 10, 11 (d = 1 < n), f = 1: k = 2; squared neighbour sums 5, 2, 5, 65, 82
    x = torch.tensor([[0.0], [1.0], [2.0], [10.0], [11.0]], dtype=torch.float64)
    # Assert: Krum picks the point 1 (with k = 1 every score is 1: the pick would be row 0; with k = 4, row 2)
    assert krum_chosen(x, 1).tolist() == mask(5, [1])
    # f = 2: k = 1, every nearest neighbour at squared distance 1: the tie goes to the lowest index
    assert krum_chosen(x, 2).tolist() == mask(5, [0])


def test_krum_with_one_scored_neighbour_and_at_least_one():
    # Prepare: points 0, 1, 3, 4.5, 10 with f = 2: k = n - f - 2 = 1: nearest squared distances 1, 1, 2.25, 2.25, 30.25
    x = torch.tensor([[0.0], [1.0], [3.0], [4.5], [10.0]], dtype=torch.float64)
    # Assert: row 0 (with k = 2 the scores 10, 5, 6.25, 14.5, 58.25 would pick row 1)
    assert krum_chosen(x, 2).tolist() == mask(5, [0])
    # n - f - 2 = 0 and below still score one neighbour
    assert krum_chosen(x, 3).tolist() == mask(5, [0])
    assert krum_chosen(x[[0, 2, 4]], 1).tolist() == mask(3, [0])


def test_multi_krum_keeps_the_n_minus_f_lowest_scores():
    # Prepare: 0, 1, 2, 10, 11 with f = 1: scores 5, 2, 5, 65, 82; f = 2: k = 1, scores 1, 1, 1, 1, 1
    x = torch.tensor([[0.0], [1.0], [2.0], [10.0], [11.0]], dtype=torch.float64)
    assert multi_krum_chosen(x, 1).tolist() == mask(5, [0, 1, 2, 3])
    assert multi_krum_chosen(x, 2).tolist() == mask(5, [0, 1, 2])
    # n - f = 1 keeps one row (k = 1: scores 1, 1, 16: row 0); n - f below 1 keeps one as well
    assert multi_krum_chosen(x[[0, 1, 3]], 2).tolist() == mask(3, [0])
    assert multi_krum_chosen(x[[0, 1, 3]], 3).tolist() == mask(3, [0])


def test_multi_krums_ties_keep_the_lower_rows_at_twenty_rows():
    # Prepare: 20 equal rows: every score 0 (from 17 rows torch's unstable sort reorders ties)
    x = torch.ones(20, 3, dtype=torch.float64)
    # Assert: the n - f = 15 first rows
    assert multi_krum_chosen(x, 5).tolist() == mask(20, range(15))


def test_bulyan_picks_n_minus_2f_by_iterated_krum():
    # Prepare: 0, 1, 2, 10, 11, 30 (n = 6), f = 1: 4 picks; first Krum k = 3: scores 1+4+100, 1+1+81, 4+1+64,
    # 64+81+1, 81+100+1, ... -> row 2 (69); then on 0, 1, 10, 11, 30 (k = 2): 1+100, 1+81, 1+81, 1+100, ... -> row 1;
    # then on 0, 10, 11, 30 (k = 1): 100, 1, 1, 361 -> row 3; then on 0, 11, 30 (k = 1): 121, 121, 361 -> row 0
    x = torch.tensor([[0.0], [1.0], [2.0], [10.0], [11.0], [30.0]], dtype=torch.float64)
    assert bulyan_chosen(x, 1).tolist() == mask(6, [2, 1, 3, 0])
    assert ref_bulyan(x.numpy(), 1) == [2, 1, 3, 0]
    # f = 0 keeps all; n - 2f = 1 keeps one (Krum on three with k = 1: row 0); below 1 keeps one as well
    assert bulyan_chosen(x, 0).tolist() == [True] * 6
    assert bulyan_chosen(x[[0, 1, 3]], 1).tolist() == mask(3, [0])
    assert bulyan_chosen(x[[0, 1, 3]], 2).tolist() == mask(3, [0])


def test_the_simulated_selections_tie_scores_within_the_quantum_to_the_first_row():
    # Prepare: 0, 1 + 2^-40, 10, 11: nearest squared distances (1 + 2^-40)^2, twice, and 1, twice; equal in 32 bits
    x = torch.tensor([[0.0], [1.0 + 2.0**-40], [10.0], [11.0]], dtype=torch.float64)
    # Assert: every simulated pick starts from row 0 (unquantised: row 2)
    assert krum_chosen(x, 1).tolist() == mask(4, [0])
    assert multi_krum_chosen(x, 2).tolist() == mask(4, [0, 1])
    assert notebook_multi_krum_chosen(x, 0, multi=False).tolist() == mask(4, [0])


def test_the_notebooks_multi_krum_picks_while_more_than_2f_plus_2_remain():
    # Prepare: 0, 1, 2, 10, 11, 30, 31 (n = 7), f = 1: picks while r > 4, so 3 picks; each scores the r - 3
    # smallest squared distances, its own 0 included: r = 7, 4 values: 0+1+4+100, 0+1+1+81, 0+1+4+64, 0+1+64+81,
    # ... -> row 2 (69); r = 6 (0, 1, 10, 11, 30, 31), 3 values: 101, 82, 82, 101, 362, 362 -> row 1 (the first of
    # the tie); r = 5 (0, 10, 11, 30, 31), 2 values: 100, 1, 1, 1, 1 -> row 3 (the first of the tie)
    x = torch.tensor([[0.0], [1.0], [2.0], [10.0], [11.0], [30.0], [31.0]], dtype=torch.float64)
    assert notebook_multi_krum_chosen(x, 1).tolist() == mask(7, [2, 1, 3])
    assert ref_notebook(x.numpy(), 1) == [2, 1, 3]
    # multi false: the first pick alone
    assert notebook_multi_krum_chosen(x, 1, multi=False).tolist() == mask(7, [2])
    # f = 2: picks while r > 6: one pick; n = 2f + 2 picks nothing
    assert notebook_multi_krum_chosen(x, 2).tolist() == mask(7, [ref_notebook(x.numpy(), 2)[0]])
    assert notebook_multi_krum_chosen(x[:6], 2).tolist() == [False] * 6


@pytest.mark.parametrize("seed", range(12))
def test_the_selections_agree_with_their_transcriptions(seed):
    # Prepare: rounds of 4-13 rows in 1-5 dimensions (d differs from n), every f with something to pick
    gen = np.random.default_rng(100 + seed)
    n, d = int(gen.integers(4, 14)), int(gen.integers(1, 6))
    x = gen.normal(size=(n, d)) * gen.uniform(0.2, 3.0, size=d)
    xt = torch.tensor(x)
    for f in range(0, n - 1):
        # Assert
        assert krum_chosen(xt, f).tolist() == mask(n, ref_krum(x, f)), f
        assert multi_krum_chosen(xt, f).tolist() == mask(n, ref_multi_krum(x, f)), f
        assert bulyan_chosen(xt, f).tolist() == mask(n, ref_bulyan(x, f)), f
        for multi in (True, False):
            assert notebook_multi_krum_chosen(xt, f, multi=multi).tolist() == mask(n, ref_notebook(x, f, multi)), f


def test_a_selection_holds_the_malicious_rows_as_defined():
    bad = torch.tensor([True, True, False, False, False])
    cases = [
        ([False] * 5, False),  # nothing kept
        ([True, False, False, False, False], True),  # a single pick: malicious
        ([False, False, True, False, False], False),  # a single pick: honest
        ([True, True, False, False, False], True),  # every malicious row, nothing else
        ([True, True, True, True, False], True),  # every malicious row among others
        ([True, False, True, True, True], False),  # one malicious row missing, honest ones kept
        ([False, False, True, True, False], False),  # honest rows alone
    ]
    for kept, expected in cases:
        assert holds_malicious(torch.tensor(kept), bad) is expected, kept
        assert ref_holds(kept, bad) is expected
    # fewer places than copies: only malicious rows kept holds them; one honest row among them does not
    bad = torch.tensor([True, True, True, False, False])
    assert holds_malicious(torch.tensor([True, False, True, False, False]), bad) is True
    assert holds_malicious(torch.tensor([True, False, False, True, False]), bad) is False


# ---- the spread rules --------------------------------------------------------------------------------------

def test_spread_is_the_median_or_the_trimmed_mean_by_hand():
    # Prepare: 9 values per column: 0..8 and their squares (shuffled rows)
    col = torch.tensor([5.0, 0.0, 8.0, 2.0, 7.0, 1.0, 4.0, 6.0, 3.0], dtype=torch.float64)
    x = torch.stack([col, col ** 2], dim=1)
    # Assert: median 4, 16; trimming 3 from each end leaves 3, 4, 5 and 9, 16, 25
    assert spread("median", x, 0).tolist() == [4.0, 16.0]
    assert spread("median", x, 3).tolist() == [4.0, 16.0]
    assert spread("trimmed_mean", x, 3).tolist() == [4.0, 50 / 3]
    assert spread("trimmed_mean", x, 1).tolist() == [4.0, (1 + 4 + 9 + 16 + 25 + 36 + 49) / 7]
    assert spread("trimmed_mean", x, 0).tolist() == [4.0, 204 / 9]
    # 2t >= n: the median (t = 4 trims to 4 alone; t = 5 would trim everything)
    assert spread("trimmed_mean", x, 4).tolist() == [4.0, 16.0]
    assert spread("trimmed_mean", x, 5).tolist() == [4.0, 16.0]
    # 4 rows, t = 2 (2t = n): the median 1.5 of 0, 1, 2, 3
    assert spread("trimmed_mean", x[[1, 5, 3, 8]], 2).tolist() == [1.5, 2.5]
    assert spread("trimmed_mean", x[[1, 5, 3, 8]], 1).tolist() == [1.5, 2.5]
    assert spread("median", x[[1, 5, 3, 8]], 0).tolist() == [1.5, 2.5]


@pytest.mark.parametrize("copies", [1, 2, 3])
def test_merging_m_gives_every_position_of_the_sorted_round(copies):
    # Prepare: 4 honest values per column (one tie), m below all, between, equal to one, above all
    ordered = torch.tensor([[1.0, -2.0, 0.5, 3.0], [2.0, 0.0, 0.5, 4.0], [4.0, 1.0, 2.0, 5.0], [6.0, 7.0, 9.0, 8.0]],
                           dtype=torch.float64)
    m = torch.tensor([-1.0, 0.5, 2.0, 9.5], dtype=torch.float64)
    n = 4 + copies
    expected = np.sort(np.vstack([ordered.numpy(), np.repeat(m.numpy()[None], copies, 0)]), axis=0)
    # Execute / Assert: every position, then a middle range alone
    assert merged_rows(ordered, m, copies, range(n)).tolist() == expected.tolist()
    assert merged_rows(ordered, m, copies, range(1, 3)).tolist() == expected[1:3].tolist()


def test_merging_into_one_column_of_many_honest_rows():
    # Prepare: d = 1, 5 honest values, m above them all (copies 1): positions 0..4 are the honest ones
    ordered = torch.tensor([[1.0], [2.0], [3.0], [4.0], [5.0]], dtype=torch.float64)
    assert merged_rows(ordered, torch.tensor([6.0], dtype=torch.float64), 1, range(6)).flatten().tolist() == [
        1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert merged_rows(ordered, torch.tensor([0.0], dtype=torch.float64), 2, range(7)).flatten().tolist() == [
        0.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def spread_cases():
    """(rule, n, copies, t): odd and even n, t from 0 to past n / 2 (2t = n, 2t > n), one honest row to none."""
    for rule in ("median", "trimmed_mean"):
        for n, copies in [(2, 1), (3, 1), (4, 2), (5, 2), (6, 1), (7, 3), (9, 4), (10, 3), (3, 3)]:
            for t in range(0, n // 2 + 2):
                yield rule, n, copies, t


def test_the_merged_spread_is_the_rule_on_the_whole_round():
    gen = np.random.default_rng(7)
    for rule, n, copies, t in spread_cases():
        # Prepare: d = 4 columns of distinct values; the attackers' rows are their own updates (not read)
        x = gen.normal(size=(n, 4))
        bad = torch.tensor([False] * (n - copies) + [True] * copies)
        output = spread_of(rule, torch.tensor(x), bad, t)
        for m in (gen.normal(size=4), np.full(4, 50.0), np.full(4, -50.0), x[0]):
            # Execute
            got = output(torch.tensor(m))
            # Assert: the rule on the round with m in every attacker's row, in NumPy
            whole = np.vstack([x[: n - copies], np.repeat(m[None], copies, 0)])
            expected = ref_median(whole) if rule == "median" else ref_trimmed(whole, t)
            np.testing.assert_allclose(got.numpy(), expected, rtol=1e-14, atol=1e-14, err_msg=str((rule, n, t)))


def test_the_merged_spread_casts_m_and_reads_nan_through_the_whole_sort():
    # Prepare: float32 rows; m in float64
    x = torch.tensor([[1.0, 2.0], [3.0, -1.0], [0.0, 0.0]], dtype=torch.float32)
    bad = torch.tensor([False, False, True])
    out = spread_of("median", x, bad, 1)(torch.tensor([2.5, 7.0], dtype=torch.float64))
    assert out.dtype == torch.float32 and out.tolist() == [2.5, 2.0]
    # a NaN among the honest values or in m: NaN in that column, the other column as the whole round's
    nan_rows = torch.tensor([[float("nan"), 2.0], [3.0, -1.0], [0.0, 0.0]], dtype=torch.float64)
    out = spread_of("median", nan_rows, bad, 1)(torch.tensor([2.5, 7.0], dtype=torch.float64))
    assert np.isnan(out[0].item()) and out[1].item() == 2.0
    out = spread_of("trimmed_mean", x.double(), bad, 0)(torch.tensor([float("nan"), 7.0], dtype=torch.float64))
    assert np.isnan(out[0].item()) and out[1].item() == pytest.approx(8 / 3, rel=1e-15)


# ---- the deviation searches --------------------------------------------------------------------------------

def scripted(values):
    """A deviation that answers only the gammas it expects (any other probe fails the test) and records them."""
    probes = []

    def deviation(gamma):
        probes.append(gamma)
        if gamma not in values or len(probes) > 50:
            raise AssertionError(f"unexpected probe {gamma} after {probes[:-1]}")
        return values[gamma]

    return deviation, probes


def test_the_notebooks_search_compares_each_step_with_the_previous_one():
    # Prepare: from 1 with tol 1/32: 1 succeeds (0.5 > -1); 1.5 fails (0.5 is not > 0.5); 1.25 succeeds (0.7);
    # 1.375 fails (0.6); 1.3125 succeeds: 0.65 grew since the previous step, though below the best 0.7
    deviation, probes = scripted({1.0: 0.5, 1.5: 0.5, 1.25: 0.7, 1.375: 0.6, 1.3125: 0.65})
    # Execute
    gamma = notebook_deviation_gamma(deviation, 1.0, 1 / 32)
    # Assert: the search stops where |found - gamma| = 1/32 = tol
    assert probes == [1.0, 1.5, 1.25, 1.375, 1.3125]
    assert gamma == 1.3125


def test_the_notebooks_search_starts_from_a_previous_deviation_of_minus_one():
    # Prepare: a first deviation below -1 does not exceed it (the attack's deviations are norms: >= 0)
    deviation, probes = scripted({1.0: -1.5})
    assert notebook_deviation_gamma(deviation, 1.0, 0.5) == 0.0 and probes == [1.0]
    deviation, probes = scripted({1.0: -0.5, 1.5: -0.25})
    assert notebook_deviation_gamma(deviation, 1.0, 0.25) == 1.5 and probes == [1.0, 1.5]


def test_our_search_keeps_the_best_gamma_it_visited_ties_to_the_later():
    # Prepare: deviation(0) = 0.2 first; 1 succeeds (0.5); 1.5 ties the best (0.5): a success; 1.75 fails (0.4)
    deviation, probes = scripted({0.0: 0.2, 1.0: 0.5, 1.5: 0.5, 1.75: 0.4})
    # Execute
    gamma = best_deviation_gamma(deviation, 1.0, 0.125)
    # Assert
    assert probes == [0.0, 1.0, 1.5, 1.75]
    assert gamma == 1.5


def test_our_search_keeps_gamma_0_where_no_probe_reaches_its_deviation():
    # Prepare: deviation(0) = 1; 1 fails (0.5), so does 0.5 (0.9): the search ends at 0.25
    deviation, probes = scripted({0.0: 1.0, 1.0: 0.5, 0.5: 0.9})
    assert best_deviation_gamma(deviation, 1.0, 0.3) == 0.0
    assert probes == [0.0, 1.0, 0.5]


def test_our_search_moves_down_after_a_failure_and_up_after_a_success():
    # Prepare: the peak at 0.7: 2 fails (-1.3 < -0.7), 1 succeeds (-0.3), 1.5 fails (-0.8); the next, 1.25, is
    # within tol of 1
    deviation, probes = scripted({g: -abs(g - 0.7) for g in (0.0, 2.0, 1.0, 1.5)})
    assert best_deviation_gamma(deviation, 2.0, 0.25) == 1.0
    assert probes == [0.0, 2.0, 1.0, 1.5]


# ---- the gamma each attack sends ---------------------------------------------------------------------------

def expected_selection(updates, bad, selection, gamma_init=3.0, tol=1e-5):
    """m = mean + gamma p (unit direction) with gamma from the halving search on ``selection`` (a list of rows)."""
    x, badn = updates.numpy(), bad.numpy()
    mean, push = unit_push(x[~badn])

    def fits(gamma):
        trial = x.copy()
        trial[badn] = mean + gamma * push
        return ref_holds(mask(len(x), selection(trial)), badn)

    gamma = halving(fits, gamma_init, tol)
    return mean + gamma * push, gamma


def sent(name, updates, bad, round_rule, **params):
    return build(name, **params).tamper(updates, bad, torch.Generator(), rule=round_rule)


def check_sent(out, updates, bad, expected):
    assert torch.equal(out[~bad], updates[~bad])
    for row in out[bad]:
        np.testing.assert_allclose(row.numpy(), expected, rtol=0, atol=1e-12)


SIMULATED = [
    ("tailored_krum", {"target": "krum"}, ref_krum),
    ("tailored_krum", {"target": "multi_krum"}, ref_multi_krum),
    ("tailored_krum", {}, ref_multi_krum),
    ("tailored_bulyan", {}, ref_bulyan),
    ("tailored_krum", {"target": "krum", "mode": "reference"}, partial(ref_notebook, multi=False)),
    ("tailored_krum", {"mode": "reference"}, ref_notebook),
    ("tailored_bulyan", {"mode": "reference"}, ref_notebook),
]


@pytest.mark.parametrize("name,params,selection", SIMULATED,
                         ids=["krum", "multi_krum", "default", "bulyan", "krum_ref", "default_ref", "bulyan_ref"])
def test_against_the_mean_each_selection_attack_simulates_its_target_with_the_malicious_count(name, params, selection):
    # Prepare: the server takes the plain mean (no f): the attack simulates with f = the malicious rows (3)
    gammas = []
    for seed in range(4):
        updates, bad = honest_round(seed, 8, 3)
        expected, gamma = expected_selection(updates, bad, lambda x: selection(x, 3))
        # Execute
        out = sent(name, updates, bad, RoundRule(None), direction="unit", **params)
        # Assert
        check_sent(out, updates, bad, expected)
        gammas.append(gamma)
    assert max(gammas) > 0.01, gammas  # not vacuous


@pytest.mark.parametrize("section,name,params,selection", [
    ({"name": "krum"}, "tailored_krum", {"target": "krum"}, ref_krum),
    ({"name": "krum"}, "tailored_krum", {}, ref_krum),
    ({"name": "multi_krum"}, "tailored_krum", {}, ref_multi_krum),
    ({"name": "bulyan"}, "tailored_bulyan", {}, ref_bulyan),
], ids=["krum", "krum_default", "multi_krum", "bulyan"])
def test_against_its_target_each_selection_attack_checks_the_servers_rule_with_the_trials_f(section, name, params,
                                                                                              selection):
    # Prepare: 11 rows, 2 of them malicious; the trial's f is 2 (Bulyan's n >= 4f + 3 holds)
    for seed in range(3):
        updates, bad = honest_round(10 + seed, 9, 2)
        expected, _ = expected_selection(updates, bad, lambda x: selection(x, 2))
        # Execute
        out = sent(name, updates, bad, server(section, 2, 11), direction="unit", **params)
        # Assert
        check_sent(out, updates, bad, expected)


def test_the_servers_own_selection_is_read_with_its_hyperparameters():
    # Prepare: multi-Krum averaging m = 1 update (Krum's pick), f = 2: the attack on multi-Krum follows the
    # server's selection of one row, not the n - f rows of a simulated multi-Krum
    updates, bad = honest_round(3, 9, 2)
    expected, _ = expected_selection(updates, bad, lambda x: ref_krum(x, 2))
    simulated, _ = expected_selection(updates, bad, lambda x: ref_multi_krum(x, 2))
    assert np.abs(expected - simulated).max() > 1e-3
    # Execute
    out = sent("tailored_krum", updates, bad, server({"name": "multi_krum", "m": 1}, 2, 11), direction="unit")
    # Assert
    check_sent(out, updates, bad, expected)


def test_a_target_other_than_the_servers_selection_is_simulated():
    # Prepare: the server runs multi-Krum (f = 2); the attack targets Krum: it simulates Krum with f = 2
    updates, bad = honest_round(4, 9, 2)
    expected, _ = expected_selection(updates, bad, lambda x: ref_krum(x, 2))
    own, _ = expected_selection(updates, bad, lambda x: ref_multi_krum(x, 2))
    assert np.abs(expected - own).max() > 1e-3
    out = sent("tailored_krum", updates, bad, server({"name": "multi_krum"}, 2, 11), target="krum", direction="unit")
    check_sent(out, updates, bad, expected)
    # the median selects nothing: Krum simulated there too
    out = sent("tailored_krum", updates, bad, server({"name": "median"}, 2, 11), target="krum", direction="unit")
    check_sent(out, updates, bad, expected)


def test_selection_updates_directly_with_a_scripted_selection():
    # Prepare: 2 honest rows (mean (1, 1), unit push -(1, 1)/sqrt 2) and 1 attacker; a selection that keeps the
    # attacker while its first coordinate is >= 0: m_0 = 1 - gamma / sqrt 2 >= 0 up to gamma = sqrt 2
    updates = torch.tensor([[1.0, 0.0], [1.0, 2.0], [5.0, 5.0]], dtype=torch.float64)
    bad = torch.tensor([False, False, True])

    def simulate(x, f):
        assert f == 1  # the malicious rows' count (the plain mean has no f)
        return torch.tensor([False, False, bool(x[2, 0] >= 0)])

    out = selection_updates(updates, bad, torch.Generator(), rule=RoundRule(None), targets=("krum",),
                            simulate=simulate, direction="unit", knowledge="benign", gamma_init=1.0, tol=1e-9)
    gamma = halving(lambda g: 1 - g / np.sqrt(2) >= 0, 1.0, 1e-9)
    assert gamma == pytest.approx(np.sqrt(2), abs=1e-8)
    assert out[2].tolist() == pytest.approx([1 - gamma / np.sqrt(2)] * 2, abs=1e-12)
    assert out[:2].tolist() == updates[:2].tolist()


def expected_spread(updates, bad, rule, t, search, gamma_init=10.0, tol=1e-5):
    x, badn = updates.numpy(), bad.numpy()
    mean, push = unit_push(x[~badn])

    def deviation(gamma):
        trial = x.copy()
        trial[badn] = mean + gamma * push
        out = ref_median(trial) if rule == "median" else ref_trimmed(trial, t)
        return float(np.linalg.norm(out - mean))

    return mean + search(deviation, gamma_init, tol) * push


def ref_best(deviation, gamma_init, tol):
    best = [0.0, deviation(0.0)]

    def better(gamma):
        value = deviation(gamma)
        if value >= best[1]:
            best[:] = [gamma, value]
            return True
        return False

    halving(better, gamma_init, tol)
    return best[0]


def ref_notebook_search(deviation, gamma_init, tol):
    gamma, step, found, previous = gamma_init, gamma_init, 0.0, -1.0
    while abs(found - gamma) > tol:
        loss = deviation(gamma)
        if previous < loss:
            found, gamma = gamma, gamma + step / 2
        else:
            gamma = gamma - step / 2
        step, previous = step / 2, loss
    return found


@pytest.mark.parametrize("rule", ["median", "trimmed_mean"])
@pytest.mark.parametrize("mode,search", [("paper", ref_best), ("reference", ref_notebook_search)])
def test_against_the_mean_the_spread_attack_simulates_its_rule_with_the_malicious_count(rule, mode, search):
    for seed in range(3):
        # Prepare: 7 honest rows, 3 malicious: t = 3 (the plain mean has no f)
        updates, bad = honest_round(20 + seed, 7, 3)
        expected = expected_spread(updates, bad, rule, 3, search)
        # Execute
        out = sent("tailored_median", updates, bad, RoundRule(None), rule=rule, mode=mode, direction="unit",
                   gamma_init=10.0)
        # Assert
        check_sent(out, updates, bad, expected)


@pytest.mark.parametrize("rule", ["median", "trimmed_mean"])
def test_against_its_rule_the_spread_attack_reads_the_server(rule):
    # Prepare: the server's rule with the trial's f = 2 (3 malicious rows)
    for seed in range(2):
        updates, bad = honest_round(30 + seed, 7, 3)
        expected = expected_spread(updates, bad, rule, 2, ref_best)
        out = sent("tailored_median", updates, bad, server({"name": rule}, 2, 10), rule=rule, direction="unit")
        check_sent(out, updates, bad, expected)


def test_the_two_searches_differ_on_these_rounds():
    # the rounds above tell the searches apart (so a swapped search cannot pass them)
    differ = 0
    for seed in range(3):
        updates, bad = honest_round(20 + seed, 7, 3)
        for rule in ("median", "trimmed_mean"):
            paper = expected_spread(updates, bad, rule, 3, ref_best)
            reference = expected_spread(updates, bad, rule, 3, ref_notebook_search)
            differ += bool(np.abs(paper - reference).max() > 1e-4)
    assert differ >= 2


def test_spread_updates_directly_with_the_servers_rule_called():
    # Prepare: a server whose rule is named "median" but returns the second row: the attack reads the server
    # (never its own simulation) where the names agree; the deviation is |row 1 - mean| whatever gamma: a tie
    # everywhere, so our search climbs to 2 gamma_init - tol
    updates = torch.tensor([[1.0, 0.0], [3.0, 2.0], [0.0, 0.0]], dtype=torch.float64)
    bad = torch.tensor([False, False, True])

    class Fake:
        name = "median"
        aggregator = None

        def f(self, rows):
            raise AssertionError("not simulated")

        def __call__(self, x):
            return x[1]

    out = spread_updates(updates, bad, torch.Generator(), rule=Fake(), which="median", mode="paper",
                         direction="sign", knowledge="benign", gamma_init=1.0, tol=0.25)
    # gamma: 1 and 1.5 tie deviation(0) (successes): found 1.5, next 1.75, |1.5 - 1.75| <= 0.25; the push is
    # -sign(mean) = -(1, 1)
    assert out[2].tolist() == [2.0 - 1.5, 1.0 - 1.5]


def test_the_deviation_is_read_at_the_candidate_sent():
    # Prepare: honest rows (0, 0) and (2, 4): mean (1, 2), push -std = -(sqrt 2, 2 sqrt 2), |push| = sqrt 10; a
    # server "median" that returns the attacker's row while it is within 2 of the mean, else the mean: the
    # deviation is gamma sqrt 10 up to gamma = 2 / sqrt 10, then 0
    updates = torch.tensor([[0.0, 0.0], [2.0, 4.0], [9.0, 9.0]], dtype=torch.float64)
    bad = torch.tensor([False, False, True])
    mean = torch.tensor([1.0, 2.0], dtype=torch.float64)

    class Clipped:
        name = "median"
        aggregator = None

        def __call__(self, x):
            return x[2] if float((x[2] - mean).norm()) <= 2 else mean

    out = spread_updates(updates, bad, torch.Generator(), rule=Clipped(), which="median", mode="paper",
                         direction="std", knowledge="benign", gamma_init=0.5, tol=1e-9)
    push = -np.array([np.sqrt(2), 2 * np.sqrt(2)])
    gamma = ref_best(lambda g: g * np.sqrt(10) if g * np.sqrt(10) <= 2 else 0.0, 0.5, 1e-9)
    # Assert: the best gamma is the edge 2 / sqrt 10, and the row sent is mean + gamma push
    assert gamma == pytest.approx(2 / np.sqrt(10), abs=1e-8)
    np.testing.assert_allclose(out[2].numpy(), mean.numpy() + gamma * push, rtol=0, atol=1e-12)
    assert out[:2].tolist() == updates[:2].tolist()


# ---- options, defaults, refusals and the registry ----------------------------------------------------------

def keywords(effect):
    return dict(effect.tamper.keywords)


@pytest.mark.parametrize("dataset,start", [("tiny", 3.0), ("cifar10", 3.0), ("femnist", 20.0),
                                           ("femnist_skewed", 20.0)])
def test_tailored_krums_defaults(dataset, start):
    effect = build("tailored_krum", dataset)
    assert effect.tamper.func is selection_updates
    assert keywords(effect) == {"targets": ("krum", "multi_krum"), "simulate": multi_krum_chosen, "direction": "unit",
                                "gamma_init": start, "knowledge": "benign", "tol": 1e-5}
    assert effect.needs_rule and not effect.needs_benign and effect.tamper is not None
    # reference mode: the notebooks' direction (std on CIFAR-10, sign on FEMNIST) and multi_krum
    reference = keywords(build("tailored_krum", dataset, mode="reference"))
    assert reference["direction"] == ("sign" if dataset.startswith("femnist") else "std")
    assert reference["gamma_init"] == start
    assert reference["simulate"].func is notebook_multi_krum_chosen
    assert reference["simulate"].keywords == {"multi": True}


def test_tailored_krum_targets():
    krum = keywords(build("tailored_krum", target="krum"))
    assert krum["targets"] == ("krum",) and krum["simulate"] is krum_chosen
    multi = keywords(build("tailored_krum", target="multi_krum"))
    assert multi["targets"] == ("multi_krum",) and multi["simulate"] is multi_krum_chosen
    krum_ref = keywords(build("tailored_krum", target="krum", mode="reference"))
    assert krum_ref["simulate"].func is notebook_multi_krum_chosen and krum_ref["simulate"].keywords == {
        "multi": False}
    multi_ref = keywords(build("tailored_krum", target="multi_krum", mode="reference"))
    assert multi_ref["simulate"].keywords == {"multi": True}


@pytest.mark.parametrize("dataset,start", [("tiny", 3.0), ("femnist", 20.0), ("femnist_skewed", 20.0)])
def test_tailored_bulyans_defaults(dataset, start):
    effect = build("tailored_bulyan", dataset)
    assert effect.tamper.func is selection_updates
    assert keywords(effect) == {"targets": ("bulyan",), "simulate": bulyan_chosen, "direction": "unit",
                                "gamma_init": start, "knowledge": "benign", "tol": 1e-5}
    assert effect.needs_rule and not effect.needs_benign
    reference = keywords(build("tailored_bulyan", dataset, mode="reference"))
    assert reference["simulate"] is notebook_multi_krum_chosen
    assert reference["direction"] == ("sign" if dataset.startswith("femnist") else "std")


@pytest.mark.parametrize("dataset,start", [("tiny", 10.0), ("femnist", 5.0), ("femnist_skewed", 5.0)])
def test_tailored_medians_defaults(dataset, start):
    effect = build("tailored_median", dataset)
    assert effect.tamper.func is spread_updates
    assert keywords(effect) == {"which": "median", "mode": "paper", "direction": "unit", "gamma_init": start,
                                "knowledge": "benign", "tol": 1e-5}
    assert effect.needs_rule and not effect.needs_benign
    reference = keywords(build("tailored_median", dataset, mode="reference", rule="trimmed_mean"))
    assert reference["mode"] == "reference" and reference["which"] == "trimmed_mean"
    assert reference["direction"] == ("sign" if dataset.startswith("femnist") else "std")


@pytest.mark.parametrize("name", ["tailored_krum", "tailored_bulyan", "tailored_median"])
def test_given_options_are_kept_and_the_least_values_accepted(name):
    effect = build(name, "femnist", direction="std", gamma_init=0.25, tol=5e-324, knowledge="benign_strict")
    opts = keywords(effect)
    assert (opts["direction"], opts["gamma_init"], opts["tol"], opts["knowledge"]) == (
        "std", 0.25, 5e-324, "benign_strict")
    assert effect.needs_benign
    assert keywords(build(name, mode="reference", direction="unit"))["direction"] == "unit"
    assert keywords(build(name, knowledge="malicious"))["knowledge"] == "malicious"
    assert build(name, gamma_init=5e-324).tamper.keywords["gamma_init"] == 5e-324


@pytest.mark.parametrize("name", ["tailored_krum", "tailored_bulyan", "tailored_median"])
def test_refusals_word_for_word(name):
    cases = [
        ({"mode": "notebook"}, "mode must be one of paper, reference, got 'notebook'"),
        ({"direction": "alie"}, "direction must be one of unit, std, sign, got 'alie'"),
        ({"gamma_init": 0.0}, "gamma_init must be > 0, got 0.0"),
        ({"tol": 0}, "tol must be > 0, got 0"),
        ({"knowledge": "full"}, "knowledge must be one of benign, benign_strict, malicious, got 'full'"),
    ]
    for params, message in cases:
        with pytest.raises(ConfigError) as error:
            build(name, **params)
        assert str(error.value) == f"attack {name!r}: {message}"


def test_target_and_rule_refusals_word_for_word():
    with pytest.raises(ConfigError) as error:
        build("tailored_krum", target="bulyan")
    assert str(error.value) == "attack 'tailored_krum': target must be one of krum, multi_krum, got 'bulyan'"
    with pytest.raises(ConfigError) as error:
        build("tailored_median", rule="mean")
    assert str(error.value) == "attack 'tailored_median': rule must be one of median, trimmed_mean, got 'mean'"


def test_the_attacks_are_registered_with_their_versions_and_reads():
    assert ATTACKS.get("tailored_krum") is tailored_krum
    assert ATTACKS.get("tailored_bulyan") is tailored_bulyan
    assert ATTACKS.get("tailored_median") is tailored_median
    assert [ATTACKS.version(n) for n in ("tailored_krum", "tailored_bulyan", "tailored_median")] == [4, 3, 2]
    for name in ("tailored_krum", "tailored_bulyan", "tailored_median"):
        # the search evaluates the server's rule on the honest rows, whatever the attacker's knowledge
        assert attack_reads({"name": name, "level": 0.2, "knowledge": "malicious"}) == ("honest_updates",)
