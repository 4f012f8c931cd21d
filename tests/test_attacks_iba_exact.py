"""fedarena/attacks/iba.py checked against hand computations, one behaviour per test (the mutation score of the
module: docs/testing.md): the generator's initial parameters drawn again from the attack's seed, its trigger on
hand-picked parameters (the layout of the flat vector, the bound in raw pixel units, the clamp), the bound's decay,
the two-phase schedule with the state's key names, a generator training against a reference written out from the
same seed (its success rate counted by hand), each round's poisoned samples from the round's draws, and the builder:
its defaults, every range's edges, each refusal word for word and the registry entry
(make mutants MODULE=fedarena/attacks/iba.py)."""

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedarena.attacks.base import ATTACKS, AttackView, attack_reads
from fedarena.attacks.bounds import TriggerBound
from fedarena.attacks.iba import (
    current_bound,
    iba,
    initial_generator,
    poison_round,
    restamp,
    scheduled,
    train_generator,
    triggered,
)
from fedarena.datasets.base import ClientData, FederatedDataset, Split
from fedarena.datasets.pixels import PIXELS, STD_FLOOR, PixelScale
from fedarena.errors import ConfigError
from fedarena.models.functional import FlatModel

F64 = torch.float64
SHAPE = (1, 2, 3)  # one channel of 2 x 3 pixels: 6 inputs
MEAN = np.array([[[1.0, 2.0, 3.0], [4.0, 8.0, 0.0]]], dtype=np.float32)
STD = np.array([[[2.0, 4.0, 0.5], [1.0, 8.0, 16.0]]], dtype=np.float32)


def tiny(std=STD, task="classification", input_shape=SHAPE, meta=True):
    """Three devices of 4 samples (3 classes), images of SHAPE standardised pixel by pixel (raw white 16)."""
    gen = torch.Generator().manual_seed(0)
    clients = []
    for _ in range(3):
        x = torch.rand(4, *input_shape, generator=gen)
        y = torch.tensor([0, 1, 2, 0]) if task == "classification" else torch.rand(4, generator=gen)
        clients.append(ClientData(Split(x, y), Split(x, y), Split(x, y)))
    scale = {PIXELS: PixelScale(MEAN, np.asarray(std, dtype=np.float32), 16.0, "pixel")} if meta else {}
    return FederatedDataset("tiny", clients, 3 if task == "classification" else 1, input_shape, "fp", task, scale)


def build(seed=0, dataset=None, **params):
    return iba(tiny() if dataset is None else dataset, np.array([True, False, False]), np.random.default_rng(seed),
               **params)


def refusal(**params) -> str:
    with pytest.raises(ConfigError) as err:
        build(**params)
    return str(err.value)


def box():
    """The valid box of ``tiny()``'s inputs, flat: (0 - mean) / std .. (16 - mean) / std in float32."""
    low = torch.as_tensor(((np.float32(0.0) - MEAN) / STD).reshape(-1))
    high = torch.as_tensor(((np.float32(16.0) - MEAN) / STD).reshape(-1))
    return low, high


# --- the generator and its trigger -----------------------------------------------------------------------------


def test_the_initial_generator_is_torchs_linear_initialisation_drawn_from_the_attack_stream():
    # Prepare: dim 3, hidden 2: W1 [2, 3] and b1 [2] within 1 / sqrt(3), W2 [3, 2] and b2 [3] within 1 / sqrt(2)
    rng = np.random.default_rng(5)
    a, b = 1 / np.sqrt(3), 1 / np.sqrt(2)
    expected = np.concatenate([rng.uniform(-a, a, 6), rng.uniform(-a, a, 2), rng.uniform(-b, b, 6),
                               rng.uniform(-b, b, 3)])
    # Execute
    out = initial_generator(3, 2, np.random.default_rng(5))
    # Assert: the same draws in that order, as float32
    assert out.dtype == torch.float32 and out.shape == (17,)
    assert torch.equal(out, torch.as_tensor(expected, dtype=torch.float32))
    assert float(out[:8].abs().max()) <= a and float(out[8:].abs().max()) <= b and float(out.min()) < -0.1


