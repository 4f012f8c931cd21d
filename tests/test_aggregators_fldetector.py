"""FLDetector: the authors' L-BFGS product transcribed in float64, exact 1-D k-means, the gap statistic's verdicts
(no k: no attack), no score before the warm-up's full L-BFGS buffer, a unique answer (an honest cluster and clear
outliers), a removal that only the prediction makes (the product zeroed, negated or tripled misses it), the engine
never drawing a removed client again, a resume to the uninterrupted numbers, and bad input in one line."""

import numpy as np
import pytest
import torch
from resume import run_interrupted

import fedarena.methods.aggregators.fldetector as fld
from fedarena.config import ExperimentConfig
from fedarena.errors import ConfigError
from fedarena.methods.aggregators import EXCLUDED, RoundDraw, check_aggregator
from fedarena.methods.aggregators.fldetector import (
    attack_detected,
    clusters,
    detect,
    fldetector,
    kmeans_1d,
    lbfgs_product,
)
from fedarena.simulation.data import drawn_clients
from fedarena.simulation.engine import sample_clients, simulate
from fedarena.simulation.setup import build_trial


def authors_lbfgs(s_list, y_list, v):
    """zaixizhang/FLDetector ``lbfgs`` (MXNet, column vectors) in numpy."""
    S, Y = np.concatenate(s_list, 1), np.concatenate(y_list, 1)
    sy, ss = S.T @ Y, S.T @ S
    L = sy - np.triu(sy)
    sigma = (y_list[-1].T @ s_list[-1]) / (s_list[-1].T @ s_list[-1])
    mat = np.concatenate([np.concatenate([sigma * ss, L], 1), np.concatenate([L.T, -np.diag(np.diag(sy))], 1)], 0)
    p = np.concatenate([S.T @ (sigma * v), Y.T @ v], 0)
    return sigma * v - np.concatenate([sigma * S, Y], 1) @ np.linalg.inv(mat) @ p


def test_the_hessian_vector_product_is_the_authors_lbfgs():
    rng = np.random.default_rng(0)
    s, y, v = rng.normal(size=(4, 9)), rng.normal(size=(4, 9)), rng.normal(size=(9, 1))
    y = y + 3 * s  # curvature pairs with y.s > 0, as along a descent
    ours = lbfgs_product(torch.as_tensor(s), torch.as_tensor(y), torch.as_tensor(v.T))
    theirs = authors_lbfgs([r[:, None] for r in s], [r[:, None] for r in y], v)
    assert np.allclose(ours.numpy(), theirs.T, rtol=1e-10, atol=1e-12)
    # the secant equation of the newest pair holds exactly
    assert np.allclose(lbfgs_product(torch.as_tensor(s), torch.as_tensor(y), torch.as_tensor(s[-1:])).numpy(), y[-1:])


def test_exact_one_dimensional_kmeans_on_a_hand_computed_case():
    within, upper = kmeans_1d(torch.tensor([5.0, 0.0, 5.2, 0.2], dtype=torch.float64), 3)
    # k=1: mean 2.6, sum of squares 25.04; k=2: {0, 0.2}, {5, 5.2}: 0.02 + 0.02; k=3: 0.02
    assert within.tolist() == pytest.approx([25.04, 0.04, 0.02])
    assert upper.tolist() == [True, False, True, False]


def test_the_gap_statistic_sees_two_clusters_and_not_one():
    gen = torch.Generator().manual_seed(0)
    honest = 0.1 + 0.01 * torch.rand(20, generator=gen)
    assert attack_detected(torch.cat([honest, torch.tensor([0.9, 0.95, 0.92])]), torch.Generator().manual_seed(1))
    assert not attack_detected(torch.rand(30, generator=gen), torch.Generator().manual_seed(1))
    assert not attack_detected(torch.full((10,), 0.3), torch.Generator().manual_seed(1))


