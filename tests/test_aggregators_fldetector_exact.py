"""fedarena/methods/aggregators/fldetector.py checked against its formulas, one behaviour per test: each test here
kills mutants the older tests let survive (make mutants MODULE=fedarena/methods/aggregators/fldetector.py).

The L-BFGS product against the BFGS recursion written out (and the exact Hessian of a quadratic), 1-D k-means against
every contiguous split, the gap rule on scripted dispersions (``kmeans_1d`` replaced by a table, so each gap and
spread is known: the first k with gap(k) >= gap(k + 1) - sd(k + 1), its equality included), each distance from its
prediction by hand, the score table's shift, detection's edges (eight candidates, ``min_scores``, once, the excluded
left out), the L-BFGS pairs, the warm-up, the rule's state and weighted mean, its settings' edges and errors word for
word, and its registry entry."""

import inspect
import itertools
import math

import pytest
import torch

import fedarena.methods.aggregators.fldetector as fld
from fedarena.errors import ConfigError
from fedarena.methods.aggregators import make_aggregator
from fedarena.methods.aggregators.base import AGGREGATORS, EXCLUDED, RoundDraw
from fedarena.methods.aggregators.fldetector import (
    attack_detected,
    check_fldetector,
    clusters,
    detect,
    distances,
    fldetector,
    kmeans_1d,
    lbfgs_product,
    record_scores,
    scores_now,
    update_pairs,
    warmup_rounds,
)

F64 = torch.float64


def bfgs_matrix(s, y):
    """The BFGS recursion from B_0 = sigma I (sigma = y_m.s_m / s_m.s_m, the newest pair), oldest pair first:
    B <- B - B s s^T B / (s^T B s) + y y^T / (y^T s), as a dense matrix."""
    b = (y[-1] @ s[-1]) / (s[-1] @ s[-1]) * torch.eye(s.shape[1], dtype=F64)
    for si, yi in zip(s, y, strict=True):
        bs = b @ si
        b = b - torch.outer(bs, bs) / (si @ bs) + torch.outer(yi, yi) / (yi @ si)
    return b


# --- the L-BFGS Hessian-vector product ---

def test_the_product_is_the_bfgs_matrix_of_the_pairs_times_each_row():
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(6, 6, generator=gen, dtype=F64)
    hessian = a @ a.T + 0.5 * torch.eye(6, dtype=F64)  # a quadratic's: y = H s, y.s > 0
    s = torch.randn(4, 6, generator=gen, dtype=F64)
    y = s @ hessian + 0.1 * torch.randn(4, 6, generator=gen, dtype=F64)
    v = torch.randn(3, 6, generator=gen, dtype=F64)
    torch.testing.assert_close(lbfgs_product(s, y, v), v @ bfgs_matrix(s, y).T, rtol=1e-9, atol=1e-10)


def test_with_a_full_set_of_conjugate_pairs_the_product_is_the_quadratics_hessian_times_v():
    # Prepare: H non-diagonal; s_1..s_d H-conjugate (not orthogonal), y_i = H s_i: BFGS then rebuilds H exactly
    gen = torch.Generator().manual_seed(1)
    a = torch.randn(5, 5, generator=gen, dtype=F64)
    hessian = a @ a.T + torch.eye(5, dtype=F64)
    s = torch.randn(5, 5, generator=gen, dtype=F64)
    for i in range(5):
        for j in range(i):
            s[i] = s[i] - (s[i] @ hessian @ s[j]) / (s[j] @ hessian @ s[j]) * s[j]
    v = torch.randn(4, 5, generator=gen, dtype=F64)
    # Execute
    product = lbfgs_product(s, s @ hessian, v)
    # Assert: B v = H v, and in float64 whatever the inputs' dtype
    torch.testing.assert_close(product, v @ hessian, rtol=1e-8, atol=1e-9)
    assert lbfgs_product(s.float(), (s @ hessian).float(), v.float()).dtype == F64


# --- exact 1-D k-means ---

