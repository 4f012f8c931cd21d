"""Asynchronous buffered aggregation (FedBuff, issue 56) on a hand-made timeline, its clock, a resumed run, and what
each side of a run pays (the bytes a device moves, the attacker's work)."""

import json

import numpy as np
import pytest
import torch
from resume import run_interrupted

from fedarena.config import ExperimentConfig
from fedarena.simulation import buffered
from fedarena.simulation.engine import SYSTEM, SimState, initial_state, simulate
from fedarena.simulation.experiment import run_experiment
from fedarena.simulation.setup import build_trial
from fedarena.system.base import system_from
from fedarena.system.latency import first_arrivals, latencies, lognormal_mean_one, staleness_weight


def asynchronous(**options) -> dict:
    return {"name": "asynchronous", **options}


def test_staleness_weights_are_fedbuffs():
    assert staleness_weight(np.array([0, 1, 3, 8])) == pytest.approx([1.0, 2**-0.5, 0.5, 1 / 3])


def test_the_buffer_takes_the_earliest_arrivals_lower_id_first_on_a_tie():
    arrival = np.array([3.0, 0.5, 2.0, 0.5, 9.0])
    ids = np.array([4, 7, 1, 2, 0])
    assert list(first_arrivals(arrival, ids, 3)) == [3, 1, 2]  # 0.5 (id 2), 0.5 (id 7), 2.0


def test_a_server_step_on_a_hand_made_timeline(small_config):
    # four updates in flight, dispatched at steps 0, 2, 1 and 2; at step 3 the buffer of K = 2 takes the two
    # earliest (devices 6 and 1); the mean rule gets each scaled by 1 / sqrt(1 + staleness)
    cfg = small_config(system=asynchronous(buffer=2, concurrency=4), clients_per_round=4, rounds=5)
    trial = build_trial(cfg)
    state = initial_state(trial)
    d = state.w.numel()
    updates = torch.arange(4 * d, dtype=state.w.dtype).reshape(4, d) / (4 * d)
    flight = {"ids": torch.tensor([1, 9, 6, 12]), "version": torch.tensor([0, 2, 1, 2]),
              "arrival": torch.tensor([5.0, 7.5, 4.0, 6.0], dtype=torch.float64), "updates": updates,
              "clock": torch.tensor(3.5, dtype=torch.float64)}
    state = SimState(3, state.w, state.clients, None, [], {SYSTEM: flight})
    after = buffered.buffered_round(trial, state)
    expected = (updates[0] / np.sqrt(1 + 3) + updates[2] / np.sqrt(1 + 2)) / 2  # devices 1 (s = 3) and 6 (s = 2)
    torch.testing.assert_close(after.w - state.w, expected, rtol=1e-6, atol=1e-7)
    part = after.parts[SYSTEM]
    assert float(part["clock"]) == 5.0  # the second arrival
    kept = part["ids"][:2].tolist()
    assert kept == [9, 12]  # still in flight, then two new devices dispatched on the new model at version 4
    new = part["ids"][2:].numpy()
    assert not set(new) & {9, 12} and part["version"][2:].tolist() == [4, 4]
    assert (part["arrival"][2:].numpy() > 5.0).all()


@pytest.mark.parametrize("method", [{"name": "global"}, {"name": "ditto", "lam": 0.5}])
def test_buffer_equal_to_concurrency_is_the_synchronous_run(small_config, method):
    # K = C = clients_per_round: every update arrives, none is stale, each step's devices are the round's draw; after
    # the last step nobody is dispatched (Ditto's personal models train exactly as many rounds)
    cfg = dict(method=method, aggregator={"name": "median"}, attack={"name": "a1", "level": 0.2})
    sync = run_experiment(small_config(**cfg))
    both = run_experiment(small_config(**cfg, system=asynchronous(buffer=5)))
    assert both["final"].pop("reports_mean") == 5 and both["final"].pop("rounds_skipped") == 0
    assert both["final"].pop("attacker_share") == pytest.approx(sum(c["malicious"] for c in both["clients"]) / 20,
                                                                 abs=0.2)
    assert json.dumps(sync["final"]) == json.dumps(both["final"])  # (json: NaN metrics compare equal)
    assert json.dumps(sync["clients"]) == json.dumps(both["clients"])