def test_the_trigger_of_hand_picked_parameters_moves_each_input_by_eps_times_its_range_then_clamps():
    # Prepare: dim 2, hidden 1: W1 = [1, -1], b1 = 0, W2 = [0.5, -2]^T, b2 = [0, 0.1]; ranges 2 and 0.5, eps 0.2
    params = torch.tensor([1.0, -1.0, 0.0, 0.5, -2.0, 0.0, 0.1])
    low, high = torch.tensor([-1.0, 0.0]), torch.tensor([1.0, 0.5])
    x = torch.tensor([[0.3, 0.1], [0.1, 0.3], [0.95, 0.0]])
    # hidden units relu(0.2), relu(-0.2) = 0 and relu(0.95); noise tanh(W2 h + b2)
    t = np.tanh
    expected = torch.tensor([[0.3 + 0.4 * t(0.1), 0.1 + 0.1 * t(-0.3)],
                             [0.1, 0.3 + 0.1 * t(0.1)],
                             [1.0, 0.0]], dtype=torch.float32)  # 0.95 + 0.4 tanh(0.475) and 0.1 tanh(-1.8) clamped to the box
    # Execute / Assert: the same for rows [3, 2] and [3, 1, 2] (the shape kept)
    torch.testing.assert_close(triggered(x, params, hidden=1, eps=0.2, low=low, high=high), expected)
    out = triggered(x.reshape(3, 1, 2), params, hidden=1, eps=0.2, low=low, high=high)
    assert out.shape == (3, 1, 2)
    torch.testing.assert_close(out.reshape(3, 2), expected)


def test_a_saturated_trigger_moves_every_pixel_of_an_image_by_exactly_eps_of_its_range():
    # Prepare: images [2, 1, 2, 3] of the box's midpoints; a generator whose output is tanh(+-50) = +-1
    low, high = box()
    x = ((low + high) / 2).reshape(1, *SHAPE).repeat(2, 1, 1, 1)
    params = torch.zeros(4 * 6 + 4 + 6 * 4 + 6)
    params[-6:] = torch.tensor([50.0, -50.0, 50.0, -50.0, 50.0, -50.0])  # b2: the noise, whatever x
    # Execute
    out = triggered(x, params, hidden=4, eps=0.1, low=low, high=high)
    # Assert: +-0.1 of each pixel's range, signs as b2's
    sign = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0, -1.0])
    torch.testing.assert_close(out.reshape(2, 6), (x.reshape(2, 6) + 0.1 * (high - low) * sign))
    assert out.shape == (2, *SHAPE)


def test_restamp_triggers_with_the_states_generator_or_else_the_initial_one():
    low, high = torch.tensor([-1.0, 0.0]), torch.tensor([1.0, 0.5])
    initial = torch.tensor([1.0, -1.0, 0.0, 0.5, -2.0, 0.0, 0.1])
    other = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, 9.0, -9.0])  # noise (+1, -1) whatever x
    x = torch.tensor([[0.3, 0.1]])
    trigger = dict(initial=initial, hidden=1, eps=0.2, low=low, high=high)
    expected = triggered(x, initial, hidden=1, eps=0.2, low=low, high=high)
    assert torch.equal(restamp(x, {}, **trigger), expected) and not restamp(x, {}, **trigger).requires_grad
    # the state's generator: 0.3 + 0.4 and 0.1 - 0.1 (tanh(9) within 1e-7 of 1)
    torch.testing.assert_close(restamp(x, {"generator": other}, **trigger), torch.tensor([[0.7, 0.0]]))


# --- the bound and the schedule ----------------------------------------------------------------------------------


