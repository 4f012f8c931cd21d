"""FoolsGold and FLTrust: hand-computed rounds, FoolsGold's history across rounds, and end-to-end runs."""

import math

import numpy as np
import pytest
import torch

from fedarena.config import ExperimentConfig
from fedarena.errors import ConfigError
from fedarena.methods.aggregators import AGGREGATORS, RoundDraw, make_aggregator
from fedarena.methods.aggregators.foolsgold import HISTORY
from fedarena.simulation.engine import SimState, initial_state, round_draw, run_round
from fedarena.simulation.experiment import run_experiment
from fedarena.simulation.setup import build_trial

F64 = torch.float64
ONES = torch.ones(5, dtype=F64)
# two sybils (rows 0, 1: the same direction e1) and three honest clients in the plane orthogonal to it
SYBIL = [1.0, 0.0, 0.0]
HONEST = [[0.0, -1.0, -1.0], [0.0, -2.0, 3.0], [0.0, -1.0, 0.0]]


def honest_weight() -> float:
    """FoolsGold's weight of honest clients 0 and 2 (honest client 1 gets weight 1, the sybils 0), by hand.

    Cosines: c02 = 1/sqrt(2), c12 = 2/sqrt(13), c01 = -1/sqrt(26); the sybils have 1 with each other, 0
    with the rest. Row maxima v = (c02, c12, c02) for the honest ones. Pardoning (v_1 < v_2): c12 becomes
    c12 * v_1 / v_2 = c12^2 / c02. wv = 1 - max: (1 - c02, 1 - c12^2 / c02, 1 - c02), 0 for the sybils;
    divided by the largest, client 1's; its 1 becomes 0.99 and logit + 0.5 clips it to 1."""
    c02, c12 = 1 / math.sqrt(2), 2 / math.sqrt(13)
    x = (1 - c02) / (1 - c12 * c12 / c02)
    return math.log(x / (1 - x)) + 0.5


def test_honest_weight_is_a_fraction():
    assert 0.57 < honest_weight() < 0.58


def test_foolsgold_zeroes_sybils_and_weights_the_honest_clients():
    updates = torch.tensor([SYBIL, SYBIL, *HONEST], dtype=F64)
    w = honest_weight()
    expected = (w * updates[2] + updates[3] + w * updates[4]) / (2 * w + 1)
    # direct: the histories are the updates (raw: unit_norm false keeps them as they are)
    out = make_aggregator({"name": "foolsgold", "unit_norm": False}, f=0)(updates, ONES)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)


def test_foolsgold_first_scales_every_update_to_norm_at_most_one_as_the_reference_code():
    # Prepare: the same directions at other lengths; rows 2 and 3 are longer than 1, the others not
    updates = torch.tensor([[0.5, 0.0, 0.0], [0.4, 0.0, 0.0], [0.0, -3.0, -3.0], [0.0, -6.0, 9.0],
                            [0.0, -0.5, 0.0]], dtype=F64)
    unit = updates / updates.norm(dim=1, keepdim=True).clamp_min(1.0)
    # Execute
    out = make_aggregator({"name": "foolsgold"}, f=0)(updates, ONES)
    # Assert: the rule on the updates scaled to norm <= 1 (rows 0, 1 and 4 as they are)
    raw = make_aggregator({"name": "foolsgold", "unit_norm": False}, f=0)
    torch.testing.assert_close(out, raw(unit, ONES), rtol=1e-12, atol=1e-12)
    assert unit[2].norm() == pytest.approx(1.0) and torch.equal(unit[4], updates[4])


def test_foolsgold_history_accumulates_across_rounds_through_server():
    ids = torch.tensor([1, 3, 4, 6, 7])
    server: dict = {}
    agg = make_aggregator({"name": "foolsgold", "unit_norm": False}, f=0)
    # round 1: the honest updates are all the same, so every client has a twin: all weights 0, uniform mean
    first = torch.tensor([SYBIL, SYBIL, *[[0.0, -1.0, -1.0]] * 3], dtype=F64)
    out1 = agg.for_round(RoundDraw(torch.arange(5), ids=ids, server=server))(first, ONES)
    torch.testing.assert_close(out1, first.mean(0))
    assert server[HISTORY].shape == (8, 3)  # sized max(id) + 1
    # round 2: the honest histories become HONEST, the sybils' (2, 0, 0)
    second = torch.tensor([SYBIL, SYBIL, *HONEST], dtype=F64) - torch.cat([torch.zeros(2, 3), first[2:]]).to(F64)
    out2 = agg.for_round(RoundDraw(torch.arange(5), ids=ids, server=server))(second, ONES)
    table = torch.zeros(8, 3, dtype=F64)
    table[ids] = first + second
    torch.testing.assert_close(server[HISTORY], table)
    w = honest_weight()
    torch.testing.assert_close(out2, (w * second[2] + second[3] + w * second[4]) / (2 * w + 1))
    # without the history the same round weighs differently
    assert not torch.allclose(agg(second, ONES), out2)


def test_foolsgold_history_grows_for_higher_ids_and_keeps_other_rows():
    server = {HISTORY: torch.ones(2, 3, dtype=F64)}
    updates = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], dtype=F64)
    make_aggregator({"name": "foolsgold"}, f=0).for_round(
        RoundDraw(torch.arange(2), ids=torch.tensor([1, 4]), server=server))(updates, ONES[:2])
    expected = torch.tensor([[1, 1, 1], [2, 1, 1], [0, 0, 0], [0, 0, 0], [0, 1, 0]], dtype=F64)
    torch.testing.assert_close(server[HISTORY], expected)