def brute_force_within(values, k):
    """The least within-cluster sum of squares over every split of the sorted values into k contiguous non-empty
    groups (1-D optimal clusters are contiguous); inf where there are fewer values than k."""
    xs = sorted(values)
    best = math.inf
    for cuts in itertools.combinations(range(1, len(xs)), k - 1):
        bounds = (0, *cuts, len(xs))
        groups = [xs[lo:hi] for lo, hi in itertools.pairwise(bounds)]
        best = min(best, sum(sum((x - sum(g) / len(g)) ** 2 for x in g) for g in groups))
    return best


def test_kmeans_least_sums_are_those_of_the_best_contiguous_split_for_each_k():
    gen = torch.Generator().manual_seed(2)
    x = torch.rand(7, generator=gen, dtype=F64) * torch.tensor([1.0, 3.0, 1.0, 5.0, 2.0, 1.0, 4.0], dtype=F64)
    within, _ = kmeans_1d(x, 5)
    assert within.tolist() == pytest.approx([brute_force_within(x.tolist(), k) for k in range(1, 6)], rel=1e-9,
                                            abs=1e-12)
    # more clusters than values: no split, inf
    few, _ = kmeans_1d(torch.tensor([0.5, 0.1, 0.3], dtype=F64), 5)
    assert few[:3].tolist() == pytest.approx([brute_force_within([0.5, 0.1, 0.3], k) for k in (1, 2, 3)], abs=1e-12)
    assert few[3:].tolist() == [math.inf, math.inf]


def test_the_upper_cluster_is_that_of_the_best_split_ties_to_the_first_in_the_values_order():
    # {0} | {10, 11, 12} costs 2, {0, 10} | {11, 12} 50.5, {0, 10, 11} | {12} 74: 10 goes with 11 and 12
    assert kmeans_1d(torch.tensor([12.0, 0.0, 11.0, 10.0], dtype=F64), 2)[1].tolist() == [True, False, True, True]
    # all equal: every split costs 0, the first is taken and the first value stays below (a stable order, also
    # where an unstable sort would reorder the ties)
    upper = kmeans_1d(torch.full((17,), 2.0, dtype=F64), 2)[1]
    assert upper.tolist() == [False] + [True] * 16


# --- the gap statistic ---

def scripted_gaps(monkeypatch, scores, seed, gaps, spreads):
    """Replace ``kmeans_1d`` by a table: the scores scaled to [0, 1] get least sums w_k, and each reference the
    round's generator draws for k clusters (``torch.rand(k_max, 10, n)``, row k - 1) a sum of e^(+d_k) or e^(-d_k),
    five each, with w_k = cosh(d_k) e^(-gap_k): so gap(k) = log mean(refs) - log w_k is ``gaps[k - 1]`` and sd(k) =
    sqrt(1.1) std(log refs) is ``spreads[k - 1]``. Anything else handed to k-means fails the test."""
    n = len(scores)
    k_max = min(7, n)
    scaled = (scores - scores.min()) / (scores.max() - scores.min())
    refs = torch.rand(k_max, 10, n, generator=torch.Generator().manual_seed(seed), dtype=F64)
    d = torch.tensor(spreads, dtype=F64) / math.sqrt(1.1)
    within = torch.cosh(d) * torch.exp(-torch.tensor(gaps, dtype=F64))
    signs = torch.tensor([1.0, -1.0] * 5, dtype=F64)

    def table(x, k):
        if torch.equal(x, scaled):
            return within[:k], None
        for row, j in itertools.product(range(k_max), range(10)):
            if torch.equal(x, refs[row, j]):
                out = torch.ones(k, dtype=F64)
                if row < k:
                    out[row] = torch.exp(signs[j] * d[row])
                return out, None
        raise AssertionError("k-means got neither the scores scaled to [0, 1] nor one of the round's references")

    monkeypatch.setattr(fld, "kmeans_1d", table)


SCORES = torch.tensor([2.0, 6.0, 3.0, 5.0, 2.5, 4.0, 3.5, 4.5], dtype=F64)  # scaled: (x - 2) / 4


