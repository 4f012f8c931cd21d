"""DeepSight, exactly (the mutation score of ``methods/aggregators/deepsight.py``: docs/testing.md): its settings'
defaults, least and largest accepted values and each refusal word for word; the NEUPs of squared update energies
normalised to sum 1 (a tiny update too) and threshold exceedings counted strictly above the bound; the division
differences of the local model global + update; HDBSCAN's labels with each noise point given a cluster of its own,
numbered after HDBSCAN's; which clusters are accepted (suspicion at exactly half the median, a cluster at exactly tau
suspicious, the bias view's precomputed distances, the final clustering on the precomputed ensemble allowing a single
cluster); the registry entry; the round inputs it needs; and no accepted update leaving the model where it is."""

import inspect
import math

import numpy as np
import pytest
import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators import AGGREGATORS
from fedarena.methods.aggregators.base import RoundDraw
from fedarena.methods.aggregators.builder import check_aggregator
from fedarena.methods.aggregators.deepsight import (
    accepted_rows,
    check_deepsight,
    cluster_labels,
    deepsight,
    division_differences,
    neups_and_exceedings,
)
from fedarena.methods.aggregators.probe import Probe
from fedarena.models.functional import FlatModel

F64 = torch.float64


def linear_probe(classes=4, inputs=3):
    """A linear model's probe (parameters: the [classes, inputs] weight, then the [classes] bias)."""
    model = FlatModel(torch.nn.Linear(inputs, classes).double(), "classification")
    return Probe(model, (inputs,), -1.0, 1.0, seed=0, device=torch.device("cpu"))


def refusal(**params):
    with pytest.raises(ConfigError) as err:
        check_deepsight(10, 2, **params)
    return str(err.value)


# --- settings -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fn", [check_deepsight, deepsight])
def test_the_defaults_are_3_noise_sets_of_20000_inputs_tau_a_third_and_threshold_0_01(fn):
    params = inspect.signature(fn).parameters
    assert params["seeds"].default == 3 and params["samples"].default == 20000
    assert params["tau"].default == 1 / 3 and params["threshold"].default == 0.01


def test_the_default_settings_pass_their_own_check():
    check_deepsight(10, 2)
    check_aggregator({"name": "deepsight"}, n=10, f=2)


def test_the_least_settings_pass():
    check_deepsight(1, 0, seeds=1, samples=1, tau=1e-12, threshold=0.0)


def test_the_largest_settings_pass():
    check_deepsight(10, 2, seeds=8, samples=10**9, tau=1.0, threshold=1.0)


@pytest.mark.parametrize("name, value, shown", [
    ("seeds", 0, "0"), ("seeds", 9, "9"), ("seeds", True, "True"), ("seeds", 2.5, "2.5"), ("seeds", 3.0, "3.0"),
])
def test_seeds_outside_1_to_8_or_not_a_whole_number_are_refused_in_words(name, value, shown):
    assert refusal(**{name: value}) == f"deepsight's seeds must be a whole number >= 1 and <= 8, got {shown}"


@pytest.mark.parametrize("value, shown", [(0, "0"), (-1, "-1"), (True, "True"), (100.0, "100.0")])
def test_samples_below_1_or_not_a_whole_number_are_refused_in_words_without_an_upper_bound(value, shown):
    assert refusal(samples=value) == f"deepsight's samples must be a whole number >= 1, got {shown}"


@pytest.mark.parametrize("tau, threshold", [(0.0, 0.01), (1.5, 0.01), (-0.5, 0.01), (0.5, -0.1), (0.5, 1.5)])
def test_tau_outside_0_1_or_threshold_outside_0_1_is_refused_in_words(tau, threshold):
    assert refusal(tau=tau, threshold=threshold) == (
        f"deepsight needs 0 < tau <= 1 and 0 <= threshold <= 1; got tau={tau}, threshold={threshold}")


# --- NEUPs and threshold exceedings ----------------------------------------------------------------------------------

def test_neups_are_the_squared_energies_normalised_to_sum_one():
    # energies |b_k| + sum_j |W_kj|: class 0: 0 + 0.5 + 0.5 = 1, class 1: 1 + 1 + 0 = 2; squared 1 and 4 -> 1/5, 4/5
    weight = torch.tensor([[[0.5, -0.5], [-1.0, 0.0]]], dtype=F64)
    bias = torch.tensor([[0.0, -1.0]], dtype=F64)
    neups, exceedings = neups_and_exceedings(weight, bias, threshold=0.01)
    np.testing.assert_allclose(neups, [[0.2, 0.8]], rtol=1e-15, atol=0)
    assert exceedings.tolist() == [1]  # bound max(0.01, 1/2) x 0.8 = 0.4: only 0.8 exceeds it


def test_a_tiny_update_still_normalises_to_sum_one():
    # energy (1.2e-150)^2 = 1.44e-300, a normal float64: normalised, the one class holds all of it
    bias = torch.tensor([[1.2e-150, 0.0]], dtype=F64)
    neups, _ = neups_and_exceedings(torch.zeros(1, 2, 3, dtype=F64), bias, threshold=0.01)
    assert neups.tolist() == [[1.0, 0.0]]