def test_no_number_of_clusters_is_no_attack_and_removes_nobody():
    # Prepare: eight tight pairs 0.3 apart in ratio: every k up to 7 still splits a cluster that is there
    level = 0.3 ** torch.arange(8.0, dtype=torch.float64)
    suspicion = (level[:, None] * torch.tensor([1.0, 1.001], dtype=torch.float64)).flatten()
    server = {"fldetector_scores": suspicion[:, None].expand(16, 3).clone()}
    # Execute
    verdicts = [clusters(suspicion, torch.Generator().manual_seed(seed)) for seed in range(5)]
    detect(server, torch.Generator().manual_seed(0), torch.device("cpu"))
    # Assert: no k meets the rule, which is no attack (the authors' select_k unset): nobody removed, detection goes on
    assert verdicts == [None] * 5 and not attack_detected(suspicion, torch.Generator().manual_seed(0))
    assert EXCLUDED not in server and "fldetector_detected" not in server


def quadratic_rounds(rounds, seed=0, clients=12, bad=(9, 10, 11), **params):
    """Rounds of the rule (window 5) on a quadratic: honest updates one step towards the optimum (plus a little
    noise), the ``bad`` rows a fresh random vector each round; returns the server's state."""
    gen = torch.Generator().manual_seed(seed)
    curvature = torch.diag(torch.linspace(0.2, 1.0, 6, dtype=torch.float64))
    optimum, w, server = torch.randn(6, generator=gen, dtype=torch.float64), torch.zeros(6, dtype=torch.float64), {}
    for t in range(rounds):
        updates = -0.5 * (w - optimum) @ curvature + 0.01 * torch.randn(clients, 6, generator=gen, dtype=torch.float64)
        updates[list(bad)] = 0.5 * torch.randn(len(bad), 6, generator=gen, dtype=torch.float64)
        draw = RoundDraw(torch.arange(clients), seed=t, ids=torch.arange(clients), server=dict(server), inputs={"model": w})
        w = w + fldetector(updates, weights=torch.ones(clients), losses=None, f=0, window=5, round=draw, **params)
        server = draw.server
    return server


@pytest.mark.parametrize("warmup, first", [(None, 7), (8, 9)])
def test_no_score_and_no_removal_before_the_warm_up_and_its_full_buffer(warmup, first):
    # Execute: the rounds before the first scored one, and that one (window 5: the 5 pairs come from rounds 2..6, so
    # null stands for 6 rounds; 8 waits two rounds more with the buffer full)
    before, scored = quadratic_rounds(first - 1, warmup=warmup), quadratic_rounds(first, warmup=warmup)
    # Assert: blatant attackers, yet no distance and no removal until then; then one distance each, from 5 pairs
    assert "fldetector_scores" not in before and EXCLUDED not in before and before["fldetector_s"].shape[0] == 5
    assert (~scored["fldetector_scores"].isnan()).sum(1).tolist() == [1] * 12


def test_a_round_whose_model_did_not_move_delays_the_first_score():
    # Prepare: window 2, so the null warm-up is 3 rounds; round 1's model is round 0's, so it adds no L-BFGS pair
    gen = torch.Generator().manual_seed(0)
    models = [torch.zeros(4, dtype=torch.float64)] * 2 + [t * torch.ones(4, dtype=torch.float64) for t in (1, 2, 3)]
    server, seen = {}, []
    # Execute
    for t, w in enumerate(models):
        draw = RoundDraw(torch.arange(10), seed=t, ids=torch.arange(10), server=dict(server), inputs={"model": w})
        fldetector(torch.randn(10, 4, generator=gen, dtype=torch.float64), weights=torch.ones(10), losses=None, f=0,
                   window=2, round=draw)
        server = draw.server
        seen.append(("fldetector_scores" in server, server["fldetector_s"].shape[0] if "fldetector_s" in server else 0))
    # Assert: the warm-up is over after round 2, yet round 3 finds one pair and scores nobody; round 4 finds two
    assert seen == [(False, 0), (False, 0), (False, 1), (False, 2), (True, 2)]