def test_a_resumed_asynchronous_run_equals_an_uninterrupted_one(small_config, tmp_path):
    cfg = small_config(system=asynchronous(buffer=3, attacker_timing="fresh"), attack={"name": "alie", "level": 0.2},
                       aggregator={"name": "median"}, rounds=8)
    whole, _ = simulate(build_trial(cfg))
    _, loaded, resumed = run_interrupted(cfg, 4, tmp_path)
    assert loaded.round == 4 and "updates" in loaded.parts[SYSTEM]
    assert torch.equal(resumed.w, whole.w)
    for key, value in whole.parts[SYSTEM].items():
        assert torch.equal(resumed.parts[SYSTEM][key], value), key


def test_an_attacker_chooses_when_its_update_arrives():
    bad = np.zeros(30, dtype=bool)
    bad[:6] = True
    ids = np.arange(30)
    means = np.full(30, 2.0)
    honest = latencies(system_from(asynchronous()), 0, means, bad, ids, 5)
    fresh = latencies(system_from(asynchronous(attacker_timing="fresh")), 0, means, bad, ids, 5)
    stale = latencies(system_from(asynchronous(attacker_timing="stale", stale_factor=4)), 0, means, bad, ids, 5)
    assert (fresh[:6] == 0).all() and (fresh[6:] == honest[6:]).all()
    assert stale[:6] == pytest.approx(4 * honest[:6]) and (stale[6:] == honest[6:]).all()
    z = np.random.default_rng(0).standard_normal(200_000)
    assert lognormal_mean_one(0.5, z).mean() == pytest.approx(1.0, abs=0.01)


@pytest.mark.parametrize("method", ["global", "ditto"])
def test_bytes_per_round_by_hand(method):
    # digits' MLP with one hidden layer of 16: 64 x 16 + 16 + 16 x 10 + 10 = 1210 float32 parameters; a device
    # receives the global model and sends its update; Ditto's personal model never leaves the device
    cfg = {"dataset": {"name": "digits", "num_clients": 10}, "model": {"name": "mlp", "hidden": [16]},
           "method": {"name": method}, "rounds": 2, "clients_per_round": 5, "eval_every": 2}
    cost = run_experiment(cfg_of(cfg))["cost"]
    assert cost["bytes_sent"] == cost["bytes_received"] == 1210 * 4


def test_a_method_reading_losses_sends_one_more_number():
    cfg = {"dataset": {"name": "digits", "num_clients": 10}, "model": {"name": "mlp", "hidden": [16]},
           "method": {"name": "qffl"}, "rounds": 2, "clients_per_round": 5, "eval_every": 2}
    cost = run_experiment(cfg_of(cfg))["cost"]
    assert cost["bytes_sent"] == 1211 * 4 and cost["bytes_received"] == 1210 * 4
    local = run_experiment(cfg_of({**cfg, "method": {"name": "local"}}))["cost"]
    assert local["bytes_sent"] == local["bytes_received"] == 0



def test_mocha_devices_send_their_updates(linear_vehicle):
    # MOCHA has no global rule, but each device's update goes to the server: the linear SVM's 5 weights and a bias
    cfg = {"dataset": {"name": "vehicle", "data_dir": str(linear_vehicle), "num_clients": 4, "train_sizes": "full"},
           "method": {"name": "mocha"}, "rounds": 2, "clients_per_round": 2, "local_epochs": 1, "local_steps": 0,
           "batch_size": 8, "eval_every": 2}
    mocha = run_experiment(cfg_of(cfg))["cost"]
    assert mocha["bytes_sent"] == mocha["bytes_received"] == 6 * 4


def cfg_of(data):
    return ExperimentConfig.from_dict(data)


@pytest.mark.parametrize("attack, paid, passes", [("a1", False, False), ("tailored_krum", True, False),
                                                   ("min_max", True, False), ("a3fl", True, True)])
def test_what_the_attacker_pays(small_config, attack, paid, passes):
    cost = run_experiment(small_config(attack={"name": attack, "level": 0.2}, aggregator={"name": "krum"},
                                       rounds=2, eval_every=2))["cost"]
    assert (cost["attack_s"] > 0) == paid and (cost["attack_ms"] > 0) == paid
    assert (cost["attack_forward"] > 0) == passes and (cost["attack_backward"] > 0) == passes
    assert cost["server_ms"] > 0