def test_a_zero_update_has_zero_neups_and_no_exceeding():
    neups, exceedings = neups_and_exceedings(torch.zeros(1, 3, 2, dtype=F64), torch.zeros(1, 3, dtype=F64), 0.01)
    assert neups.tolist() == [[0.0, 0.0, 0.0]] and exceedings.tolist() == [0]


def test_a_neup_exactly_at_the_bound_does_not_exceed_it():
    # bias 2, 1, 0, 0: energies 4, 1, 0, 0 -> 0.8, 0.2, 0, 0; bound max(0.01, 1/4) x 0.8 = 0.2 exactly
    neups, exceedings = neups_and_exceedings(torch.zeros(1, 4, 2, dtype=F64),
                                             torch.tensor([[2.0, 1.0, 0.0, 0.0]], dtype=F64), threshold=0.01)
    assert neups[0, 1] == 0.25 * neups[0, 0]
    assert exceedings.tolist() == [1]


def test_threshold_one_puts_the_bound_at_the_largest_neup_which_none_exceeds():
    neups, exceedings = neups_and_exceedings(torch.zeros(2, 3, 2, dtype=F64),
                                             torch.tensor([[1.0, 1.0, 1.0], [3.0, 1.0, 0.0]], dtype=F64), 1.0)
    assert exceedings.tolist() == [0, 0]


# --- division differences ---------------------------------------------------------------------------------------------

def test_division_differences_run_the_local_model_global_plus_update():
    # a zero global model (every class 1/4 on any input) and an update raising class 0's bias by 1: the local model
    # gives e / (e + 3) to class 0 and 1 / (e + 3) to the others, on every input
    probe = linear_probe()
    u = torch.zeros(1, probe.model.dim, dtype=F64)
    u[0, 12] = 1.0  # class 0's bias (after the 4 x 3 weight)
    ddif = division_differences(probe, torch.zeros(probe.model.dim, dtype=F64), u, seeds=2, samples=5)
    e = math.e
    expected = np.array([e, 1.0, 1.0, 1.0]) / (e + 3) / (0.25 + 1e-6)
    assert ddif.shape == (2, 1, 4)
    np.testing.assert_allclose(ddif[0, 0], expected, rtol=1e-12)
    np.testing.assert_allclose(ddif[1, 0], expected, rtol=1e-12)


# --- HDBSCAN's labels, noise each its own cluster --------------------------------------------------------------------

def test_one_model_is_one_cluster():
    assert cluster_labels(np.zeros((1, 3))).tolist() == [0]


def test_two_models_are_no_cluster_each_is_its_own():
    # a pair is HDBSCAN's root itself, never selected unless a single cluster is allowed: both noise
    assert cluster_labels(np.array([[0.0], [10.0]])).tolist() == [0, 1]
    assert cluster_labels(np.array([[0.0], [10.0]]), single=True).tolist() == [0, 0]


def test_equally_spaced_models_are_one_cluster_only_where_a_single_cluster_is_allowed():
    # 0, 1, 2: both links at distance 1, all three join at once: no split, so by default every model is noise
    points = np.array([[0.0], [1.0], [2.0]])
    assert cluster_labels(points).tolist() == [0, 1, 2]
    assert cluster_labels(points, single=True).tolist() == [0, 0, 0]


def test_noise_points_get_new_labels_after_hdbscans_clusters():
    # two tight pairs (HDBSCAN's clusters 0 and 1) and far lone points (noise): the lone ones numbered 2, 3, ...
    assert cluster_labels(np.array([[0.0], [0.1], [10.0], [10.1], [50.0]])).tolist() == [0, 0, 1, 1, 2]
    assert cluster_labels(np.array([[0.0], [0.1], [10.0], [10.1], [50.0], [200.0]])).tolist() == [0, 0, 1, 1, 2, 3]


def test_precomputed_distances_are_read_as_distances():
    # the same two pairs and a lone point as a distance matrix
    x = np.array([0.0, 0.1, 10.0, 10.1, 50.0])
    assert cluster_labels(np.abs(x[:, None] - x[None, :]), precomputed=True).tolist() == [0, 0, 1, 1, 2]


# --- accepted clusters -----------------------------------------------------------------------------------------------

def grouped(groups, dims):
    """Points identical within a group, groups at orthonormal unit vectors (each a group of its own)."""
    out = np.zeros((sum(len(g) for g in groups), dims))
    for k, g in enumerate(groups):
        out[list(g), k] = 1.0
    return out


# five models in two groups, A = 0, 1, 2 and B = 3, 4, alike in every view: the final clusters are A and B
A_B = grouped([(0, 1, 2), (3, 4)], 2)


def accepted_two_groups(exceedings, tau):
    return accepted_rows(A_B, np.array(exceedings), A_B[None], torch.tensor(A_B), tau).tolist()


