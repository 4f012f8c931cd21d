"""The round loop, the methods global/local/ditto, the backends and reproducibility."""

import json

import numpy as np
import pytest
import torch
from float32_bounds import assert_counts_agree

from fedarena.simulation.engine import evaluate_state, initial_state, run_round, sample_clients, simulate
from fedarena.simulation.experiment import run_experiment
from fedarena.simulation.setup import build_trial


def final_state(cfg):
    trial = build_trial(cfg)
    state, _ = simulate(trial)
    return trial, state


def test_same_seed_gives_identical_results(small_config):
    a = run_experiment(small_config(method={"name": "ditto", "lam": 0.5}))
    b = run_experiment(small_config(method={"name": "ditto", "lam": 0.5}))
    same = json.dumps([a["final"], a["clients"], a["history"]]) == json.dumps([b["final"], b["clients"], b["history"]])
    assert same  # (json: NaN metrics compare equal)
    c = run_experiment(small_config(method={"name": "ditto", "lam": 0.5}, seed=4))
    assert c["final"]["acc_pooled"] != a["final"]["acc_pooled"]


@pytest.mark.parametrize("method", [{"name": "global"}, {"name": "local"}, {"name": "ditto", "lam": 0.3}])
def test_sequential_and_batched_backends_agree(small_config, method):
    _, seq = final_state(small_config(method=method, backend="sequential"))
    _, bat = final_state(small_config(method=method, backend="batched"))
    torch.testing.assert_close(bat.w, seq.w, rtol=1e-4, atol=1e-5)
    for key in seq.clients:
        torch.testing.assert_close(bat.clients[key], seq.clients[key], rtol=1e-4, atol=1e-5)


def test_backends_agree_in_epoch_mode_with_uneven_clients(small_config):
    cfg = dict(method={"name": "ditto", "lam": 0.1}, local_epochs=1, local_steps=0, rounds=2)
    _, seq = final_state(small_config(backend="sequential", **cfg))
    _, bat = final_state(small_config(backend="batched", **cfg))
    torch.testing.assert_close(bat.clients["personal"], seq.clients["personal"], rtol=1e-4, atol=1e-5)


def test_ditto_with_lambda_zero_equals_local_training_exactly(small_config):
    # exact: the sequential backend takes each personal row's gradient alone, the same operations as local
    # training's, and lambda * (v - w) adds an exact 0 (the batched backend computes Ditto's rows in a batch
    # twice as large as local training's, whose float32 results may differ in their last bits)
    _, ditto = final_state(small_config(method={"name": "ditto", "lam": 0.0}, backend="sequential"))
    _, local = final_state(small_config(method={"name": "local"}, backend="sequential"))
    assert torch.equal(ditto.clients["personal"], local.clients["personal"])


def test_ditto_with_large_lambda_tracks_the_global_model(small_config):
    # lam = 1 / lr makes the personal step v <- w^t - lr * grad F_k(v): the personal model sits one local
    # step away from the round-start global model, the largest lambda for which the step is stable.
    cfg = small_config(method={"name": "ditto", "lam": 20.0}, lr=0.05, rounds=6)
    trial = build_trial(cfg)
    state = initial_state(trial)
    for _ in range(cfg.rounds - 1):
        state = run_round(trial, state)
    w_start = state.w.clone()
    state = run_round(trial, state)
    chosen = torch.as_tensor(sample_clients(trial, cfg.rounds - 1))  # the clients of the last round
    gap = (state.clients["personal"][chosen] - w_start).norm(dim=1)
    local_gap = (final_state(small_config(method={"name": "local"}, rounds=6))[1].clients["personal"][chosen]
                 - w_start).norm(dim=1)
    assert gap.mean() < 0.25 * local_gap.mean()  # one personal step from w^t vs many local steps


def test_local_never_aggregates_and_global_has_no_personal_state(small_config):
    trial, state = final_state(small_config(method={"name": "local"}))
    assert torch.equal(state.w, trial.w0)
    _, g = final_state(small_config(method={"name": "global"}))
    assert g.clients == {}


def test_training_improves_over_initial_model(small_config):
    cfg = small_config(rounds=12)
    _, initial = evaluate_state(build_trial(cfg), initial_state(build_trial(cfg)))
    last = run_experiment(cfg)["history"][-1]
    assert last["acc_pooled"] > initial["acc_pooled"] + 0.3 and last["loss_mean"] < initial["loss_mean"]


def test_divergence_is_detected_and_reported(small_config):
    result = run_experiment(small_config(lr=1e6, rounds=6))
    assert result["final"]["diverged"] is True
    assert result["diverged_round"] is not None and result["final"]["round"] <= 6
    cont = run_experiment(small_config(lr=1e6, rounds=6, on_divergence="continue"))
    assert cont["final"]["round"] == 6 and cont["final"]["diverged"] is True


def test_history_has_an_entry_per_evaluation(small_config):
    result = run_experiment(small_config(rounds=8, eval_every=3))
    assert [h["round"] for h in result["history"]] == [3, 6, 8]


def test_uniform_sampling_and_proportional_sampling_differ(small_config):
    prop = build_trial(small_config())
    unif = build_trial(small_config(sampling="uniform"))
    draws_p = [tuple(sample_clients(prop, t)) for t in range(20)]
    draws_u = [tuple(sample_clients(unif, t)) for t in range(20)]
    assert draws_p != draws_u and all(len(set(d)) == 5 for d in draws_p)


