"""FoolsGold's edges, exactly (the mutation score of ``methods/aggregators/foolsgold.py``: docs/testing.md): the
server-state key its history is checkpointed under, the refusal of a stored history of another shape, in words,
the rounding threshold below which a near twin counts as a twin (1e-9), pardoning only towards a strictly larger
maximum (clients whose maxima tie at 0 keep weight 1), all-zero weights when every client has a twin, the scaling
of updates to norm at most 1 (only those longer than 1), the weighted mean where the weights sum to exactly 1, and
its registry entry (version 2, per-client state: refused behind bucketing)."""

import math

import pytest
import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators import AGGREGATORS, RoundDraw
from fedarena.methods.aggregators.builder import check_aggregator, make_aggregator
from fedarena.methods.aggregators.foolsgold import (
    HISTORY,
    ROUNDING,
    accumulate_history,
    at_most_unit_norm,
    foolsgold,
    foolsgold_weights,
)

F64 = torch.float64


def rows(*values):
    return torch.tensor(values, dtype=F64)


def near_twin(gap: float) -> torch.Tensor:
    """Two histories e1 and (1, t) with 1 - cos = 1 - 1 / sqrt(1 + t^2) ~ t^2 / 2 = gap."""
    return rows([1.0, 0.0], [1.0, math.sqrt(2 * gap)])


# --- the history's key in the server state (what a checkpoint holds) and its shape check

def test_the_history_is_kept_under_the_server_key_foolsgold_history():
    assert HISTORY == "foolsgold_history"
    server: dict = {}
    updates = rows([0.5, 0.0], [0.0, 0.25])
    make_aggregator({"name": "foolsgold"}, f=0).for_round(
        RoundDraw(torch.arange(2), ids=torch.tensor([0, 2]), server=server))(updates, torch.ones(2, dtype=F64))
    assert list(server) == ["foolsgold_history"]
    assert server["foolsgold_history"].tolist() == [[0.5, 0.0], [0.0, 0.0], [0.0, 0.25]]


def test_a_history_stored_under_that_key_is_read_and_added_to():
    # a table of 2 rows for d = 3 (rows and d differ: only the column count must be d)
    server = {"foolsgold_history": rows([1.0, 2.0, 0.0], [3.0, 4.0, 1.0])}
    out = accumulate_history(rows([0.5, 0.5, 0.5]), RoundDraw(torch.arange(1), ids=torch.tensor([1]), server=server))
    assert out.tolist() == [[3.5, 4.5, 1.5]]
    assert server["foolsgold_history"].tolist() == [[1.0, 2.0, 0.0], [3.5, 4.5, 1.5]]


@pytest.mark.parametrize("stored, shape", [(torch.zeros(2, 4, dtype=F64), "(2, 4)"),
                                           (torch.zeros(3, 4, dtype=F64), "(3, 4)"),
                                           (torch.zeros(3, dtype=F64), "(3,)"),
                                           (torch.zeros(2, 3, 1, dtype=F64), "(2, 3, 1)")])
def test_a_stored_history_of_another_shape_is_refused_in_words(stored, shape):
    server = {"foolsgold_history": stored}
    with pytest.raises(ConfigError) as err:
        accumulate_history(torch.ones(2, 3, dtype=F64), RoundDraw(torch.arange(2), server=server))
    assert str(err.value) == f"foolsgold's history has shape {shape}; the updates have d = 3"
    assert server["foolsgold_history"] is stored  # left as it was


# --- the weights: twins, near twins, pardoning

def test_the_rounding_threshold_is_1e_9():
    assert ROUNDING == 1e-9


def test_a_pair_at_cosine_gap_1_5e_9_is_not_a_twin_and_both_get_weight_1():
    # wv = (1.5e-9, 1.5e-9) >= 1e-9: kept; divided by its max, 1 each -> 0.99 -> ln(99) + 0.5 clipped to 1
    assert foolsgold_weights(near_twin(1.5e-9)).tolist() == [1.0, 1.0]


def test_a_pair_at_cosine_gap_5e_10_counts_as_twins_and_gets_weight_0():
    assert foolsgold_weights(near_twin(5e-10)).tolist() == [0.0, 0.0]


