"""The pre-aggregators of ``methods/aggregators/mixing.py`` exactly (its mutation score: docs/testing.md): NNM's
ties in distance kept in row order, bucketing's defaults, its bucket count, its permutation drawn from the round's
seed, ARC's threshold ties and zero norms, every range edge and every refusal word for word."""

import re

import pytest
import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators.base import PRE_AGGREGATORS, RoundDraw
from fedarena.methods.aggregators.mixing import (
    adaptive_robust_clipping,
    arc_clipped_count,
    bucket_count,
    bucket_members,
    bucketing,
    check_arc,
    check_bucketing,
    check_nnm,
    nearest_neighbour_mixing,
)

F64 = torch.float64


def refused(message):
    return pytest.raises(ConfigError, match=f"^{re.escape(message)}$")


def star(d=9):
    """The origin and +-e_j for j < d (2d + 1 = 19 rows, mean exactly 0): every other row at distance 1 from row
    0, so its neighbours all tie (torch's unstable sort reorders ties from 17 rows)."""
    rows = [torch.zeros(d, dtype=F64)]
    for j in range(d):
        e = torch.zeros(d, dtype=F64)
        e[j] = 1.0
        rows += [e, -e]
    return torch.stack(rows)


def nnm_reference(x, f):
    n = x.shape[0]
    out = []
    for i in range(n):
        dist = [float(((x[i] - x[j]) ** 2).sum()) for j in range(n)]
        nearest = sorted(range(n), key=lambda j: (dist[j], j))[: n - f]
        out.append(x[nearest].mean(dim=0))
    return torch.stack(out)


# --- NNM ---------------------------------------------------------------------------------------------------------

def test_nnm_ties_in_distance_go_to_the_lower_row():
    x = star()
    n = x.shape[0]
    out = nearest_neighbour_mixing(x, f=n - 2)
    # row 0 mixes itself with the lowest of its 18 tied neighbours, row 1 (+e_1)
    expected0 = torch.zeros(9, dtype=F64)
    expected0[0] = 0.5
    torch.testing.assert_close(out[0], expected0, rtol=0, atol=0)
    torch.testing.assert_close(out, nnm_reference(x, n - 2), rtol=0, atol=1e-15)
    for f in (0, 5, 12, n - 1):
        torch.testing.assert_close(nearest_neighbour_mixing(x, f=f), nnm_reference(x, f), rtol=0, atol=1e-15)


def test_check_nnm_edges_and_wording():
    check_nnm(3, 0)
    check_nnm(3, 2)
    with refused("pre-aggregator 'nnm' mixes each update with its n - f nearest neighbours and needs "
                 "0 <= f < n; got n=3, f=3"):
        check_nnm(3, 3)
    with refused("pre-aggregator 'nnm' mixes each update with its n - f nearest neighbours and needs "
                 "0 <= f < n; got n=3, f=-1"):
        check_nnm(3, -1)
    with refused("pre-aggregator 'nnm' mixes each update with its n - f nearest neighbours and needs "
                 "0 <= f < n; got n=2, f=2"):
        nearest_neighbour_mixing(torch.zeros(2, 1), f=2)


# --- bucketing -----------------------------------------------------------------------------------------------------

def test_check_bucketing_default_s_is_two():
    check_bucketing(2, 0)  # s = 2 <= n = 2
    with refused("pre-aggregator 'bucketing' needs a bucket size s with 1 <= s <= n (the round's 1 updates); "
                 "got s=2"):
        check_bucketing(1, 0)


def test_check_bucketing_edges_types_and_wording():
    check_bucketing(3, 0, s=1)
    check_bucketing(3, 0, s=3)
    check_bucketing(3, 2, s=3)  # f is not read
    for s, shown in ((0, "0"), (4, "4"), (True, "True"), (False, "False"), (2.0, "2.0"), ("2", "'2'")):
        with refused("pre-aggregator 'bucketing' needs a bucket size s with 1 <= s <= n (the round's 3 "
                     f"updates); got s={shown}"):
            check_bucketing(3, 0, s=s)