def test_the_bound_is_eps_before_the_switch_then_decays_from_the_switch_round_down_to_test_eps():
    # before the switch: eps, whatever the round or the success
    assert current_bound({"success": torch.tensor(0.99, dtype=F64)}, 40, eps=0.3, test_eps=0.05, decay=0.1) == 0.3
    switched = {"switch_round": torch.tensor(3)}
    # the switch round itself: eps (1 - decay)^0
    assert current_bound(switched, 3, eps=0.3, test_eps=0.05, decay=0.1) == 0.3
    # two rounds on: 0.3 x 0.9^2 = 0.243; eleven rounds on: 0.3 x 0.9^11 = 0.0941
    assert current_bound(switched, 5, eps=0.3, test_eps=0.05, decay=0.1) == pytest.approx(0.243, rel=1e-12)
    assert current_bound(switched, 14, eps=0.3, test_eps=0.05, decay=0.1) == pytest.approx(0.3 * 0.9 ** 11,
                                                                                            rel=1e-12)
    # never below test_eps: 0.3 x 0.9^20 = 0.0365 -> 0.05
    assert current_bound(switched, 23, eps=0.3, test_eps=0.05, decay=0.1) == 0.05
    # no decay: eps for good
    assert current_bound(switched, 1000, eps=0.3, test_eps=0.05, decay=0.0) == 0.3


def test_the_first_phase_trains_every_round_and_keeps_the_state_as_it_is():
    # no success yet (a state without one counts 0)
    state, trains = scheduled({}, 0)
    assert trains and state == {}
    low = {"success": torch.tensor(np.nextafter(0.85, 0.0), dtype=F64)}
    state, trains = scheduled(low, 7)
    assert trains and state is low


def test_a_success_of_exactly_085_switches_in_the_next_round_which_trains():
    state, trains = scheduled({"success": torch.tensor(0.85, dtype=F64)}, 5)
    # the state's keys by name (checkpoints hold them): the switch round and the trainings since, this one counted
    assert trains and sorted(state) == ["success", "switch_round", "trainings"]
    assert int(state["switch_round"]) == 5 and int(state["trainings"]) == 1


def test_after_the_switch_the_generator_trains_every_other_round_counting_its_trainings():
    state = {"success": torch.tensor(0.9, dtype=F64)}
    plan, counts = [], []
    for round_idx in range(5, 11):
        state, trains = scheduled(state, round_idx)
        plan.append(trains)
        counts.append(int(state["trainings"]))
    assert plan == [True, False, True, False, True, False]
    assert counts == [1, 2, 3, 4, 5, 6]
    # a success still >= 0.85 switches nothing again: the switch round stays
    assert int(state["switch_round"]) == 5


def test_a_state_already_switched_keeps_its_switch_round_whatever_its_success():
    state, trains = scheduled({"success": torch.tensor(1.0, dtype=F64), "switch_round": torch.tensor(2),
                               "trainings": torch.tensor(3)}, 9)
    assert not trains and int(state["switch_round"]) == 2 and int(state["trainings"]) == 4


# --- a generator training ----------------------------------------------------------------------------------------

BOX = dict(low=torch.full((4,), -1.0), high=torch.full((4,), 1.0))


def onehot_view(classes_of_rows, round_idx=0):
    """A global linear model 10 x (the first three inputs) and inputs one-hot at ``classes_of_rows``: the model calls
    each row its class by a margin of 10, which a trigger of eps 1e-4 (inputs moved by at most 2e-4) never changes."""
    weight = torch.zeros(3, 4)
    weight[[0, 1, 2], [0, 1, 2]] = 10.0
    w = torch.cat([weight.reshape(-1), torch.zeros(3)])
    x = F.one_hot(torch.tensor(classes_of_rows), 4).float()
    return AttackView(w, FlatModel(torch.nn.Linear(4, 3), "classification"), x, torch.zeros(len(x), dtype=torch.long),
                      round_idx)


def reference_training(params, view, seed, *, target, epochs, lr, batch_size, **trigger):
    """The generator training written out: per pass a permutation of the samples from the seeded generator, cut into
    minibatches; one Adam step (lr) per minibatch on the cross-entropy of ``target`` under the global model; the
    success rate is the last pass's share of triggered samples called ``target``."""
    p = params.clone().requires_grad_(True)
    optimiser = torch.optim.Adam([p], lr=lr)
    gen = torch.Generator().manual_seed(seed)
    count = 0
    for _ in range(epochs):
        count = 0
        for rows in torch.randperm(len(view.x), generator=gen).split(batch_size):
            out = view.model.forward(view.w, triggered(view.x[rows], p, **trigger))
            loss = F.cross_entropy(out, torch.full((len(rows),), target))
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            count += int((out.argmax(1) == target).sum())
    return p.detach(), count / len(view.x)


