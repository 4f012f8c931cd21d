"""FLDetector: the authors' L-BFGS product transcribed in float64, exact 1-D k-means, the gap statistic's verdicts,
a unique answer (an honest cluster and clear outliers), the engine never drawing a removed client again, a resume
to the uninterrupted numbers, and bad input in one line."""

import numpy as np
import pytest
import torch
from resume import run_interrupted

from fedarena.config import ExperimentConfig
from fedarena.errors import ConfigError
from fedarena.methods.aggregators import EXCLUDED, RoundDraw, check_aggregator
from fedarena.methods.aggregators.fldetector import (
    attack_detected,
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


def quadratic_rounds(rounds, seed=0, clients=12, bad=(9, 10, 11)):
    """Rounds of the rule on a quadratic: honest updates one step towards the optimum (plus a little noise), the
    ``bad`` rows a fresh random vector each round; returns the server's state."""
    gen = torch.Generator().manual_seed(seed)
    curvature = torch.diag(torch.linspace(0.2, 1.0, 6, dtype=torch.float64))
    optimum, w, server = torch.randn(6, generator=gen, dtype=torch.float64), torch.zeros(6, dtype=torch.float64), {}
    for t in range(rounds):
        updates = -0.5 * (w - optimum) @ curvature + 0.01 * torch.randn(clients, 6, generator=gen, dtype=torch.float64)
        updates[list(bad)] = 0.5 * torch.randn(len(bad), 6, generator=gen, dtype=torch.float64)
        draw = RoundDraw(torch.arange(clients), seed=t, ids=torch.arange(clients), server=dict(server), model=w)
        w = w + fldetector(updates, weights=torch.ones(clients), losses=None, f=0, window=5, start=3, round=draw)
        server = draw.server
    return server


def test_the_inconsistent_clients_and_only_they_are_removed_once():
    server = quadratic_rounds(6)
    assert torch.nonzero(server[EXCLUDED]).flatten().tolist() == [9, 10, 11]
    # detection ends at the first attack found (as the authors'): later rounds remove no honest client
    later = quadratic_rounds(30)
    assert torch.nonzero(later[EXCLUDED]).flatten().tolist() == [9, 10, 11] and bool(later["fldetector_detected"])


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
        "aggregator": {"name": "fldetector", "start": 2, "min_scores": 1}})


def test_a_run_stops_drawing_removed_clients_and_resumes_to_the_uninterrupted_numbers(tmp_path):
    # Prepare: a run long enough to remove clients
    trial = build_trial(small_config(8))
    whole, _ = simulate(trial)
    removed = whole.server[EXCLUDED]
    assert bool(removed.any())
    # Execute: the same run interrupted after 4 rounds, saved, loaded in a new trial and finished
    _, _, resumed = run_interrupted(small_config(8), 4, tmp_path)
    # Assert: the same removals and model; a removed client is not in a later round's draw
    assert torch.equal(resumed.server[EXCLUDED], removed)
    assert torch.allclose(resumed.w, whole.w, atol=1e-5)
    later = sample_clients(trial, 8, whole.server)
    assert not removed[torch.as_tensor(later)].any()


@pytest.mark.parametrize("params, message", [({"window": 0}, "window must be a whole number >= 1"),
                                             ({"start": 1.5}, "start must be a whole number"), ({"start": 0}, "start must be a whole number >= 1"),
                                             ({"min_scores": 0}, "min_scores must be a whole number >= 1")])
def test_bad_fldetector_settings_fail_before_training(params, message):
    with pytest.raises(ConfigError, match=message):
        check_aggregator({"name": "fldetector", **params}, n=10, f=2)


def test_local_dp_refuses_a_rule_that_removes_devices():
    cfg = small_config(2).to_dict()
    cfg.update(sampling="uniform", attack={"name": "none"},
               privacy={"name": "local", "clip": 1.0, "noise_multiplier": 1.0})
    with pytest.raises(ConfigError, match="removes devices during the run"):
        build_trial(ExperimentConfig.from_dict(cfg))