def test_bucket_count_is_the_ceiling_as_an_int():
    assert bucket_count(5) == 3  # default s = 2
    assert bucket_count(4) == 2
    assert bucket_count(6) == 3
    for n, s, m in ((5, 2, 3), (6, 3, 2), (7, 3, 3), (1, 1, 1), (7, 7, 1)):
        count = bucket_count(n, s=s)
        assert count == m
        assert type(count) is int
    assert PRE_AGGREGATORS.get("bucketing").rows is bucket_count
    assert PRE_AGGREGATORS.get("bucketing").members is bucket_members
    assert PRE_AGGREGATORS.get("bucketing").check is check_bucketing


def test_bucket_members_default_s_and_direct_call_draw():
    members = bucket_members(5, None)
    order = torch.randperm(5, generator=torch.Generator().manual_seed(0))
    assert [m.tolist() for m in members] == [order[:2].tolist(), order[2:4].tolist(), order[4:].tolist()]


def test_bucket_members_come_from_the_round_seed():
    draw = RoundDraw(torch.arange(8), seed=7)
    order = torch.randperm(8, generator=torch.Generator().manual_seed(7))
    assert order.tolist() != torch.randperm(8, generator=torch.Generator().manual_seed(0)).tolist()
    members = bucket_members(8, draw, s=3)
    assert [m.tolist() for m in members] == [order[:3].tolist(), order[3:6].tolist(), order[6:].tolist()]
    x = torch.arange(16, dtype=F64).reshape(8, 2) ** 2
    out = bucketing(x, round=draw, s=3)
    expected = torch.stack([x[order[:3]].mean(0), x[order[3:6]].mean(0), x[order[6:]].mean(0)])
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_bucket_members_refuse_like_the_check():
    with refused("pre-aggregator 'bucketing' needs a bucket size s with 1 <= s <= n (the round's 2 updates); "
                 "got s=3"):
        bucket_members(2, None, s=3)


# --- ARC -----------------------------------------------------------------------------------------------------------

def test_check_arc_edges_and_wording():
    check_arc(3, 0)
    check_arc(3, 2)
    for n, f in ((3, 3), (3, -1), (1, 1)):
        with refused("pre-aggregator 'arc' clips floor(2 f (n - f) / n) of the n updates and needs "
                     f"0 <= f < n; got n={n}, f={f}"):
            check_arc(n, f)
    with refused("pre-aggregator 'arc' clips floor(2 f (n - f) / n) of the n updates and needs "
                 "0 <= f < n; got n=2, f=2"):
        adaptive_robust_clipping(torch.ones(2, 1), f=2)


def test_arc_a_clipped_row_at_the_threshold_keeps_its_norm():
    # norms 1, 2, 2; n = 3, f = 1: k = floor(2 * 1 * 2 / 3) = 1; threshold = the second largest norm, 2;
    # the clipped row (the later 2) is not above it and passes as it is
    assert arc_clipped_count(3, 1) == 1
    x = torch.tensor([[1.0, 0.0], [0.0, 2.0], [2.0, 0.0]], dtype=F64)
    torch.testing.assert_close(adaptive_robust_clipping(x, f=1), x, rtol=0, atol=0)


def test_arc_zero_updates_stay_zero():
    # threshold 0 and clipped norms 0: no 0 / 0
    out = adaptive_robust_clipping(torch.zeros(3, 2, dtype=F64), f=1)
    torch.testing.assert_close(out, torch.zeros(3, 2, dtype=F64), rtol=0, atol=0)


def test_arc_scales_the_largest_to_the_threshold():
    # n = 5, f = 2: k = floor(2 * 2 * 3 / 5) = 2; norms 1, 5, 2, 10, 3: rows 3 and 1 scaled to norm 3
    assert arc_clipped_count(5, 2) == 2
    x = torch.tensor([[1.0, 0.0], [3.0, 4.0], [0.0, 2.0], [6.0, 8.0], [0.0, 3.0]], dtype=F64)
    expected = x.clone()
    expected[1] = torch.tensor([1.8, 2.4], dtype=F64)
    expected[3] = torch.tensor([1.8, 2.4], dtype=F64)
    torch.testing.assert_close(adaptive_robust_clipping(x, f=2), expected, rtol=0, atol=1e-15)