def test_a_first_phase_training_gives_the_reference_generator_and_the_last_passs_success_rate():
    # Prepare: 5 samples the global model calls 1, 0, 1, 2, 1; target 1; minibatches of 2 (2, 2, 1), two passes
    view = onehot_view([1, 0, 1, 2, 1], round_idx=4)
    initial = initial_generator(4, 3, np.random.default_rng(0))
    trigger = dict(hidden=3, eps=1e-4, **BOX)
    # Execute
    state = train_generator({}, view, torch.Generator().manual_seed(11), initial=initial, target=1, epochs=2,
                            lr=0.01, batch_size=2, test_eps=1e-5, decay=0.5, **trigger)
    # Assert: the state's keys by name; success 3 / 5 (the last pass's, not both passes' 6 / 5); the bound eps
    assert sorted(state) == ["eps", "generator", "success"]
    assert state["success"].dtype == F64 and float(state["success"]) == 0.6
    assert state["eps"].dtype == F64 and float(state["eps"]) == 1e-4
    expected, success = reference_training(initial, view, 11, target=1, epochs=2, lr=0.01, batch_size=2, **trigger)
    assert success == 0.6 and torch.equal(state["generator"], expected)
    assert not state["generator"].requires_grad and float((expected - initial).abs().max()) > 0.01  # it moved


def test_a_training_after_the_switch_starts_from_the_states_generator_under_the_decayed_bound():
    # Prepare: switched in round 2, trained since (count 0 trains), round 4: bound 0.4 x 0.5^2 = 0.1
    view = onehot_view([2, 2, 0], round_idx=4)
    start = initial_generator(4, 3, np.random.default_rng(3))
    state = {"generator": start, "success": torch.tensor(0.9, dtype=F64), "switch_round": torch.tensor(2),
             "trainings": torch.tensor(0)}
    trigger = dict(hidden=3, eps=0.4, **BOX)
    # Execute
    out = train_generator(state, view, torch.Generator().manual_seed(2), initial=torch.zeros_like(start), target=2,
                          epochs=1, lr=0.05, batch_size=2, test_eps=0.01, decay=0.5, **trigger)
    # Assert: the generator trained from the state's under eps 0.1; success 2 / 3; the schedule counted
    expected, success = reference_training(start, view, 2, target=2, epochs=1, lr=0.05, batch_size=2,
                                           **{**trigger, "eps": 0.1})
    assert torch.equal(out["generator"], expected) and float(out["success"]) == success == 2 / 3
    assert float(out["eps"]) == pytest.approx(0.1, rel=1e-12)
    assert int(out["switch_round"]) == 2 and int(out["trainings"]) == 1


def test_a_round_without_training_after_the_switch_only_moves_the_schedule_and_the_bound():
    view = onehot_view([2, 2, 0], round_idx=5)
    state = {"generator": torch.ones(31), "success": torch.tensor(0.9, dtype=F64), "switch_round": torch.tensor(2),
             "trainings": torch.tensor(1)}
    out = train_generator(state, view, torch.Generator().manual_seed(2), initial=torch.zeros(31), target=2,
                          epochs=1, lr=0.05, batch_size=2, test_eps=0.01, decay=0.5, hidden=3, eps=0.4, **BOX)
    # 0.4 x 0.5^3 = 0.05
    assert sorted(out) == ["eps", "generator", "success", "switch_round", "trainings"]
    assert out["generator"] is state["generator"] and out["success"] is state["success"]
    assert float(out["eps"]) == pytest.approx(0.05, rel=1e-12) and int(out["trainings"]) == 2


