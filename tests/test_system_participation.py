"""A synchronous deployment (issue 56): who can be drawn (availability), who straggles and how far, who fails to
report, and a rule whose requirement on n fails mid-run; each draw checked against its definition and its
statistics, and the engine's round against a hand computation."""

import json

import numpy as np
import pytest
import torch

from fedarena.config import ExperimentConfig
from fedarena.errors import ConfigError
from fedarena.methods.aggregators.builder import make_aggregator
from fedarena.simulation import buffered
from fedarena.simulation.data import drawn_clients
from fedarena.simulation.engine import (
    _round_data,
    draw_clients,
    initial_state,
    run_round,
    simulate,
    train_group,
)
from fedarena.simulation.experiment import run_experiment
from fedarena.simulation.identity import trial_identity
from fedarena.simulation.setup import build_trial
from fedarena.system.base import Availability, SystemSpec, system_from
from fedarena.system.participation import LAB, Participation, availability_probability, device_phases
from fedarena.system.requirements import following_f
from fedarena.tracking.runs import _metric_entries

BAD = np.zeros(400, dtype=bool)
BAD[:80] = True  # 20% malicious


def spec(**options) -> SystemSpec:
    return system_from({"name": "synchronous", **options})


def test_failures_report_at_one_minus_the_rate_and_attackers_only_where_asked():
    ids = np.arange(400)
    honest, bad = [], []
    for attackers_fail in (False, True):
        part = Participation.of(spec(failure_rate=0.3, attackers_fail=attackers_fail), 7, BAD)
        reports = np.stack([part.reporting(ids, r) for r in range(50)])
        honest.append(reports[:, 80:].mean())
        bad.append(reports[:, :80].mean())
    # 16,000 honest draws: 0.7 within 4 standard deviations (0.0036 each)
    assert abs(honest[0] - 0.7) < 0.015 and abs(honest[1] - 0.7) < 0.015
    assert bad[0] == 1.0  # attackers do not fail by default
    assert abs(bad[1] - 0.7) < 0.03
    assert Participation.of(spec(), 7, BAD).reporting(ids, 0) is None  # nothing fails: every row goes on


def test_a_failure_is_keyed_by_round_and_device_not_by_who_else_is_drawn():
    part = Participation.of(spec(failure_rate=0.5), 3, BAD)
    every = part.reporting(np.arange(400), 9)
    some = np.array([5, 90, 250, 399])
    assert (part.reporting(some, 9) == every[some]).all()


def test_availability_follows_its_daily_cycle():
    avail = Availability(base=0.5, amplitude=0.4, period=20)
    part = Participation.of(spec(availability={"base": 0.5, "amplitude": 0.4, "period": 20}), 11, BAD)
    rounds = np.arange(200)
    away = part.unavailable(rounds)
    p = availability_probability(avail, device_phases(11, 400), rounds)
    # by hand for one device and round: base + amplitude sin(2 pi (t / period + phase))
    assert p[13, 7] == pytest.approx(0.5 + 0.4 * np.sin(2 * np.pi * (13 / 20 + device_phases(11, 400)[7])))
    # inclusion rate = the mean probability (80,000 draws), and it moves with the cycle: the available share of
    # the devices whose probability is above 0.8 against those below 0.2
    assert abs((~away).mean() - p.mean()) < 0.01
    assert (~away)[p > 0.8].mean() > 0.8 and (~away)[p < 0.2].mean() < 0.2


def test_the_engine_draws_only_among_the_available_and_its_cache_agrees(small_config):
    system = {"name": "synchronous", "availability": {"base": 0.35, "amplitude": 0.3, "period": 6}}
    trial = build_trial(small_config(system=system, clients_per_round=5))
    cfg = trial.cfg
    short = 0
    for t in range(40):
        away = trial.participation.unavailable(np.array([t]))[0]
        drawn = draw_clients(trial, t)
        assert not away[drawn].any()
        # the same draw computed on its own, without the look-ahead cache
        alone = drawn_clients(cfg.seed, cfg.sampling, trial.population_sizes(), 5, t, away) if (~away).any() else []
        assert list(drawn) == list(alone)
        short += len(drawn) < 5
    assert short > 0  # some rounds have fewer available devices than a round draws: they draw all there are


