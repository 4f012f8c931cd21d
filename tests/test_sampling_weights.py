"""A client's size counts exactly once: by size-proportional sampling, or by the aggregation weights.

Under proportional sampling (Ditto Algorithm 2) the server must not weight by sample counts again; under
uniform sampling a weighted rule weights by them. Methods with their own client weighting (TERM, q-FFL,
AFL, FedTilt) combine it with the rule without multiplying sizes in twice.
"""

import dataclasses

import numpy as np
import pytest
import torch

from fedarena.methods.aggregators import make_aggregator
from fedarena.simulation.engine import initial_state, run_round, sample_clients
from fedarena.simulation.setup import aggregation_weights, build_trial


class RecordingRule:
    """Wraps the trial's aggregator and keeps the weights, client weights and updates of every call."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def __call__(self, updates, weights, losses=None, client_weights=None):
        self.calls.append((weights.clone(), client_weights, updates.clone()))
        return self.inner(updates, weights, losses, client_weights=client_weights)

    def for_round(self, draw):
        self.inner = self.inner.for_round(draw)
        return self

    @property
    def needs_round(self):
        return self.inner.needs_round

    @property
    def needs_losses(self):
        return self.inner.needs_losses


def weights_seen(trial):
    """(aggregation weights the server saw in round 0, training sizes of the clients it sampled)."""
    recorder = RecordingRule(trial.aggregate)
    run_round(dataclasses.replace(trial, aggregate=recorder), initial_state(trial))
    sizes = trial.train.sizes[sample_clients(trial, 0)]
    return recorder.calls[0][0].numpy(), sizes


@pytest.mark.parametrize("rule", ["weighted_mean", "geometric_median"])
def test_proportional_sampling_gives_the_server_equal_weights(small_config, rule):
    trial = build_trial(small_config(aggregator={"name": rule}, sampling="proportional", rounds=1))
    seen, sizes = weights_seen(trial)
    assert len(set(sizes.tolist())) > 1  # the sampled clients differ in size ...
    assert np.all(seen == 1.0)  # ... and yet each counts once: the sampling already weighed their sizes


def test_uniform_sampling_gives_the_server_the_sample_counts(small_config):
    trial = build_trial(small_config(aggregator={"name": "weighted_mean"}, sampling="uniform", rounds=1))
    seen, sizes = weights_seen(trial)
    assert seen.tolist() == sizes.astype(float).tolist()


def test_weighted_mean_equals_mean_under_proportional_sampling(small_config):
    # Prepare: the same run with the uniform and the weighted mean (clients of very different sizes)
    runs = {rule: build_trial(small_config(aggregator={"name": rule}, sampling="proportional", rounds=1))
            for rule in ("mean", "weighted_mean")}
    recorders = {rule: RecordingRule(trial.aggregate) for rule, trial in runs.items()}
    # Execute
    after = {rule: run_round(dataclasses.replace(trial, aggregate=recorders[rule]), initial_state(trial)).w
             for rule, trial in runs.items()}
    # Assert: the same global models up to float32 rounding, i.e. no size weighting on top of the sampling.
    # sum(u) / n and (1/n, ..., 1/n) @ u are not the same float32 operations (their last bits differ on some
    # CPUs): each is within (gamma_n + u) mean_i |u_i| of the exact mean (n terms summed in any order, gamma_n =
    # n u / (1 - n u), plus rounding 1/n or the division), and w + mean rounds once more (u |w|); u = 2^-24.
    # Both sides' deviations add up; doubled again as slack for second-order terms.
    updates = recorders["mean"].calls[0][2]
    assert torch.equal(updates, recorders["weighted_mean"].calls[0][2])  # the same round until the server step
    n, u = len(updates), torch.finfo(torch.float32).eps / 2
    bound = 4 * ((n * u / (1 - n * u) + u) * updates.abs().mean(0) + u * after["mean"].abs())
    assert bool(((after["mean"] - after["weighted_mean"]).abs() <= bound).all())
    # ... a bound that weighting by size (which the sampling already did) would break
    sizes = torch.as_tensor(runs["mean"].train.sizes[sample_clients(runs["mean"], 0)], dtype=updates.dtype)
    assert bool(((updates.mean(0) - sizes @ updates / sizes.sum()).abs() > 100 * bound).any())


def test_aggregation_weights_by_sampling():
    sizes = np.array([5, 50, 500])
    assert aggregation_weights("proportional", sizes).tolist() == [1.0, 1.0, 1.0]
    assert aggregation_weights("uniform", sizes).tolist() == [5.0, 50.0, 500.0]


UPDATES = torch.tensor([[2.0, 0.0], [0.0, 4.0], [6.0, 6.0]], dtype=torch.float64)
SIZES = torch.tensor([1.0, 1.0, 2.0], dtype=torch.float64)
P = torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64)


def test_client_weights_on_the_uniform_mean_give_the_p_weighted_sum():
    out = make_aggregator({"name": "mean"}, f=0)(UPDATES, SIZES, None, client_weights=P)
    assert out.tolist() == [0.5 * 2 + 0.25 * 6, 0.25 * 4 + 0.25 * 6]  # [2.5, 2.5]: sizes unused by 'mean'


def test_client_weights_on_a_weighted_rule_multiply_sizes_in_once():
    # a_i p_i = [0.5, 0.25, 0.5] -> normalised [0.4, 0.2, 0.4]: [0.8 + 2.4, 0.8 + 2.4]
    out = make_aggregator({"name": "weighted_mean"}, f=0)(UPDATES, SIZES, None, client_weights=P)
    assert torch.allclose(out, torch.tensor([3.2, 3.2], dtype=torch.float64))


def test_client_weights_keep_an_unnormalised_step_on_a_weighted_rule():
    # q-FFL's p carries its step size (sum 0.5 here): weighted rule = 0.5 * the a p-weighted mean
    half = P / 2
    out = make_aggregator({"name": "weighted_mean"}, f=0)(UPDATES, SIZES, None, client_weights=half)
    assert torch.allclose(out, torch.tensor([1.6, 1.6], dtype=torch.float64))


@pytest.mark.parametrize("method", [{"name": "term", "t": 1.0}, {"name": "qffl", "q": 1.0},
                                    {"name": "afl"}, {"name": "fedtilt", "q": 0.5}])
def test_fair_methods_on_a_weighted_rule_equal_the_uniform_mean_under_proportional_sampling(small_config, method):
    runs = {rule: build_trial(small_config(method=method, aggregator={"name": rule}, rounds=1))
            for rule in ("mean", "weighted_mean")}
    after = {rule: run_round(trial, initial_state(trial)).w for rule, trial in runs.items()}
    assert torch.allclose(after["mean"], after["weighted_mean"], rtol=1e-5, atol=1e-6)