def test_exceedings_at_exactly_half_the_median_are_suspicious_and_a_third_of_a_cluster_is_too_many():
    # median 2: model 0 (1 <= 2 / 2) is suspicious; cluster A holds 1 of 3, not fewer than tau = 1/3 of them
    assert accepted_two_groups([1, 2, 2, 2, 2], 1 / 3) == [False, False, False, True, True]


def test_a_cluster_with_fewer_than_tau_suspicious_models_is_accepted():
    # 1 of 3 suspicious < tau = 1/2 of 3
    assert accepted_two_groups([1, 2, 2, 2, 2], 0.5) == [True] * 5


def test_exceedings_above_half_the_median_are_not_suspicious():
    assert accepted_two_groups([3, 4, 4, 4, 4], 1 / 3) == [True] * 5
    assert accepted_two_groups([4, 4, 4, 0, 4], 1 / 3) == [True, True, True, False, False]


def test_identical_models_are_one_final_cluster():
    # in each view identical models are all noise (each its own cluster), so every pair is parted in every view: the
    # ensemble is 1 everywhere, and the final clustering (a single cluster allowed) takes all four as one cluster,
    # where the one suspicious model (0 <= 2 / 2) is fewer than a third of four
    same = np.ones((4, 3))
    out = accepted_rows(same, np.array([2, 2, 2, 0]), same[None], torch.ones(4, 3, dtype=F64), 1 / 3)
    assert out.tolist() == [True] * 4


def test_the_bias_view_clusters_its_cosine_distances_as_distances():
    # biases a = b = e1, c = e2, d = e3: cosine distances 0 (a, b) and 1 for every other pair, so all join at 1 at
    # once: no cluster, each model its own. NEUPs all alike (each its own too), DDifs in pairs {a, b}, {c, d}: the
    # ensemble is 2/3 within the pairs and 1 across, where the root's stability (4 x 1) beats the pairs' (2 x (3/2 - 1)
    # each): one final cluster, whose one suspicious model (d) is fewer than a third of four
    eye = torch.eye(3, dtype=F64)
    bias = torch.stack([eye[0], eye[0], eye[1], eye[2]])
    ddifs = grouped([(0, 1), (2, 3)], 2)[None]
    out = accepted_rows(np.ones((4, 2)), np.array([2, 2, 2, 0]), ddifs, bias, 1 / 3)
    assert out.tolist() == [True] * 4


def test_the_final_clustering_reads_the_ensemble_as_distances():
    # NEUPs five orthonormal vectors (all equidistant: each its own cluster); DDifs and biases in groups {1, 2},
    # {0, 3}, {4}: the ensemble is 1/3 within the two pairs and 1 elsewhere; the pairs' stability (2 x (3 - 1) each)
    # beats the root's (5 x 1): final clusters {1, 2}, {0, 3} and model 4 alone, which is suspicious (0 <= 2 / 2)
    views = grouped([(1, 2), (0, 3), (4,)], 5)
    out = accepted_rows(np.eye(5), np.array([2, 2, 2, 2, 0]), views[None], torch.tensor(views), 1 / 3)
    assert out.tolist() == [True, True, True, True, False]


# --- the rule ----------------------------------------------------------------------------------------------------------

def test_registry_entry_reads_the_round_its_model_and_probe_at_version_2():
    entry = AGGREGATORS.get("deepsight")
    assert entry.rule is deepsight and entry.check is check_deepsight
    assert entry.reads == ("round", "model", "probe")
    assert AGGREGATORS.version("deepsight") == 2


@pytest.mark.parametrize("inputs", ["probe", "model"])
def test_a_round_missing_either_the_model_or_the_probe_is_refused_in_words(inputs):
    probe = linear_probe()
    given = {"probe": probe, "model": torch.zeros(probe.model.dim, dtype=F64)}
    draw = RoundDraw(torch.arange(3), inputs={inputs: given[inputs]})
    with pytest.raises(ConfigError) as err:
        deepsight(torch.ones(3, probe.model.dim, dtype=F64), weights=torch.ones(3), losses=None, f=0, round=draw)
    assert str(err.value) == ("aggregator 'deepsight' runs the clients' models on the server: it needs the round's "
                              "global model and its probe (round inputs 'model' and 'probe')")


def test_no_accepted_update_leaves_the_model_where_it_is():
    # zero updates: no exceeding, so every model is suspicious (0 <= median 0 / 2) and no cluster is accepted
    probe = linear_probe()
    draw = RoundDraw(torch.arange(4), inputs={"probe": probe, "model": torch.zeros(probe.model.dim, dtype=F64)})
    out = deepsight(torch.zeros(4, probe.model.dim, dtype=F64), weights=torch.ones(4), losses=None, f=0, seeds=1,
                    samples=4, round=draw)
    assert out.shape == (probe.model.dim,) and out.dtype == F64 and bool((out == 0).all())