def test_step_mode_batches_never_repeat_a_sample_within_a_batch():
    from fedarena.simulation.data import Pooled, round_plan

    # Prepare: one client of 10 samples, 7 steps of 4: two full batches per permutation
    pool = Pooled(torch.zeros(10, 1), torch.zeros(10, dtype=torch.long), np.array([0]), np.array([10]),
                  torch.zeros(10, dtype=torch.long))
    # Execute
    index, mask, active = round_plan(pool, np.array([0]), 7, 0, 4, seed=0, round_idx=0)
    batches = [index[s, 0].tolist() for s in range(7)]
    # Assert
    assert bool(active.all()) and bool(mask.all()) and all(len(set(b)) == 4 for b in batches)
    assert not set(batches[0]) & set(batches[1])  # batches 0 and 1 come from one permutation


def test_a_clients_minibatches_do_not_depend_on_the_others_drawn_with_it():
    from fedarena.simulation.data import Pooled, round_plan

    sizes = np.array([10, 3, 25, 7])
    pool = Pooled(torch.zeros(45, 1), torch.zeros(45, dtype=torch.long), np.array([0, 10, 13, 38]), sizes,
                  torch.zeros(45, dtype=torch.long))
    for steps, epochs in ((7, 0), (0, 2)):
        together = round_plan(pool, np.arange(4), steps, epochs, 4, seed=1, round_idx=3)
        for k in range(4):  # the real samples of each step, alone and in the group (its padding may differ)
            alone = round_plan(pool, np.array([k]), steps, epochs, 4, seed=1, round_idx=3)
            for s in range(together[0].shape[0]):
                shown = together[0][s, k][together[1][s, k] > 0].tolist()
                own = alone[0][s, 0][alone[1][s, 0] > 0].tolist() if s < alone[0].shape[0] else []
                assert shown == own, (steps, epochs, k, s)


def test_a_large_calls_plans_grouped_by_size_are_each_clients_own():
    from fedarena.simulation.data import ONE_GROUP_UP_TO, Pooled, round_plan

    # Prepare: 200 clients of 1 to 150 samples, one of them 500: a call large enough to group clients by size
    rng = np.random.default_rng(4)
    sizes = np.append(rng.integers(1, 150, 199), 500)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    total = int(sizes.sum())
    pool = Pooled(torch.zeros(total, 1), torch.zeros(total, dtype=torch.long), offsets, sizes,
                  torch.zeros(total, dtype=torch.long))
    ids, rounds = rng.permutation(200), rng.integers(0, 9, 200)
    for steps, epochs in ((3, 0), (0, 1)):
        # Execute
        together = round_plan(pool, ids, steps, epochs, 16, seed=2, round_idx=rounds)
        # Assert: every client's minibatches are those of its plan alone (the padding may differ)
        assert len(ids) * 500 > ONE_GROUP_UP_TO
        for k in range(0, 200, 7):
            alone = round_plan(pool, ids[k:k + 1], steps, epochs, 16, seed=2, round_idx=rounds[k:k + 1])
            width = alone[0].shape[2]
            assert torch.equal(together[1][: alone[1].shape[0], k, :width], alone[1][:, 0])
            assert torch.equal(together[0][: alone[0].shape[0], k, :width] * alone[1][:, 0].long(),
                               alone[0][:, 0] * alone[1][:, 0].long())
            assert not together[1][alone[1].shape[0]:, k].any() and not together[1][:, k, width:].any()


def test_divergence_with_continue_keeps_personal_models_finite(small_config):
    # a huge lambda makes the personal step explode; the round is dropped, personal rows restored
    trial = build_trial(small_config(method={"name": "ditto", "lam": 1e12}, rounds=4, on_divergence="continue"))
    state, _ = simulate(trial)
    assert state.diverged and bool(torch.isfinite(state.clients["personal"]).all())


def test_bad_settings_fail_before_training(small_config):
    from fedarena.errors import ConfigError

    bad = [dict(local_steps=1.5), dict(method={"name": "ditto", "lam": -1.0}),
           dict(attack={"name": "a1", "level": 0.0}), dict(attack={"name": "a1", "level": "high"}),
           dict(method={"name": "skl"}, dataset={"name": "point_estimation"}),
           dict(model={"name": "cnn_celeba"}, dataset={"name": "digits"}),
           dict(aggregator={"name": "multi_krum", "m": 2.5}, attack={"name": "a2", "level": 0.2})]
    for overrides in bad:
        with pytest.raises(ConfigError):
            build_trial(small_config(**overrides))


def test_personal_evaluation_strategies_agree(small_config):
    from fedarena.simulation.evaluate import evaluate

    trial, state = final_state(small_config(method={"name": "ditto", "lam": 0.1}, rounds=3))
    personal = state.clients["personal"]
    loop = evaluate(trial.model, personal, trial.test, 10, per_client_loop=True)
    vmapped = evaluate(trial.model, personal, trial.test, 10, per_client_loop=False)
    # both are the exact counts up to float32 rounding (in any summation order: float32_bounds), so correct
    # counts differ at most by the few samples within rounding of a tie
    assert assert_counts_agree([loop, vmapped], trial.model, personal, trial.test, 10) <= 0.05 * len(trial.test.y)
    # a shared model scored as K identical rows gives the shared model's counts
    shared = evaluate(trial.model, state.w, trial.test, 10)
    rows = evaluate(trial.model, state.w.expand(trial.dataset.num_clients, -1), trial.test, 10)
    assert assert_counts_agree([shared, rows], trial.model, state.w, trial.test, 10) <= 0.05 * len(trial.test.y)