def test_the_inconsistent_clients_and_only_they_are_removed_once():
    server = quadratic_rounds(9)  # scored from round 7 on, three distances each (min_scores) by round 9
    assert torch.nonzero(server[EXCLUDED]).flatten().tolist() == [9, 10, 11]
    # detection ends at the first attack found (as the authors'): later rounds remove no honest client
    later = quadratic_rounds(30)
    assert torch.nonzero(later[EXCLUDED]).flatten().tolist() == [9, 10, 11] and bool(later["fldetector_detected"])


def predicted_rounds(rounds, seed=0, honest=12, pace=(-1.0, -1.0, 3.0, 3.0)):
    """Rounds of the rule (window 5) on updates linear in the model, u_i = A (m_i w - o_i) + noise, A diagonal
    (-0.3..-0.7), the model drawn anew each round and the offsets o_i spread wider than it: an honest client moves
    at m_i = 1, the attackers after them at ``pace`` -1 and 3, their rows in the honest cloud; the change of
    the mean stays A times the model's (the paces average 1). Returns the server's state and the last round's rows."""
    gen = torch.Generator().manual_seed(seed)
    clients, curvature = honest + len(pace), -torch.diag(torch.linspace(0.3, 0.7, 8, dtype=torch.float64))
    offsets = 3.0 * torch.randn(clients, 8, generator=gen, dtype=torch.float64)
    moves = torch.cat([torch.ones(honest, dtype=torch.float64), torch.tensor(pace, dtype=torch.float64)])
    server = {}
    for t in range(rounds):
        w = 0.5 * torch.randn(8, generator=gen, dtype=torch.float64)
        noise = 0.05 * torch.randn(clients, 8, generator=gen, dtype=torch.float64)
        updates = (moves[:, None] * w - offsets) @ curvature + noise
        draw = RoundDraw(torch.arange(clients), seed=t, ids=torch.arange(clients), server=dict(server), inputs={"model": w})
        fldetector(updates, weights=torch.ones(clients), losses=None, f=0, window=5, round=draw)
        server = draw.server
    return server, updates


def removed_ids(server):
    return torch.nonzero(server[EXCLUDED]).flatten().tolist() if EXCLUDED in server else []


def test_clients_that_only_the_prediction_exposes_are_removed():
    # Execute
    server, rows = predicted_rounds(12)
    # Assert: the attackers' rows are no outliers; their change is, against B v (its distance: |1 - pace| |A v|)
    spread = (rows - rows.median(0).values).norm(dim=1)
    assert spread[12:].max() < spread[:12].max()
    assert removed_ids(server) == [12, 13, 14, 15]


@pytest.mark.parametrize("factor", [0.0, -1.0, 3.0])
def test_without_the_right_product_those_clients_stay(monkeypatch, factor):
    # Prepare: the product zeroed (the last update as prediction), negated or tripled
    product = fld.lbfgs_product
    monkeypatch.setattr(fld, "lbfgs_product", lambda s, y, v: factor * product(s, y, v))
    # Execute
    server, _ = predicted_rounds(12)
    # Assert: the pace -1 attackers look honest (B v zeroed) or pace 3 ones do (negated, tripled): not all removed
    assert removed_ids(server) != [12, 13, 14, 15]


def test_detection_aligns_an_older_shorter_exclusion_table_to_the_scores():
    # Prepare: client 0 removed when the highest id seen was 2; since then clients up to 11 have scores
    scores = torch.full((12, 3), 0.1, dtype=torch.float64) + 0.001 * torch.arange(12.0, dtype=torch.float64)[:, None]
    scores[[9, 10, 11]] = 0.9
    server = {EXCLUDED: torch.tensor([True, False, False]), "fldetector_scores": scores}
    # Execute
    detect(server, torch.Generator().manual_seed(0), torch.device("cpu"))
    # Assert: the new outliers join the old exclusion
    assert torch.nonzero(server[EXCLUDED]).flatten().tolist() == [0, 9, 10, 11]