def test_stragglers_are_the_share_of_honest_devices_and_run_one_to_E_minus_one_steps():
    part = Participation.of(spec(stragglers=0.5), 5, BAD)
    ids = np.arange(0, 400, 20)  # 20 drawn: 4 attackers, 16 honest
    counts, units = [], []
    for r in range(300):
        chosen = part.stragglers(ids, r)
        assert not chosen[BAD[ids]].any()  # attackers never straggle
        counts.append(chosen.sum())
        budget = part.budgets(ids, r, np.full(len(ids), 8), 0, np.ones(len(ids), dtype=int))
        assert (budget[~chosen] == 8).all()  # the others run their whole plan
        units.extend(budget[chosen])
    assert set(counts) == {8}  # round(0.5 x 16)
    # FedProx's code, randint(1, E) in numpy: uniform in {1, ..., E - 1}; every value turns up in 2,400 draws
    assert set(units) == set(range(1, 8))
    assert abs(np.mean(units) - 4.0) < 0.15  # the mean of {1, ..., 7}: 4 (a draw of {1, ..., 8} gives 4.5)
    epochs = [part.budgets(ids, r, np.full(len(ids), 12), 3, np.full(len(ids), 4))[part.stragglers(ids, r)]
              for r in range(20)]  # 3 epochs of 4 steps each: a straggler runs 1 or 2 of them, never all 3
    assert set(np.concatenate(epochs)) == {4, 8}


def test_a_straggler_with_one_unit_planned_runs_it():
    # E = 1 (one local step, or one epoch): nothing less to do, so the straggler runs its one unit (only `drop`
    # sets it apart: its report is discarded)
    part = Participation.of(spec(stragglers=1.0), 5, BAD)
    ids = np.arange(80, 400, 20)  # 16 honest devices, every one a straggler
    assert (part.budgets(ids, 3, np.ones(len(ids), dtype=int), 0, np.ones(len(ids), dtype=int)) == 1).all()
    assert (part.budgets(ids, 3, np.full(len(ids), 6), 1, np.full(len(ids), 6)) == 6).all()  # one epoch of 6 steps
    uneven = part.budgets(ids, 3, np.array([1, 2] * 8), 0, np.ones(len(ids), dtype=int))
    assert (uneven == 1).all()  # E = 2 steps: FedProx's draw leaves {1}


@pytest.mark.parametrize("backend", ["batched", "sequential"])
def test_a_stragglers_update_is_its_first_k_steps(small_config, backend):
    # the round's update of a straggler with budget k equals that device's update in a run of k local steps
    # (its plan's first k minibatches are the same: plans are keyed by (round, device))
    cfg = small_config(system={"name": "synchronous", "stragglers": 1.0, "straggler_policy": "include"},
                       rounds=1, local_steps=4, backend=backend, lr=0.1)
    trial = build_trial(cfg)
    state = initial_state(trial)
    ids = np.sort(draw_clients(trial, 0))
    budget = trial.participation.budgets(ids, 0, np.full(len(ids), 4), 0, np.ones(len(ids), dtype=int))
    after = run_round(trial, state)
    expected = []
    for device, k in zip(ids, budget, strict=True):
        one = build_trial(small_config(rounds=1, local_steps=int(k), backend=backend, lr=0.1))
        expected.append(train_one(one, device))
    mean = torch.stack(expected).mean(0)  # proportional sampling: the server's weights are all ones
    torch.testing.assert_close(after.w - state.w, mean, rtol=1e-5, atol=1e-6)


def train_one(trial, device):
    pool = _round_data(trial, np.array([device]), 0)
    upd, _ = train_group(trial, trial.w0, initial_state(trial).clients, pool, np.array([device]), 0)
    return upd[0]


def test_a_rule_undefined_on_a_rounds_reports_skips_that_round(small_config):
    # Krum needs n - f - 2 >= 1; f follows the reports, floor(1 x n / 5) = 0 below 5 of the 5 drawn, so Krum needs
    # n >= 3; at failure rate 0.5 some rounds have fewer
    system = {"name": "synchronous", "failure_rate": 0.5}
    cfg = small_config(system=system, aggregator={"name": "krum"}, attack={"name": "a1", "level": 0.2}, rounds=12)
    trial = build_trial(cfg)
    state = initial_state(trial)
    skipped = 0
    for t in range(12):
        ids = np.sort(draw_clients(trial, t, state.server))
        reports = int(trial.participation.reporting(ids, t).sum())
        before = state.w.clone()
        state = run_round(trial, state)
        if reports < 3:
            assert torch.equal(state.w, before), f"round {t}: {reports} reports, Krum undefined, yet the model moved"
            skipped += 1
        else:
            assert not torch.equal(state.w, before)
    assert skipped > 0
    assert int(state.parts["system"]["skipped"]) == skipped
    final = run_experiment(cfg)["final"]
    assert final["rounds_skipped"] == skipped