def test_the_success_rate_of_a_single_sample_and_of_no_pass():
    # one sample called the target: success 1
    one = train_generator({}, onehot_view([1]), torch.Generator().manual_seed(0),
                          initial=initial_generator(4, 3, np.random.default_rng(0)), target=1, epochs=1, lr=0.01,
                          batch_size=4, test_eps=1e-4, decay=0.0, hidden=3, eps=1e-4, **BOX)
    assert float(one["success"]) == 1.0
    # a direct call with no pass: no hit, the generator as it was
    initial = initial_generator(4, 3, np.random.default_rng(0))
    none = train_generator({}, onehot_view([1, 1]), torch.Generator().manual_seed(0), initial=initial, target=1,
                           epochs=0, lr=0.01, batch_size=4, test_eps=1e-4, decay=0.0, hidden=3, eps=1e-4, **BOX)
    assert float(none["success"]) == 0.0 and torch.equal(none["generator"], initial)


# --- a round's poisoned samples ----------------------------------------------------------------------------------

HAND = torch.tensor([1.0, -1.0, 0.0, 0.5, -2.0, 0.0, 0.1])  # the hand-picked generator above (dim 2, hidden 1)
HAND_BOX = dict(low=torch.tensor([-1.0, 0.0]), high=torch.tensor([1.0, 0.5]))


def eight_samples():
    x = torch.stack([torch.linspace(-0.8, 0.8, 8), torch.linspace(0.05, 0.45, 8)], 1)
    bad = torch.tensor([True, True, True, True, False, False, False, False])
    return x, torch.tensor([0, 1, 2, 0, 1, 2, 0, 1]), bad


def test_after_the_switch_each_malicious_sample_whose_draw_is_below_the_share_is_triggered_and_relabelled():
    # Prepare: the round's draws; the share exactly at malicious sample 1's draw (not below it: not chosen)
    x, y, bad = eight_samples()
    r = torch.rand(8, generator=torch.Generator().manual_seed(4))
    share = float(r[1])
    chosen = bad & (r < share)
    assert chosen.any() and (bad & ~chosen).sum() >= 2 and (~bad & (r < share)).any()  # honest draws below too
    state = {"switch_round": torch.tensor(1), "trainings": torch.tensor(1), "eps": torch.tensor(0.2, dtype=F64),
             "generator": HAND}
    # Execute: the attack's own eps (0.4) is not the round's bound (the state's 0.2)
    out_x, out_y = poison_round(x, y, torch.arange(8), bad, torch.Generator().manual_seed(4), state=state,
                                initial=torch.zeros(7), target=2, share=share, hidden=1, eps=0.4, **HAND_BOX)
    # Assert: chosen rows triggered with the state's generator and bound, relabelled 2; the rest and the inputs kept
    expected_x, expected_y = x.clone(), y.clone()
    expected_x[chosen] = triggered(x[chosen], HAND, hidden=1, eps=0.2, **HAND_BOX)
    expected_y[chosen] = 2
    assert torch.equal(out_x, expected_x) and torch.equal(out_y, expected_y)
    assert not torch.equal(out_x, x) and torch.equal(x, eight_samples()[0]) and not out_x.requires_grad


def test_a_state_without_a_generator_poisons_with_the_initial_one():
    x, y, bad = eight_samples()
    state = {"switch_round": torch.tensor(0), "eps": torch.tensor(0.3, dtype=F64)}
    out_x, out_y = poison_round(x, y, torch.arange(8), bad, torch.Generator().manual_seed(0), state=state,
                                initial=HAND, target=1, share=1.0, hidden=1, eps=0.1, **HAND_BOX)
    expected = torch.cat([triggered(x[:4], HAND, hidden=1, eps=0.3, **HAND_BOX), x[4:]])
    assert torch.equal(out_x, expected) and out_y.tolist() == [1, 1, 1, 1, 1, 2, 0, 1]