def test_when_every_client_has_a_twin_every_weight_is_exactly_zero():
    w = foolsgold_weights(rows([1.0, 2.0], [1.0, 2.0], [-3.0, 0.5], [-3.0, 0.5]))
    assert w.tolist() == [0.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("histories", [[[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 3.0]],
                                       [[1.0, -2.0], [-1.0, 2.0]],
                                       [[1.0, 1.0], [0.0, 0.0]]])
def test_clients_whose_maximum_similarity_ties_at_zero_are_not_pardoned_and_keep_weight_1(histories):
    # orthogonal, opposite, or a zero history (cosine 0 with every other): every row's max is the zero diagonal,
    # so v_i = v_j = 0, no pardoning (v_i < v_j is false), wv = 1 for all -> 0.99 -> weight 1
    assert foolsgold_weights(rows(*histories)).tolist() == [1.0] * len(histories)


def test_a_single_client_gets_weight_1():
    assert foolsgold_weights(rows([2.0, -1.0])).tolist() == [1.0]


def test_pardoning_with_tied_positive_maxima_by_hand():
    # histories e1, (1, 1), e2: c01 = c12 = 1/sqrt(2), c02 = 0; v = (c, c, c) with c = 1/sqrt(2): no pardoning;
    # wv = 1 - c for all -> max-normalised 1 each -> 0.99 -> weight 1
    assert foolsgold_weights(rows([1.0, 0.0], [1.0, 1.0], [0.0, 1.0])).tolist() == [1.0, 1.0, 1.0]


def test_pardoning_scales_by_the_ratio_of_maxima_by_hand():
    # histories e1, (1, 2), (-1, 2): c01 = 1/sqrt(5), c02 = -1/sqrt(5), c12 = 3/5; v = (1/sqrt(5), 3/5, 3/5).
    # Only client 0 (v_0 < v_1 = v_2) is pardoned: c01 * v_0 / v_1 = (1/5) / (3/5) = 1/3. wv = (2/3, 2/5, 2/5);
    # divided by 2/3: (1, 3/5, 3/5); the 1 -> 0.99 -> weight 1; ln((3/5) / (2/5)) + 0.5 = ln(1.5) + 0.5
    w = foolsgold_weights(rows([1.0, 0.0], [1.0, 2.0], [-1.0, 2.0]))
    other = math.log(1.5) + 0.5
    torch.testing.assert_close(w, rows(1.0, other, other), rtol=1e-12, atol=1e-12)


def test_the_pardoned_weights_give_the_weighted_mean_by_hand():
    # the same rows at norm <= 1 (scaled by 1/4: norms 0.25, sqrt(5)/4 < 1): sum_i w_i u_i / sum_i w_i
    u = rows([1.0, 0.0], [1.0, 2.0], [-1.0, 2.0]) / 4
    w = math.log(1.5) + 0.5
    out = make_aggregator({"name": "foolsgold"}, f=0)(u, torch.ones(3, dtype=F64))
    torch.testing.assert_close(out, rows(0.25, 4 * w * 0.25) / (1 + 2 * w), rtol=1e-12, atol=1e-12)


# --- the unit-norm scaling

def test_only_rows_longer_than_1_are_scaled_to_norm_1():
    u = rows([0.9, 1.2], [1.2, 1.6], [0.6, 0.8], [0.3, 0.4], [0.0, 0.0], [6.0, 8.0])
    out = at_most_unit_norm(u)
    torch.testing.assert_close(out, rows([0.6, 0.8], [0.6, 0.8], [0.6, 0.8], [0.3, 0.4], [0.0, 0.0], [0.6, 0.8]),
                               rtol=0, atol=1e-15)
    assert torch.equal(out[2:5], u[2:5])  # norm 1, below 1, zero: as they are


def test_one_update_of_norm_1_5_comes_back_scaled_to_norm_1_by_default_and_raw_without_unit_norm():
    u, one = rows([0.9, 1.2]), torch.ones(1, dtype=F64)
    torch.testing.assert_close(make_aggregator({"name": "foolsgold"}, f=0)(u, one), rows(0.6, 0.8),
                               rtol=0, atol=1e-15)
    assert make_aggregator({"name": "foolsgold", "unit_norm": False}, f=0)(u, one).tolist() == [0.9, 1.2]


# --- the aggregate

def test_weights_summing_to_exactly_1_give_that_clients_update_not_the_uniform_mean():
    # twins (0.5, 0) x 2 get 0, the orthogonal (0, 0.3) gets 1: the weighted mean is (0, 0.3); uniform: (1/3, 0.1)
    u = rows([0.5, 0.0], [0.5, 0.0], [0.0, 0.3])
    out = foolsgold(u, weights=torch.ones(3, dtype=F64), losses=None, f=0)
    assert out.tolist() == [0.0, 0.3]


def test_all_zero_weights_give_the_uniform_mean():
    u = rows([0.5, 0.0], [0.5, 0.0], [0.0, 0.3], [0.0, 0.3])
    out = foolsgold(u, weights=torch.ones(4, dtype=F64), losses=None, f=0)
    torch.testing.assert_close(out, rows(0.25, 0.15), rtol=0, atol=1e-15)


# --- the registry entry

def test_registry_entry_version_2_reads_the_round_and_keeps_per_client_state():
    entry = AGGREGATORS.get("foolsgold")
    assert entry.rule is foolsgold and entry.reads == ("round",)
    assert AGGREGATORS.version("foolsgold") == 2
    assert entry.per_client is True


def test_foolsgold_is_refused_behind_bucketing_in_words():
    check_aggregator({"name": "foolsgold"}, n=4, f=0)
    with pytest.raises(ConfigError, match="aggregator 'foolsgold' keeps per-client state across rounds, which "
                                          "pre-aggregator 'bucketing' cannot give it"):
        check_aggregator({"name": "foolsgold", "pre": ["bucketing"]}, n=4, f=0)