def test_a_direct_call_is_the_weighted_mean():
    updates = torch.tensor([[1.0, 0.0], [3.0, 2.0]])
    out = fldetector(updates, weights=torch.tensor([1.0, 3.0]), losses=None, f=0)
    assert torch.allclose(out, torch.tensor([2.5, 1.5]))


def test_the_draw_never_holds_a_removed_client_and_is_unchanged_without_one():
    sizes = np.arange(1, 21)
    excluded = np.zeros(20, dtype=bool)
    excluded[[3, 7, 15]] = True
    for t in range(30):
        plain = drawn_clients(4, "proportional", sizes, 5, t)
        assert np.array_equal(drawn_clients(4, "proportional", sizes, 5, t, np.zeros(20, dtype=bool)), plain)
        drawn = drawn_clients(4, "proportional", sizes, 5, t, excluded)
        assert len(drawn) == 5 and not excluded[drawn].any()
    assert sorted(drawn_clients(0, "uniform", sizes, 19, 0, excluded)) == sorted(set(range(20)) - {3, 7, 15})
    with pytest.raises(ValueError, match="removed every client"):
        drawn_clients(0, "uniform", sizes, 5, 0, np.ones(20, dtype=bool))


def small_config(rounds):
    return ExperimentConfig.from_dict({
        "dataset": {"name": "digits", "num_clients": 10}, "model": {"name": "mlp", "hidden": [16]}, "rounds": rounds,
        "eval_every": 2, "clients_per_round": 8, "local_steps": 2, "batch_size": 16, "lr": 0.2,
        "attack": {"name": "model_replacement", "level": 0.2},
        "aggregator": {"name": "fldetector", "window": 2, "min_scores": 2}})  # scored from round 4, removes in 7


def test_a_run_stops_drawing_removed_clients_and_resumes_to_the_uninterrupted_numbers(tmp_path):
    # Prepare: a run long enough to remove clients
    trial = build_trial(small_config(8))
    whole, _ = simulate(trial)
    removed = whole.server[EXCLUDED]
    assert bool(removed.any())
    # Execute: the same run interrupted after 5 rounds (two of them scored), saved, loaded in a new trial and finished
    _, _, resumed = run_interrupted(small_config(8), 5, tmp_path)
    # Assert: the same removals and model; a removed client is not in a later round's draw
    assert torch.equal(resumed.server[EXCLUDED], removed)
    assert torch.allclose(resumed.w, whole.w, atol=1e-5)
    later = sample_clients(trial, 8, whole.server)
    assert not removed[torch.as_tensor(later)].any()


@pytest.mark.parametrize("params, message", [
    ({"window": 0}, "window must be a whole number >= 1"), ({"min_scores": 0}, "min_scores must be a whole number >= 1"),
    ({"warmup": 10}, r"warmup must be null \(the window \+ 1 = 11 rounds .* >= window \+ 1 = 11 .* got 10"),
    ({"window": 3, "warmup": 3}, r"whole number of rounds >= window \+ 1 = 4 .*got 3"),
    ({"warmup": 20.5}, "warmup must be a whole number"),
    ({"start": 10}, r"unknown parameter\(s\) \['start'\]")])
def test_bad_fldetector_settings_fail_before_training(params, message):
    with pytest.raises(ConfigError, match=message):
        check_aggregator({"name": "fldetector", **params}, n=10, f=2)


def test_local_dp_refuses_a_rule_that_removes_devices():
    cfg = small_config(2).to_dict()
    cfg.update(sampling="uniform", attack={"name": "none"},
               privacy={"name": "local", "clip": 1.0, "noise_multiplier": 1.0})
    with pytest.raises(ConfigError, match="removes devices during the run"):
        build_trial(ExperimentConfig.from_dict(cfg))