def test_before_the_switch_or_with_nothing_chosen_the_round_keeps_its_data():
    x, y, bad = eight_samples()
    before = {"eps": torch.tensor(0.3, dtype=F64), "generator": HAND, "success": torch.tensor(0.5, dtype=F64)}
    out = poison_round(x, y, torch.arange(8), bad, torch.Generator().manual_seed(0), state=before, initial=HAND,
                       target=1, share=1.0, hidden=1, eps=0.3, **HAND_BOX)
    assert out[0] is x and out[1] is y
    # after the switch, a share below every malicious draw chooses nothing
    r = torch.rand(8, generator=torch.Generator().manual_seed(0))
    after = {**before, "switch_round": torch.tensor(0)}
    out = poison_round(x, y, torch.arange(8), bad, torch.Generator().manual_seed(0), state=after, initial=HAND,
                       target=1, share=float(r[:4].min()), hidden=1, eps=0.3, **HAND_BOX)
    assert out[0] is x and out[1] is y


# --- the attack as built ------------------------------------------------------------------------------------------


def test_iba_is_registered_at_version_2_reading_nothing_beyond_its_own_devices():
    assert ATTACKS.get("iba") is iba and ATTACKS.version("iba") == 2
    assert attack_reads({"name": "iba", "level": 0.2}) == () and iba.device_reads == ()


def test_the_defaults_are_the_authors_and_every_part_shares_one_initial_generator_from_the_attack_stream():
    ds = tiny()
    effect = iba(ds, np.array([True, False, False]), np.random.default_rng(9))
    low, high = box()
    initial = effect.adapt.keywords["initial"]
    assert torch.equal(initial, initial_generator(6, 64, np.random.default_rng(9)))
    trigger = dict(hidden=64, eps=0.3, low=low, high=high)
    # the round's search: target 0, 3 passes of Adam at lr 0.01 over minibatches of 64, test_eps 0.05, decay 0.001
    assert effect.adapt.func is train_generator
    assert_keywords(effect.adapt.keywords, initial=initial, target=0, epochs=3, lr=0.01, batch_size=64,
                    test_eps=0.05, decay=0.001, **trigger)
    # the round's poisoning: a quarter of the malicious samples
    assert effect.corrupt.func is poison_round
    assert_keywords(effect.corrupt.keywords, initial=initial, target=0, share=0.25, **trigger)
    # the success rate's samples: stamped anew with the current generator at test_eps
    backdoor = effect.backdoor
    assert (backdoor.target, backdoor.stamp, backdoor.source, backdoor.samples) == (0, None, None, None)
    assert backdoor.restamp.func is restamp
    assert_keywords(backdoor.restamp.keywords, initial=initial, hidden=64, eps=0.05, low=low, high=high)
    assert effect.bound == TriggerBound(linf=0.3, test_linf=0.05)
    assert effect.dataset is ds and effect.stop_round is None and effect.tamper is None


def assert_keywords(keywords, **expected):
    assert sorted(keywords) == sorted(expected)
    for key, value in expected.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(keywords[key], value), key
        else:
            assert keywords[key] == value and type(keywords[key]) is type(value), key


def test_the_least_values_accepted_reach_every_part_of_the_attack():
    # target 2, eps 1 (the most), test_eps = eps, decay 0, hidden, epochs, batch_size 1, the whole share, stop 0
    effect = build(seed=1, target=2, eps=1, test_eps=1, decay=0, hidden=1, epochs=1, lr=1e-9, batch_size=1,
                   poison_fraction=1, stop_round=0)
    low, high = box()
    initial = initial_generator(6, 1, np.random.default_rng(1))
    assert_keywords(effect.adapt.keywords, initial=initial, target=2, epochs=1, lr=1e-9, batch_size=1,
                    test_eps=1.0, decay=0.0, hidden=1, eps=1.0, low=low, high=high)
    assert_keywords(effect.corrupt.keywords, initial=initial, target=2, share=1.0, hidden=1, eps=1.0, low=low,
                    high=high)
    assert effect.backdoor.target == 2 and effect.backdoor.restamp.keywords["eps"] == 1.0
    assert effect.bound == TriggerBound(linf=1.0, test_linf=1.0) and effect.stop_round == 0
    # the stamped test samples: the current generator's trigger at test_eps
    x = tiny().clients[0].test.x
    effect = build(seed=1, eps=0.5, test_eps=0.125, hidden=1)
    params = torch.linspace(-2, 2, 6 + 1 + 6 + 6)
    expected = triggered(x, params, hidden=1, eps=0.125, low=low, high=high)
    assert torch.equal(effect.backdoor.restamp(x, {"generator": params}), expected) and expected.shape == x.shape
    # the tiniest test_eps and a decay just below 1
    tiny_bound = build(test_eps=5e-324, decay=float(np.nextafter(1.0, 0.0))).bound
    assert tiny_bound == TriggerBound(linf=0.3, test_linf=5e-324)


