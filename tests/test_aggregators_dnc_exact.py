"""fedarena/methods/aggregators/dnc.py checked against hand computations, one behaviour per test: the spectral
scores against the top right singular vector, the coordinates drawn, which rows each iteration drops and which are
averaged (the intersection, or the last iteration's rows where it is empty), the settings' edges and errors word
for word, and the registry entry (make mutants MODULE=fedarena/methods/aggregators/dnc.py)."""

import inspect

import pytest
import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators import make_aggregator
from fedarena.methods.aggregators.base import AGGREGATORS, RoundDraw
from fedarena.methods.aggregators.dnc import check_dnc, coordinates, dnc, spectral_scores

F64 = torch.float64


def test_the_scores_are_the_squared_projections_of_the_centred_rows_on_the_top_right_singular_vector():
    gen = torch.Generator().manual_seed(0)
    block = torch.randn(6, 4, generator=gen, dtype=F64) + torch.tensor([3.0, -1.0, 0.5, 2.0], dtype=F64)
    centred = block - block.mean(0)
    top = torch.linalg.svd(centred).Vh[0]
    torch.testing.assert_close(spectral_scores(block), (centred @ top) ** 2, rtol=1e-9, atol=1e-12)
    # in the block's dtype; equal rows score 0 (the Gram matrix's rounding below 0 clamped)
    assert spectral_scores(block.float()).dtype == torch.float32
    assert spectral_scores(torch.ones(4, 3, dtype=F64)).tolist() == [0.0] * 4


def test_all_coordinates_in_order_up_to_sub_dim_and_a_draw_without_replacement_above():
    assert coordinates(5, 5, torch.Generator().manual_seed(1)).tolist() == [0, 1, 2, 3, 4]
    assert coordinates(3, 10, torch.Generator().manual_seed(1)).tolist() == [0, 1, 2]
    expected = torch.randperm(9, generator=torch.Generator().manual_seed(1))[:4]
    assert coordinates(9, 4, torch.Generator().manual_seed(1)).tolist() == expected.tolist()


ROWS = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [10.0, 0.0], [0.0, -8.0]], dtype=F64)


def rule(updates, f, **params):
    return dnc(updates, weights=torch.ones(updates.shape[0]), losses=None, f=f, **params)


def test_each_iteration_drops_the_int_c_f_highest_scores_and_the_rest_is_averaged():
    scores = spectral_scores(ROWS)
    order = torch.argsort(scores, descending=True).tolist()
    # Execute / Assert: f = 1 drops the highest; c = 2.5 with f = 1 drops int(2.5) = 2; f = 0 averages all
    for f, c, dropped in ((1, 1.0, order[:1]), (1, 2.5, order[:2]), (2, 1.0, order[:2]), (0, 1.0, [])):
        kept = [i for i in range(6) if i not in dropped]
        torch.testing.assert_close(rule(ROWS, f, c=c), ROWS[kept].mean(0), rtol=1e-12, atol=1e-15)
    assert order[0] == 4  # the far row


def test_the_rows_kept_by_every_iteration_are_averaged_and_the_last_ones_when_none_is():
    # Prepare: one coordinate a time (sub_dim 1) of two; row 0 is the outlier of coordinate 0, row 1 of coordinate 1
    rows = torch.tensor([[9.0, 0.0], [0.0, 9.0], [0.0, 0.0], [0.1, 0.1]], dtype=F64)
    draw = RoundDraw(torch.arange(4), seed=11)
    gen = torch.Generator().manual_seed(11)
    drawn = [int(torch.randperm(2, generator=gen)[0]) for _ in range(3)]
    # Execute: 3 iterations dropping one row each (f = 1), from the round's seed
    out = rule(rows, 1, iters=3, sub_dim=1, round=draw)
    # Assert: coordinate k's iteration drops row k; every row dropped at least once in some iteration is left out
    dropped = set(drawn)
    torch.testing.assert_close(out, rows[[i for i in range(4) if i not in dropped]].mean(0), rtol=1e-12, atol=0.0)
    # three rows, c = 2: each iteration keeps the one row nearest the mean on its coordinate: row 1 on coordinate 0
    # (values 0, 1, 3), row 0 on coordinate 1 (1, 0, 3); two iterations on different coordinates keep no row in
    # common, and the last one's row is averaged
    three = torch.tensor([[0.0, 1.0], [1.0, 0.0], [3.0, 3.0]], dtype=F64)
    kept_on = {0: 1, 1: 0}
    differ = 0
    for seed in range(6):
        gen = torch.Generator().manual_seed(seed)
        cols = [int(torch.randperm(2, generator=gen)[0]) for _ in range(2)]
        differ += cols[0] != cols[1]
        out = rule(three, 1, c=2.0, iters=2, sub_dim=1, round=RoundDraw(torch.arange(3), seed=seed))
        assert out.tolist() == three[kept_on[cols[-1]]].tolist()
    assert differ > 0