@pytest.mark.parametrize("gaps, spreads, k", [
    # gap(1) - gap(2) + sd(2) = -0.9; gap(2) - gap(3) + sd(3) = -0.02; gap(3) - gap(4) + sd(4) = +0.02: k = 3, and 4
    # after it (+0.6) where sd(4) is not what it is
    ([1.0, 2.0, 3.0, 3.5, 3.0, 3.2, 3.5], [0.1, 0.1, 0.98, 0.52, 0.1, 0.1, 0.1], 3),
    # each gap 1 above the last, spreads 0.1: no k meets the rule
    ([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [0.1] * 7, None),
    # every gap 0 and every spread 0: gap(1) = gap(2) - sd(2) exactly, which meets the rule
    ([0.0] * 7, [0.0] * 7, 1),
])
def test_the_first_k_whose_gap_is_at_least_the_next_less_its_spread_is_the_number_of_clusters(monkeypatch, gaps,
                                                                                               spreads, k):
    scripted_gaps(monkeypatch, SCORES, 5, gaps, spreads)
    assert clusters(SCORES, torch.Generator().manual_seed(5)) == k


def test_fewer_than_seven_scores_try_k_up_to_their_count_less_one(monkeypatch):
    # six scores: k_max 6, references for k = 1..6; gap(5) - gap(6) + sd(6) = 0.6 is the first to meet the rule
    scores = SCORES[:6]
    scripted_gaps(monkeypatch, scores, 3, [0.0, 1.0, 2.0, 3.0, 4.0, 3.5], [0.1] * 6)
    assert clusters(scores, torch.Generator().manual_seed(3)) == 5


def test_equal_scores_are_one_cluster_and_draw_no_references():
    gen = torch.Generator().manual_seed(0)
    state = gen.get_state()
    assert clusters(torch.full((9,), 0.4, dtype=F64), gen) == 1
    assert torch.equal(gen.get_state(), state)


@pytest.mark.parametrize("k, attack", [(1, False), (None, False), (2, True), (4, True)])
def test_an_attack_is_more_than_one_cluster_and_no_number_is_none(monkeypatch, k, attack):
    monkeypatch.setattr(fld, "clusters", lambda scores, gen: k)
    assert attack_detected(torch.zeros(8), torch.Generator()) is attack


# --- the distances and the score table ---

def history(gen):
    """A server's state after some rounds: 2 L-BFGS pairs, and clients 0, 2, 3 seen (ids 0..4 in the tables)."""
    return {"fldetector_s": torch.randn(2, 3, generator=gen, dtype=F64),
            "fldetector_y": torch.randn(2, 3, generator=gen, dtype=F64),
            "fldetector_update": torch.randn(5, 3, generator=gen, dtype=F64),
            "fldetector_model": torch.randn(5, 3, generator=gen, dtype=F64),
            "fldetector_seen": torch.tensor([True, False, True, True, False])}


def test_each_distance_is_from_the_last_update_plus_the_bfgs_product_over_the_rounds_mean():
    # Prepare: this round clients 4 (not seen), 0, 2 and 6 (beyond the tables: never seen), 3
    gen = torch.Generator().manual_seed(3)
    server = history(gen)
    ids = torch.tensor([4, 0, 2, 6, 3])
    updates, model = torch.randn(5, 3, generator=gen, dtype=F64), torch.randn(3, generator=gen, dtype=F64)
    # Execute
    out = distances(updates, ids, model, server, 7)
    # Assert: ||u_i - (u_i' + B (w - w_i'))||, over the mean of the three; NaN for the clients never seen
    b = bfgs_matrix(server["fldetector_s"], server["fldetector_y"])
    seen = [1, 2, 4]
    dist = torch.stack([(updates[r] - server["fldetector_update"][ids[r]]
                         - b @ (model - server["fldetector_model"][ids[r]])).norm() for r in seen])
    assert out[[0, 3]].isnan().all()
    torch.testing.assert_close(out[seen], dist / dist.mean(), rtol=1e-9, atol=1e-12)


def test_a_round_of_unseen_clients_has_no_distance():
    server = history(torch.Generator().manual_seed(4))
    out = distances(torch.ones(2, 3, dtype=F64), torch.tensor([1, 4]), torch.zeros(3, dtype=F64), server, 5)
    assert out.isnan().all() and out.shape == (2,)


def test_distances_below_1e_30_are_divided_by_1e_30_not_by_their_mean():
    # the model did not move since the clients' last updates (zeros), so the prediction is exactly the last update
    server = history(torch.Generator().manual_seed(5))
    server["fldetector_update"] = torch.zeros(5, 3, dtype=F64)
    model = server["fldetector_model"][0].clone()
    server["fldetector_model"] = model.expand(5, 3).clone()
    updates = torch.tensor([[1e-31, 0.0, 0.0], [0.0, 3e-31, 0.0]], dtype=F64)
    out = distances(updates, torch.tensor([0, 2]), model, server, 5)
    torch.testing.assert_close(out, torch.tensor([0.1, 0.3], dtype=F64), rtol=1e-12, atol=0.0)
    exact = distances(torch.zeros(2, 3, dtype=F64), torch.tensor([0, 2]), model, server, 5)
    assert exact.tolist() == [0.0, 0.0]


def test_the_score_table_puts_each_scored_distance_in_front_and_leaves_the_others():
    nan = math.nan
    server = {"fldetector_scores": torch.tensor([[0.1, 0.2, 0.3], [nan, nan, nan], [0.4, nan, nan]], dtype=F64)}
    record_scores(server, torch.tensor([2, 0, 4]), torch.tensor([0.5, nan, 0.6], dtype=F64), 5, 3)
    expected = torch.tensor([[0.1, 0.2, 0.3], [nan] * 3, [0.5, 0.4, nan], [nan] * 3, [0.6, nan, nan]], dtype=F64)
    torch.testing.assert_close(server["fldetector_scores"], expected, equal_nan=True, rtol=0.0, atol=0.0)
    # the window's last distance drops out
    record_scores(server, torch.tensor([0]), torch.tensor([0.7], dtype=F64), 5, 3)
    assert server["fldetector_scores"][0].tolist() == pytest.approx([0.7, 0.1, 0.2])


def test_a_score_table_of_another_window_is_refused_in_words():
    server = {"fldetector_scores": torch.zeros(3, 4, dtype=F64)}
    with pytest.raises(ConfigError) as err:
        record_scores(server, torch.tensor([0]), torch.tensor([0.5], dtype=F64), 3, 3)
    assert str(err.value) == "fldetector's score table keeps 4 rounds; window is 3"


# --- detection ---

SUSPICION = [0.10, 0.11, 0.12, 0.10, 0.13, 0.9, 0.92, 0.95]  # two clusters for the gap statistic


def score_table(rows, filled):
    """[rows, 3] distances: row i holds SUSPICION[i] (0.1 past the eighth) in its first ``filled[i]`` columns."""
    table = torch.full((rows, 3), math.nan, dtype=F64)
    for i, count in enumerate(filled):
        table[i, :count] = SUSPICION[i] if i < len(SUSPICION) else 0.1
    return table


def test_detection_takes_the_clients_with_min_scores_distances_and_needs_eight():
    # Prepare: clients 0..7 with two distances each, 8 and 9 with one
    server = {"fldetector_scores": score_table(10, [2] * 8 + [1, 1])}
    # Execute
    detect(server, torch.Generator().manual_seed(0), torch.device("cpu"), 2)
    # Assert: the eight are enough, and the upper cluster is removed
    assert torch.nonzero(server[EXCLUDED]).flatten().tolist() == [5, 6, 7] and bool(server["fldetector_detected"])
    # seven with two distances are too few; at min_scores 3 nobody has enough
    for filled, least in (([2] * 7 + [1] * 3, 2), ([2] * 10, 3)):
        server = {"fldetector_scores": score_table(10, filled)}
        detect(server, torch.Generator().manual_seed(0), torch.device("cpu"), least)
        assert EXCLUDED not in server and "fldetector_detected" not in server


def test_a_direct_detection_takes_every_client_with_one_distance():
    server = {"fldetector_scores": score_table(10, [1] * 8 + [0, 0])}
    detect(server, torch.Generator().manual_seed(0), torch.device("cpu"))
    assert torch.nonzero(server[EXCLUDED]).flatten().tolist() == [5, 6, 7]


def test_a_removed_client_is_no_candidate_and_stays_removed():
    # client 0, removed earlier, has the highest suspicion; clients 1..8 are the eight candidates
    scores = torch.cat([torch.full((1, 3), 5.0, dtype=F64), score_table(8, [3] * 8)])
    server = {"fldetector_scores": scores, EXCLUDED: torch.tensor([True] + [False] * 8)}
    detect(server, torch.Generator().manual_seed(0), torch.device("cpu"), 3)
    assert torch.nonzero(server[EXCLUDED]).flatten().tolist() == [0, 6, 7, 8]


def test_after_an_attack_is_found_detection_stops():
    server = {"fldetector_scores": score_table(8, [3] * 8), "fldetector_detected": torch.tensor(True)}
    detect(server, torch.Generator().manual_seed(0), torch.device("cpu"), 3)
    assert EXCLUDED not in server


# --- the L-BFGS pairs and the warm-up ---

def test_the_pairs_are_the_moves_of_the_model_and_the_aggregate_the_last_window_oldest_first():
    models = [torch.tensor(m, dtype=F64) for m in ([0.0, 0.0], [0.5, 0.0], [0.5, 0.0], [0.5, -0.25], [1.0, 0.0])]
    aggregates = [torch.tensor(g, dtype=F64) for g in ([1.0, 1.0], [2.0, 0.0], [3.0, 1.0], [0.0, 4.0], [1.0, 1.0])]
    server, pairs = {}, []
    for w, g in zip(models, aggregates, strict=True):
        update_pairs(server, w, g, 2)
        pairs.append(server["fldetector_s"].tolist() if "fldetector_s" in server else None)
        assert torch.equal(server["fldetector_last_model"], w) and torch.equal(server["fldetector_last_aggregate"], g)
    # the first round has no move; the third's model did not move (no pair, though the aggregate did); a move of
    # norm below 1 along one coordinate counts; the window keeps the last two
    assert pairs == [None, [[0.5, 0.0]], [[0.5, 0.0]], [[0.5, 0.0], [0.0, -0.25]], [[0.0, -0.25], [0.5, 0.25]]]
    assert server["fldetector_y"].tolist() == [[-3.0, 3.0], [1.0, -3.0]]


def test_the_warm_up_is_window_plus_one_rounds_unless_set():
    assert warmup_rounds(5, None) == 6 and warmup_rounds(5, 8) == 8


def test_a_round_is_scored_once_warmup_rounds_are_done_and_window_pairs_are_there():
    server = {"fldetector_rounds": torch.tensor(6), "fldetector_s": torch.zeros(5, 3)}
    assert scores_now(server, 5, 6)
    assert not scores_now(server, 5, 7) and not scores_now(server, 6, 6)
    assert scores_now({"fldetector_s": torch.zeros(1, 3)}, 1, 0)  # no round counted: 0 done
    assert not scores_now({}, 1, 0)  # no pair yet


# --- the rule ---

def test_a_round_writes_each_clients_update_model_and_mark_at_its_id_and_counts_itself():
    # Prepare: clients 3 and 1 of a run whose highest id so far is 3
    updates, model = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=F64), torch.tensor([0.5, -0.5], dtype=F64)
    server = {}
    # Execute: two rounds, the second with client 0
    for ids in ([3, 1], [0]):
        draw = RoundDraw(torch.arange(len(ids)), ids=torch.tensor(ids), server=server, inputs={"model": model})
        fldetector(updates[: len(ids)], weights=torch.ones(len(ids)), losses=None, f=0, round=draw)
    # Assert: tables of 4 rows, zeros (and unseen) where no client wrote; the rounds counted; w_t and g_t kept
    assert server["fldetector_update"].tolist() == [[1.0, 2.0], [3.0, 4.0], [0.0, 0.0], [1.0, 2.0]]
    assert server["fldetector_model"].tolist() == [[0.5, -0.5], [0.5, -0.5], [0.0, 0.0], [0.5, -0.5]]
    assert server["fldetector_seen"].tolist() == [True, True, False, True]
    assert int(server["fldetector_rounds"]) == 2
    assert server["fldetector_last_model"].tolist() == [0.5, -0.5]
    assert server["fldetector_last_aggregate"].tolist() == [1.0, 2.0]