def eps_refusal(eps, test_eps, decay):
    return (f"attack 'iba': eps and test_eps bound each pixel's change as a share of the raw pixel range, 0 < "
            f"test_eps <= eps <= 1, and 0 <= decay < 1; got eps={eps!r}, test_eps={test_eps!r}, decay={decay!r}")


@pytest.mark.parametrize("eps, test_eps, decay", [
    (0.3, 0.0, 0.001),  # test_eps at 0
    (0.3, float(np.nextafter(0.3, 1.0)), 0.001),  # test_eps just above eps
    (float(np.nextafter(1.0, 2.0)), 0.05, 0.001),  # eps just above 1
    (0.3, 0.05, 1.0),  # decay at 1
    (0.3, 0.05, -1e-12),  # decay below 0
])
def test_a_bound_or_decay_out_of_range_is_refused_naming_all_three(eps, test_eps, decay):
    assert refusal(eps=eps, test_eps=test_eps, decay=decay) == eps_refusal(eps, test_eps, decay)


@pytest.mark.parametrize("params, message", [
    ({"hidden": 0}, "attack 'iba': hidden must be a whole number >= 1, got 0"),
    ({"epochs": 0}, "attack 'iba': epochs must be a whole number >= 1, got 0"),
    ({"batch_size": 0}, "attack 'iba': batch_size must be a whole number >= 1, got 0"),
    ({"lr": 0.0}, "attack 'iba': lr must be > 0, got 0.0"),
    ({"poison_fraction": 1.5}, "attack 'iba': poison_fraction must be a fraction in (0, 1], got 1.5"),
    ({"poison_fraction": 0.0}, "attack 'iba': poison_fraction must be a fraction in (0, 1], got 0.0"),
    ({"stop_round": -1}, "attack 'iba': stop_round must be a round number >= 0 or null, got -1"),
    ({"target": 3}, "attack 'iba': target must be a label in [0, 2] of dataset 'tiny', got 3"),
    # numbers before their ranges: a bool once passed as 1.0 or 0.0, a string raised a TypeError
    ({"eps": True}, "attack 'iba': eps must be a finite number, got True"),
    ({"test_eps": "0.05"}, "attack 'iba': test_eps must be a finite number, got '0.05'"),
    ({"decay": False}, "attack 'iba': decay must be a finite number, got False"),
    ({"eps": float("nan")}, "attack 'iba': eps must be a finite number, got nan"),
])
def test_each_bad_option_is_refused_in_words(params, message):
    assert refusal(**params) == message


def test_data_iba_cannot_work_on_is_refused_in_words():
    regression = tiny(task="regression")
    assert refusal(dataset=regression) == "attack 'iba' needs a classification dataset; 'tiny' is a regression task"
    flat = tiny(input_shape=(6,), meta=False)
    assert refusal(dataset=flat) == ("attack 'iba' stamps a pixel trigger, but dataset 'tiny' has inputs of shape "
                                     "[6], not images; use targeted_flip on such data")
    constant = STD.copy()
    constant[0, 1, 2] = STD_FLOOR
    assert re.fullmatch(re.escape("attack 'iba' changes raw pixels, but 1 of the values it touches never vary in "
                                  "dataset 'tiny', standardised pixel by pixel (normalize: pixel)") + ".*",
                        refusal(dataset=tiny(std=constant)))
