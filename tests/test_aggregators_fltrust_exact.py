"""FLTrust's edges, exactly (the mutation score of ``methods/aggregators/fltrust.py``: docs/testing.md): a zero
update beside trusted ones, a root update of norm below 1, a total trust below 1, its errors word for word, and its
round input: the root set drawn once under its own key, the server's update on it with minibatches keyed by round."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fedarena.config import ExperimentConfig
from fedarena.errors import ConfigError
from fedarena.methods.aggregators import AGGREGATORS
from fedarena.methods.aggregators.base import RoundDraw
from fedarena.methods.aggregators.builder import make_aggregator
from fedarena.methods.aggregators.fltrust import check_fltrust, root_set
from fedarena.round_inputs import INPUTS
from fedarena.simulation.engine import round_draw, server_training
from fedarena.simulation.setup import build_trial
from fedarena.streams import AGGREGATE

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


# --- the root set and the server's update (round input ``root_update``, made in fltrust.py) ---

def fake_trial(malicious, root_size=100, seed=3):
    """What ``root_set`` reads of a trial: 12 training samples, owner i // 3 (four devices), the rule's root_size."""
    x = torch.arange(12, dtype=F64)[:, None].repeat(1, 2)
    train = SimpleNamespace(x=x, y=torch.arange(12) % 3, owner=torch.arange(12) // 3)
    return SimpleNamespace(train=train, threat=SimpleNamespace(malicious=np.array(malicious)),
                           aggregate=SimpleNamespace(name="fltrust", params={"root_size": root_size}),
                           cfg=SimpleNamespace(seed=seed))


def test_the_root_set_is_drawn_once_without_replacement_from_the_benign_devices_under_its_own_key():
    x, y = root_set(fake_trial([False, True, False, False], root_size=9))
    benign = np.array([0, 1, 2, 6, 7, 8, 9, 10, 11])  # device 1 (rows 3-5) is malicious
    expected = np.random.default_rng([3, AGGREGATE, 2**31 - 1]).choice(benign, size=9, replace=False)
    assert x[:, 0].long().tolist() == expected.tolist() and y.tolist() == (expected % 3).tolist()
    assert sorted(x[:, 0].long().tolist()) == benign.tolist()  # all nine, none twice


def test_a_root_set_of_one_sample_is_a_root_set_and_none_at_all_is_an_error_word_for_word():
    x, _ = root_set(fake_trial([False, True, True, True], root_size=1))
    assert x.shape == (1, 2) and int(x[0, 0]) in (0, 1, 2)
    empty = fake_trial([True, True, True, True])
    with pytest.raises(ConfigError) as err:
        root_set(empty)
    assert str(err.value) == ("aggregator 'fltrust' needs a root dataset drawn from the benign clients' training data, "
                              "and they have none")


def test_the_servers_update_trains_on_the_root_set_with_minibatches_keyed_by_the_round():
    cfg = ExperimentConfig.from_dict({"dataset": {"name": "digits", "num_clients": 10}, "local_steps": 3,
                                      "batch_size": 4, "lr": 0.1, "aggregator": {"name": "fltrust", "root_size": 20}})
    trial = build_trial(cfg)
    x, y = trial.prepared["root_update"]
    for round_idx in (0, 5):
        plan_seed = int(np.random.default_rng([cfg.seed, AGGREGATE, round_idx, 1]).integers(2**62))
        expected = server_training(trial, trial.w0, round_idx, x, y, plan_seed)
        g0 = round_draw(trial, np.arange(3), round_idx, model=trial.w0).input("root_update")
        assert torch.equal(g0, expected)
    other = server_training(trial, trial.w0, 0, x, y, plan_seed + 1)
    assert not torch.equal(other, expected)  # the plan's seed decides the minibatches


def test_the_stand_in_of_the_root_update_is_the_updates_mean():
    updates = torch.tensor([[1.0, 2.0], [3.0, 6.0]], dtype=F64)
    assert INPUTS.get("root_update").stand_in(updates).tolist() == [2.0, 4.0]