def test_the_aggregate_is_the_weighted_mean_of_the_clients_not_removed_and_zero_without_one():
    updates = torch.tensor([[1.0, 0.0], [5.0, 5.0], [3.0, 4.0]], dtype=F64)
    server = {EXCLUDED: torch.tensor([False, True, False])}
    draw = RoundDraw(torch.arange(3), ids=torch.arange(3), server=server)
    out = fldetector(updates, weights=torch.tensor([1.0, 2.0, 3.0]), losses=None, f=0, round=draw)
    torch.testing.assert_close(out, torch.tensor([2.5, 3.0], dtype=F64))  # (1 u_0 + 3 u_2) / 4
    server = {EXCLUDED: torch.tensor([True, True, True])}
    draw = RoundDraw(torch.arange(3), ids=torch.arange(3), server=server)
    out = fldetector(updates, weights=torch.ones(3), losses=None, f=0, round=draw)
    assert out.tolist() == [0.0, 0.0]


def test_the_defaults_are_window_10_warmup_null_min_scores_3_and_the_check_defaults_the_rules():
    defaults = {"window": 10, "warmup": None, "min_scores": 3}
    assert make_aggregator({"name": "fldetector"}, f=0).params == defaults
    signature = inspect.signature(check_fldetector).parameters
    assert {name: signature[name].default for name in defaults} == defaults
    check_fldetector(10, 0, warmup=11)  # window 10: 11 rounds fill its buffer