def test_the_default_system_changes_no_number(small_config):
    plain = run_experiment(small_config(attack={"name": "a1", "level": 0.2}, aggregator={"name": "median"}))
    named = run_experiment(small_config(attack={"name": "a1", "level": 0.2}, aggregator={"name": "median"},
                                        system={"name": "synchronous", "failure_rate": 0.0, "stragglers": 0.0}))
    assert json.dumps(plain["final"]) == json.dumps(named["final"])  # (json: NaN metrics compare equal)
    assert plain["config_hash"] == named["config_hash"]
    moved = run_experiment(small_config(attack={"name": "a1", "level": 0.2}, aggregator={"name": "median"},
                                        system={"name": "synchronous", "failure_rate": 0.3}))
    assert moved["final"]["acc_pooled"] != plain["final"]["acc_pooled"]


def test_differential_privacy_refuses_partial_participation(small_config):
    dp = {"name": "central", "noise_multiplier": 1.0}
    with pytest.raises(ConfigError, match="accountant assumes clients_per_round devices drawn and reporting"):
        build_trial(small_config(privacy=dp, sampling="uniform", system={"name": "synchronous", "failure_rate": 0.1}))
    with pytest.raises(ConfigError, match="with availability breaks that"):
        build_trial(small_config(privacy=dp, sampling="uniform",
                                 system={"name": "synchronous", "availability": {"base": 0.9}}))
    # stragglers whose work is included still report, each clipped: the epsilon holds
    trial = build_trial(small_config(privacy=dp, sampling="uniform", rounds=2,
                                     system={"name": "synchronous", "stragglers": 0.5, "straggler_policy": "include"}))
    assert simulate(trial)[0].round == 2


def test_attackers_straggle_only_where_asked():
    ids = np.arange(0, 400, 20)  # 4 attackers among 20
    shy = Participation.of(spec(stragglers=0.5), 5, BAD)
    bold = Participation.of(spec(stragglers=0.5, attackers_straggle=True), 5, BAD)
    assert not any(shy.stragglers(ids, r)[BAD[ids]].any() for r in range(50))
    assert any(bold.stragglers(ids, r)[BAD[ids]].any() for r in range(50))
    assert {int(bold.stragglers(ids, r).sum()) for r in range(50)} == {10}  # round(0.5 x 20): every drawn device


def test_options_that_change_nothing_change_no_identity(small_config):
    plain = trial_identity(small_config())
    for system in ({"name": "synchronous", "attackers_fail": True}, {"name": "synchronous", "straggler_policy":
                   "include"}, {"name": "synchronous", "attackers_straggle": True, "on_undefined": "skip"}):
        assert trial_identity(small_config(system=system)).config_hash == plain.config_hash, system
    assert trial_identity(small_config(system={"name": "synchronous", "stragglers": 0.1})).config_hash != \
        plain.config_hash


def test_failures_raise_the_attackers_share_of_the_reports(small_config):
    cfg = dict(attack={"name": "alie", "level": 0.2}, aggregator={"name": "median"}, rounds=12, eval_every=12)
    lab = run_experiment(small_config(**cfg, system={"name": "synchronous", "failure_rate": 0.0,
                                                     "attackers_fail": True, "availability": {"base": 1.0}}))
    failing = run_experiment(small_config(**cfg, system={"name": "synchronous", "failure_rate": 0.6}))
    assert lab["final"]["reports_mean"] == 5
    assert failing["final"]["reports_mean"] < 4
    assert failing["final"]["attacker_share"] > lab["final"]["attacker_share"]


@pytest.mark.parametrize("system", [
    {"name": "synchronous", "availability": {"csv": "never19.csv"}},  # one device never available
    {"name": "asynchronous", "buffer": 8, "concurrency": 20, "attacker_timing": "fresh"}])
def test_a_rule_that_removes_devices_meets_availability_and_asynchrony(tmp_path, system):
    # FLDetector's table of removed devices covers the ids it has seen: shorter than the devices (a crash before)
    (tmp_path / "never19.csv").write_text("device,round,available\n19,0,0\n")
    if "availability" in system:
        system = {**system, "availability": {"csv": str(tmp_path / "never19.csv")}}
    level, per_round = (0.3, 12) if system["name"] == "synchronous" else (0.4, 20)
    cfg = ExperimentConfig.from_dict({
        "dataset": {"name": "digits", "num_clients": 20}, "model": {"name": "mlp", "hidden": [16]}, "lr": 0.05,
        "local_steps": 1, "aggregator": {"name": "fldetector", "window": 3}, "seed": 2, "system": system,
        "attack": {"name": "sign_flip", "level": level}, "clients_per_round": per_round, "rounds": 40,
        "eval_every": 40})
    final = run_experiment(cfg)["final"]
    assert np.isfinite(final["acc_pooled"])