def test_the_draws_come_from_the_rounds_seed():
    # Prepare: row i an outlier on coordinates 3i..3i+2 only, so the row dropped depends on the coordinates drawn
    rows = torch.randn(8, 30, generator=torch.Generator().manual_seed(4), dtype=F64)
    for i in range(8):
        rows[i, 3 * i: 3 * i + 3] += 20.0
    outs = {seed: rule(rows, 1, sub_dim=3, round=RoundDraw(torch.arange(8), seed=seed)) for seed in range(8)}
    for seed, out in outs.items():
        cols = torch.randperm(30, generator=torch.Generator().manual_seed(seed))[:3]
        drop = int(torch.argmax(spectral_scores(rows[:, cols])))
        torch.testing.assert_close(out, rows[[i for i in range(8) if i != drop]].mean(0), rtol=1e-12, atol=1e-15)
    assert len({tuple(o.tolist()) for o in outs.values()}) > 1  # the seed matters


def test_a_direct_call_draws_from_seed_0():
    rows = torch.randn(6, 20, generator=torch.Generator().manual_seed(5), dtype=F64)
    assert torch.equal(rule(rows, 1, sub_dim=4), rule(rows, 1, sub_dim=4, round=RoundDraw(torch.arange(6), seed=0)))


def test_the_least_settings_are_allowed_and_the_defaults_are_the_papers():
    check_dnc(2, 1, iters=1, sub_dim=1, c=1e-9)
    check_dnc(5, 4)
    check_dnc(3, 1, c=2.9)  # int(2.9) = 2 < 3
    defaults = {"iters": 1, "sub_dim": 10000, "c": 1.0}
    assert make_aggregator({"name": "dnc"}, f=0).params == defaults
    signature = inspect.signature(check_dnc).parameters
    assert {name: signature[name].default for name in defaults} == defaults


@pytest.mark.parametrize("iters, sub_dim, c", [(0, 10, 1.0), (1, 0, 1.0), (1, 10, 0.0), (1, 10, -1.0), (0, 0, 0.5)])
def test_settings_below_their_least_are_refused_in_words(iters, sub_dim, c):
    with pytest.raises(ConfigError) as err:
        check_dnc(10, 1, iters=iters, sub_dim=sub_dim, c=c)
    assert str(err.value) == f"dnc needs iters >= 1, sub_dim >= 1 and c > 0; got {iters}, {sub_dim}, {c}"


@pytest.mark.parametrize("n, f, c, removed", [(4, 4, 1.0, 4), (3, 2, 1.5, 3), (2, 1, 2.0, 2), (3, 1, 3.2, 3)])
def test_removing_every_update_each_iteration_is_refused_in_words(n, f, c, removed):
    with pytest.raises(ConfigError) as err:
        check_dnc(n, f, c=c)
    assert str(err.value) == (f"dnc removes int(c * f) = {removed} of n = {n} updates each iteration and needs "
                              "fewer than n")


def test_dnc_is_registered_reading_the_round():
    entry = AGGREGATORS.get("dnc")
    assert entry.rule is dnc and entry.check is check_dnc and entry.reads == ("round",)