def test_the_registry_entry_reads_the_round_and_its_model_keeps_client_state_and_removes_clients():
    entry = AGGREGATORS.get("fldetector")
    assert entry.rule is fldetector and entry.check is check_fldetector and entry.selects is None
    assert entry.reads == ("round", "model") and entry.needs_round and entry.needs_each_update()
    assert entry.per_client and entry.excludes and entry.device_reads == ()
    assert AGGREGATORS.version("fldetector") == 2


def test_the_least_settings_are_allowed():
    check_fldetector(1, 0, window=1, min_scores=1, warmup=2)
    check_fldetector(1, 0, window=3, warmup=4)


@pytest.mark.parametrize("name, bad", [("window", 0), ("window", True), ("window", 2.0), ("min_scores", 0),
                                       ("min_scores", False), ("min_scores", 1.5)])
def test_a_window_or_min_scores_below_one_or_not_whole_is_refused_in_words(name, bad):
    with pytest.raises(ConfigError) as err:
        check_fldetector(10, 0, **{name: bad})
    assert str(err.value) == f"fldetector's {name} must be a whole number >= 1, got {bad!r}"


@pytest.mark.parametrize("window, bad", [(3, 3), (3, 0), (3, True), (3, 4.0), (10, 10)])
def test_a_warmup_shorter_than_the_buffer_or_not_whole_is_refused_in_words(window, bad):
    with pytest.raises(ConfigError) as err:
        check_fldetector(10, 0, window=window, warmup=bad)
    assert str(err.value) == (
        f"fldetector's warmup must be null (the window + 1 = {window + 1} rounds that fill the L-BFGS buffer) or a "
        f"whole number of rounds >= window + 1 = {window + 1} (the authors': 21 on CIFAR-10, 51 on MNIST and "
        f"FEMNIST), got {bad!r}")