def test_secure_aggregation_refuses_asynchronous_aggregation(small_config):
    with pytest.raises(ConfigError, match="scales each by its staleness before the rule"):
        build_trial(small_config(privacy={"name": "none", "secure_aggregation": True},
                                 system={"name": "asynchronous", "buffer": 5}))


def test_a_deployments_properties_reach_the_store():
    # what a deployment's run reports at each evaluation is logged with its metrics (MLflow), NaN left out
    entries = _metric_entries({"acc_pooled": 0.5, "rounds_skipped": 2.0, "reports_mean": 4.5,
                               "attacker_share": float("nan")}, 10, 0)
    logged = {entry.key: entry.value for entry in entries}
    assert logged == {"acc_pooled": 0.5, "rounds_skipped": 2.0, "reports_mean": 4.5}


def test_the_rules_f_follows_the_reports_it_aggregates():
    # the trial's f / clients_per_round of the n reports, rounded down; the lab's rounds keep the trial's rule
    rule = make_aggregator({"name": "trimmed_mean"}, f=2)
    part = Participation.of(spec(failure_rate=0.3), 0, BAD)
    assert [part.rule_for(rule, n, 10).f for n in (10, 9, 7, 5, 4, 2)] == [2, 1, 1, 1, 0, 0]
    assert part.rule_for(rule, 10, 10) is rule and part.rule_for(None, 5, 10) is None
    assert LAB.rule_for(rule, 5, 10) is rule
    assert following_f(4, 5, 10) == 2 and following_f(3, 7, 10) == 2  # 2.1 -> 2


def test_the_attackers_share_counts_only_the_rounds_the_rule_aggregated(small_config):
    # Krum needs n - f - 2 >= 1 with f = floor(n / 5): n >= 3 of the 5 drawn; at failure rate 0.7 rounds with fewer
    # are skipped, and their reports (attackers do not fail: a high share) count for nothing
    cfg = small_config(system={"name": "synchronous", "failure_rate": 0.7}, aggregator={"name": "krum"},
                       attack={"name": "a1", "level": 0.3}, rounds=16, eval_every=16)
    trial = build_trial(cfg)
    state = initial_state(trial)
    ran, every = np.zeros(2), np.zeros(2)  # (reports, attackers' reports) of the aggregated rounds, of all rounds
    for t in range(16):
        ids = np.sort(draw_clients(trial, t, state.server))
        sent = ids[trial.participation.reporting(ids, t)]
        counted = np.array([len(sent), trial.threat.malicious[sent].sum()])
        every += counted
        ran += counted if len(sent) >= 3 else 0
        state = run_round(trial, state)
    final = run_experiment(cfg)["final"]
    assert 0 < final["rounds_skipped"] < 16
    assert final["attacker_share"] == pytest.approx(ran[1] / ran[0])
    assert final["reports_mean"] == pytest.approx(ran[0] / (16 - final["rounds_skipped"]))
    assert ran[1] / ran[0] != pytest.approx(every[1] / every[0])  # the skipped rounds would have moved it


def test_a_buffer_of_five_trims_one_from_each_side_not_two(small_config, monkeypatch):
    # f = 2 of 10 drawn; a buffer of 5 aggregates with f = 1: the trimmed mean of the middle 3, not the median, and
    # the attack reads that f (the round's rule, ``RoundRule.f``)
    seen = []
    real = buffered.server_update

    def spy(trial, w, clients, stacked, info, view):
        seen.append(view.rule.f)
        return real(trial, w, clients, stacked, info, view)
    monkeypatch.setattr(buffered, "server_update", spy)
    common = dict(attack={"name": "alie", "level": 0.2}, clients_per_round=10, rounds=6, eval_every=6,
                  system={"name": "asynchronous", "buffer": 5})
    trimmed = run_experiment(small_config(aggregator={"name": "trimmed_mean"}, **common))["final"]
    assert set(seen) == {1}
    median = run_experiment(small_config(aggregator={"name": "median"}, **common))["final"]
    assert trimmed["acc_pooled"] != median["acc_pooled"]
    # the check before training uses the f that follows the buffer: Krum (n - f - 2 >= 1) on buffers of 3 has f =
    # floor(2 x 3 / 10) = 0 and runs (with the trial's f = 2 it would not); on buffers of 2 it cannot
    krum = {**common, "aggregator": {"name": "krum"}}
    assert build_trial(small_config(**{**krum, "system": {"name": "asynchronous", "buffer": 3}})).aggregate.f == 2
    with pytest.raises(ConfigError, match="aggregates buffers of 2 updates: .*n=2, f=0"):
        build_trial(small_config(**{**krum, "system": {"name": "asynchronous", "buffer": 2}}))