def fltrust_round(updates, g0):
    agg = make_aggregator({"name": "fltrust"}, f=0)
    draw = RoundDraw(torch.arange(len(updates)), inputs={"root_update": torch.tensor(g0, dtype=F64)})
    return agg.for_round(draw)(torch.tensor(updates, dtype=F64), torch.ones(len(updates), dtype=F64))


def test_fltrust_trusts_by_direction_and_rescales_to_the_root_norm():
    # g0 = (3, 4), norm 5. (6, 8): cos 1, rescaled to (3, 4); (-3, -4): cos -1, trust 0; (4, 0): cos 0.6,
    # rescaled to (5, 0); (0, 1): cos 0.8, rescaled to (0, 5). (1 (3, 4) + 0.6 (5, 0) + 0.8 (0, 5)) / 2.4.
    out = fltrust_round([[6.0, 8.0], [-3.0, -4.0], [4.0, 0.0], [0.0, 1.0]], [3.0, 4.0])
    torch.testing.assert_close(out, torch.tensor([6.0, 8.0], dtype=F64) / 2.4)


def test_fltrust_is_permutation_invariant_and_zero_without_trust():
    rows = [[6.0, 8.0], [-3.0, -4.0], [4.0, 0.0], [0.0, 1.0], [0.0, 0.0]]
    torch.testing.assert_close(fltrust_round(rows, [3.0, 4.0]), fltrust_round(rows[::-1], [3.0, 4.0]))
    assert fltrust_round([[-3.0, -4.0], [0.0, -1.0]], [3.0, 4.0]).tolist() == [0.0, 0.0]


def test_fltrust_needs_a_root_update_and_a_valid_root_size():
    assert "root_update" in AGGREGATORS.get("fltrust").reads and "root_update" not in AGGREGATORS.get("foolsgold").reads
    assert AGGREGATORS.get("fltrust").device_reads == ("device_data",)  # the root set's: raw training samples
    with pytest.raises(ConfigError, match="root dataset"):
        make_aggregator({"name": "fltrust"}, f=0)(torch.ones(3, 2, dtype=F64), torch.ones(3, dtype=F64))
    with pytest.raises(ConfigError, match="root_size"):
        make_aggregator({"name": "fltrust", "root_size": 0}, f=0).entry.check(3, 0, root_size=0)


def digits(small_config, name, **more):
    return small_config(rounds=5, eval_every=5, aggregator={"name": name}, attack={"name": "a1", "level": 0.2},
                        **more)


@pytest.mark.parametrize("name", ["fltrust", "foolsgold"])
def test_end_to_end_on_digits_with_label_flipping(small_config, name):
    result = run_experiment(digits(small_config, name))
    final = result["final"]
    assert result["diverged_round"] is None and final["round"] == 5
    assert all(math.isfinite(final[k]) for k in ("acc_pooled", "acc_mean", "loss_mean", "val_acc_pooled"))


def test_fltrust_root_set_is_benign_and_fixed_per_trial(small_config):
    trial = build_trial(digits(small_config, "fltrust"))
    again = build_trial(digits(small_config, "fltrust"))
    (x, y), (x_again, _) = trial.prepared["root_update"], again.prepared["root_update"]
    assert len(y) == 100 and torch.equal(x, x_again)
    benign_x = trial.train.x[torch.as_tensor(~trial.threat.malicious)[trial.train.owner.cpu()]]
    assert all(bool((benign_x == row).all(dim=tuple(range(1, benign_x.dim()))).any()) for row in x)
    median = build_trial(digits(small_config, "median"))
    assert median.inputs == () and median.prepared == {}


def test_fltrust_is_refused_by_a_method_without_global_aggregation(small_config):
    with pytest.raises(ConfigError, match="no global aggregation"):
        build_trial(digits(small_config, "fltrust", method={"name": "local"}))


def test_checkpoint_round_trip_keeps_the_server_state_and_resumes_identically(small_config):
    trial = build_trial(digits(small_config, "foolsgold"))
    state = run_round(trial, run_round(trial, initial_state(trial)))
    assert set(state.server) == {HISTORY}
    loaded = SimState.from_state_dict(state.state_dict(), trial.device)
    torch.testing.assert_close(loaded.server[HISTORY], state.server[HISTORY], rtol=0, atol=0)
    resumed, straight = run_round(trial, loaded), run_round(trial, state)
    assert torch.equal(resumed.w, straight.w) and torch.equal(resumed.server[HISTORY], straight.server[HISTORY])
    old = {k: v for k, v in state.state_dict().items() if k != "server"}  # a checkpoint from before `server`
    assert SimState.from_state_dict(old, trial.device).server == {}


def test_the_engines_root_update_is_minus_lr_times_the_root_sets_gradient():
    # Prepare: one local step on a root set of 20 samples in one batch (batch 32 >= 20): g0 = -lr grad L(w; root)
    cfg = ExperimentConfig.from_dict({"dataset": {"name": "digits", "num_clients": 10}, "local_steps": 1,
                                      "batch_size": 32, "lr": 0.1, "aggregator": {"name": "fltrust", "root_size": 20}})
    trial = build_trial(cfg)
    w = trial.w0.clone().requires_grad_(True)
    x, y = trial.prepared["root_update"]
    loss = torch.nn.functional.cross_entropy(trial.model.forward(w, x), y)
    expected = -0.1 * torch.autograd.grad(loss, w)[0]
    # Execute
    g0 = round_draw(trial, np.arange(3), 0, model=trial.w0).input("root_update")
    # Assert: the server's own step, in its direction (a sign error would make every trust score flip)
    torch.testing.assert_close(g0, expected, rtol=1e-4, atol=1e-7)
    assert torch.nn.functional.cosine_similarity(g0, expected, dim=0) > 0.9999
