"""FLTrust's edges, exactly (the mutation score of ``methods/aggregators/fltrust.py``: docs/testing.md): a zero
update beside trusted ones, a root update of norm below 1, a total trust below 1, and its errors word for word."""

import pytest
import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators import AGGREGATORS
from fedarena.methods.aggregators.base import RoundDraw
from fedarena.methods.aggregators.builder import make_aggregator
from fedarena.methods.aggregators.fltrust import check_fltrust

F64 = torch.float64


def fltrust_round(updates, g0):
    draw = RoundDraw(torch.arange(len(updates)), inputs={"root_update": torch.tensor(g0, dtype=F64)})
    rule = make_aggregator({"name": "fltrust"}, f=0).for_round(draw)
    return rule(torch.tensor(updates, dtype=F64), torch.ones(len(updates), dtype=F64))


def test_a_zero_update_gets_no_trust_and_leaves_the_others_aggregate_as_it_is():
    # g0 = (0.3, 0.4), norm 0.5 (below 1); (6, 8): cos 1, rescaled to (0.3, 0.4); the zero row adds nothing
    out = fltrust_round([[6.0, 8.0], [0.0, 0.0]], [0.3, 0.4])
    torch.testing.assert_close(out, torch.tensor([0.3, 0.4], dtype=F64))


def test_a_total_trust_below_one_still_aggregates():
    # (4, 0) against g0 = (3, 4): cos 0.6, the only trust; rescaled to the root norm 5: (5, 0)
    torch.testing.assert_close(fltrust_round([[4.0, 0.0]], [3.0, 4.0]), torch.tensor([5.0, 0.0], dtype=F64))


def test_a_zero_root_update_trusts_nobody():
    assert fltrust_round([[6.0, 8.0], [1.0, 0.0]], [0.0, 0.0]).tolist() == [0.0, 0.0]


def test_root_size_one_is_allowed_and_anything_else_below_or_not_whole_is_refused_in_words():
    check_fltrust(3, 0, root_size=1)
    for bad in (0, True, 2.0):
        with pytest.raises(ConfigError) as err:
            check_fltrust(3, 0, root_size=bad)
        assert str(err.value) == ("fltrust needs a whole number root_size >= 1 (samples in the server's root "
                                  f"dataset), got {bad!r}")


def test_without_a_root_update_or_with_one_of_another_size_the_error_says_what_is_wrong():
    rule = make_aggregator({"name": "fltrust"}, f=0)
    with pytest.raises(ConfigError) as err:
        rule(torch.ones(3, 4, dtype=F64), torch.ones(3, dtype=F64))
    assert str(err.value) == ("fltrust needs the server's update on its root dataset (the round input 'root_update'), "
                              "which the engine computes each round; a direct call must pass a RoundDraw with one")
    with pytest.raises(ConfigError) as err:
        fltrust_round([[1.0, 2.0, 3.0, 4.0]] * 2, [1.0, 2.0, 3.0])
    assert str(err.value) == "fltrust's root update has 3 entries; the updates have 4"


def test_fltrust_declares_that_it_reads_the_devices_data():
    assert AGGREGATORS.get("fltrust").device_reads == ("device_data",)
