"""CRFL: the clipped, noised global model (a hand-checked round) and the clipped one before the noise that the run
certifies, the authors' certified bound transcribed in float64, the radius a run reports through the engine against
that transcription, tau as the local SGD steps the engine runs (devices without training data left out), a method
whose server step is not w + the rule's output refused, and bad input (a vote that cannot certify) in one line."""

import dataclasses
import math

import numpy as np
import pytest
import torch
from scipy.stats import norm

import fedarena.simulation.setup as setup
from fedarena.config import ExperimentConfig
from fedarena.datasets.base import ClientData, Split
from fedarena.errors import ConfigError
from fedarena.methods import METHODS
from fedarena.methods.aggregators import check_aggregator, make_aggregator
from fedarena.methods.aggregators.base import RoundDraw
from fedarena.methods.aggregators.crfl import (
    CLEAN_MODEL,
    certified_bound,
    certified_model,
    certified_radius,
    check_crfl_method,
    hoeffding_margin,
    local_steps_per_round,
)
from fedarena.methods.base import ServerInfo
from fedarena.models.backends import Backend
from fedarena.simulation.engine import evaluate_state, simulate
from fedarena.simulation.experiment import run_experiment
from fedarena.simulation.setup import build_trial
from fedarena.streams import AGGREGATE, keyed_seed


def authors_cal_prob_bound(pa, pb, sigma_test, epoch, params, agg_weight=None, tau=None, rho=None):
    """AI-secure/CRFL certify_mnist.py, cal_prob_bound, with its MNIST constants (tau = 60000 / N / n_B, rho_tadv =
    3, rho_t = 0.1 t + 2), or a run's ``tau`` and constant clipping bound ``rho`` where given."""
    sigma_train, eta, T = params["sigma_param"], params["lr"], epoch
    N, R = params["num_models"], len(params["adversary_list"])
    q_B, n_B, gamma = params["poisoning_per_batch"], params["batch_size"], params["scale_factor"]
    tau = 60000 / N / n_B if tau is None else tau
    rho_tadv = 3 if rho is None else rho
    L_z = math.sqrt(2 + 2 * rho_tadv + rho_tadv**2)
    agg_weight = agg_weight or [1 / N] * R
    weighted_avg = sum(w**2 for w in agg_weight[:R])
    t_adv = params["poison_epochs"][0]
    if pa == 1.0:
        return 100000
    fraction = -math.log(1 - (math.sqrt(pa) - math.sqrt(pb)) ** 2) * sigma_train**2
    denominator = 2 * R * tau**2 * L_z**2 * weighted_avg * gamma**2 * eta**2 * float(q_B**2 / n_B**2)
    contract = 1
    for _epoch in range(t_adv + 1, T):
        contract *= 2 * norm.cdf((_epoch * 0.1 + 2 if rho is None else rho) / sigma_train) - 1
    contract *= 2 * norm.cdf((T * 0.1 + 2 if rho is None else rho) / sigma_test) - 1
    return math.sqrt(fraction / (denominator * contract))


MNIST = {"sigma_param": 0.01, "lr": 0.001, "num_models": 20, "adversary_list": [1, 2], "poisoning_per_batch": 5,
         "batch_size": 100, "scale_factor": 100, "poison_epochs": [70]}


@pytest.mark.parametrize("pa, pb, sigma_test, epoch", [(0.9, 0.05, 0.01, 100), (0.6, 0.3, 0.02, 80),
                                                       (0.99, 0.001, 0.01, 75), (1.0, 0.0, 0.01, 100)])
def test_the_certified_bound_is_the_authors_cal_prob_bound(pa, pb, sigma_test, epoch):
    ours = certified_bound(pa, pb, sigma_train=0.01, sigma_test=sigma_test, eta=0.001, devices=20, attackers=2,
                           share=5 / 100, gamma=100, tau=60000 / 20 / 100, rho_adv=3,
                           rhos=[t * 0.1 + 2 for t in range(71, epoch + 1)])
    assert float(ours) == pytest.approx(authors_cal_prob_bound(pa, pb, sigma_test, epoch, MNIST), rel=1e-12)


def test_a_round_clips_the_new_model_to_rho_and_adds_the_rounds_noise():
    model = torch.tensor([3.0, 4.0, 0.0], dtype=torch.float64)  # norm 5
    updates = torch.tensor([[3.0, 4.0, 0.0], [3.0, 4.0, 0.0]], dtype=torch.float64)  # new model (6, 8, 0): norm 10
    server = {}
    draw = RoundDraw(torch.arange(2), seed=11, server=server, inputs={"model": model})
    out = make_aggregator({"name": "crfl", "clip": 5.0, "sigma": 0.1}, f=0).for_round(draw)(
        updates, torch.ones(2, dtype=torch.float64))
    noise = torch.randn(3, generator=torch.Generator().manual_seed(11), dtype=torch.float64)  # drawn in float64
    assert torch.allclose(out, torch.tensor([3.0, 4.0, 0.0], dtype=torch.float64) + 0.1 * noise - model)
    # the model the run certifies: clipped, before the noise (the authors clip, test and save, then noise)
    assert torch.equal(server[CLEAN_MODEL], torch.tensor([3.0, 4.0, 0.0], dtype=torch.float64))


BASE = {"dataset": {"name": "digits", "num_clients": 10}, "model": {"name": "mlp", "hidden": [16]}, "rounds": 4,
        "eval_every": 2, "clients_per_round": 5, "batch_size": 16, "lr": 0.2,
        "attack": {"name": "badnets", "level": 0.2}}


def trained(schedule: dict, aggregator: dict):
    trial = build_trial(ExperimentConfig.from_dict({**BASE, **schedule, "aggregator": {"name": "crfl", **aggregator}}))
    return trial, simulate(trial)[0]


def last_round_noise(trial, state) -> torch.Tensor:
    """The noise CRFL added in the last round, drawn again from that round's seed (float64)."""
    seed = keyed_seed(trial.cfg.seed, AGGREGATE, state.round - 1)
    return torch.randn(state.w.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_the_certified_model_is_the_last_rounds_model_before_its_noise():
    trial, state = trained({"local_steps": 2}, {"samples": 20})
    before = state.w.double() - 0.01 * last_round_noise(trial, state)
    pre = certified_model(state)
    assert torch.allclose(pre.double(), before, atol=1e-6) and not torch.allclose(pre, state.w, atol=1e-4)
    assert float(pre.norm()) <= 15.0 + 1e-4
    params = {"clip": 15.0, "sigma": 0.01, "test_sigma": 0.01, "samples": 20, "alpha": 0.001}
    reported = evaluate_state(trial, state)[1]["certified_radius"]
    assert reported == certified_radius(trial, pre, state.round, **params)
    assert reported != certified_radius(trial, state.w, state.round, **params)  # the noised model's differs


def test_tau_in_epoch_mode_is_the_mean_devices_local_sgd_steps_the_engine_runs(monkeypatch):
    steps = counted_steps(monkeypatch)  # per device: the steps of its plan that are active (the others change nothing)
    cfg = ExperimentConfig.from_dict({**BASE, "rounds": 1, "clients_per_round": 10, "local_epochs": 2,
                                      "attack": {"name": "none"}, "aggregator": {"name": "crfl"}})
    trial = build_trial(cfg)
    simulate(trial)
    ran = torch.cat(steps).double()
    assert len(ran) == 10 and len(set(trial.train.sizes.tolist())) > 1  # every device once; unequal devices
    assert local_steps_per_round(trial) == pytest.approx(float(ran.mean()), rel=1e-12)
    # by hand: 2 epochs of ceil(size / 16) batches each (the last one partial), the mean device's
    assert local_steps_per_round(trial) == pytest.approx(np.mean(2 * np.ceil(trial.train.sizes / 16)), rel=1e-12)


def counted_steps(monkeypatch) -> list[torch.Tensor]:
    """Each call's active local SGD steps per device, as the engine runs them (a plain MLP's fused local SGD)."""
    steps = []
    fused = Backend.local_sgd

    def counted(self, w, batches, lr):
        steps.append((batches.active > 0).sum(0))
        return fused(self, w, batches, lr)

    monkeypatch.setattr(Backend, "local_sgd", counted)
    return steps


# the engine plans the empty device's epoch with a batch of 0 samples (simulation/data.py divides by it): 0 steps
@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")
def test_tau_leaves_out_a_device_without_training_data(monkeypatch):
    # Prepare: digits with device 3's training split emptied; every device drawn, 2 local epochs
    load = setup.load_dataset

    def emptied(cfg):
        data = load(cfg)
        clients, (x, y) = list(data.clients), data.clients[3].train
        clients[3] = ClientData(Split(x[:0], y[:0]), data.clients[3].val, data.clients[3].test)
        return dataclasses.replace(data, clients=clients)

    monkeypatch.setattr(setup, "load_dataset", emptied)
    steps = counted_steps(monkeypatch)
    cfg = ExperimentConfig.from_dict({**BASE, "rounds": 1, "clients_per_round": 10, "local_epochs": 2,
                                      "sampling": "uniform", "attack": {"name": "none"}, "aggregator": {"name": "crfl"}})
    trial = build_trial(cfg)
    # Execute
    simulate(trial)
    # Assert: the empty device is drawn and runs no step; tau is the mean of the nine that step, not of all ten
    ran, sizes = torch.cat(steps).double(), trial.train.sizes
    assert sizes[3] == 0 and len(ran) == 10 and int((ran == 0).sum()) == 1
    assert local_steps_per_round(trial) == pytest.approx(float(ran[ran > 0].mean()), rel=1e-12)
    assert local_steps_per_round(trial) == pytest.approx(np.mean(2 * np.ceil(sizes[sizes > 0] / 16)), rel=1e-12)
    assert local_steps_per_round(trial) > float(ran.mean())


@pytest.mark.parametrize("schedule, aggregator", [
    ({"local_epochs": 1}, {"clip": 15.0, "sigma": 0.01}),
    ({"local_steps": 3}, {"clip": 0.2, "sigma": 0.1}),  # rho / sigma = 2: each round's contraction factor counts
])
def test_the_radius_a_run_reports_is_the_authors_bound_for_its_facts(schedule, aggregator):
    """With test noise 1e-6 every vote is unanimous, p_A = 1 - h and p_B = h (Hoeffding's h): the run's radius is
    then the authors' bound for the run's facts times the share of benign test samples the pre-noise model gets
    right, all computed here from the config."""
    trial, state = trained(schedule, {**aggregator, "samples": 20, "test_sigma": 1e-6})
    reported = evaluate_state(trial, state)[1]["certified_radius"]  # the engine's own certification call
    h = math.sqrt(math.log(1 / 0.001) / 2 / 20)
    sizes = trial.train.sizes
    tau = float(np.mean(np.ceil(sizes / 16))) if "local_epochs" in schedule else 3.0
    run = {"sigma_param": aggregator["sigma"], "lr": 0.2, "num_models": 5, "adversary_list": [0],  # R = f = 1
           "poisoning_per_batch": 8, "batch_size": 16, "scale_factor": 1, "poison_epochs": [1]}  # q_B / n_B = 0.5
    bound = authors_cal_prob_bound(1 - h, h, 1e-6, state.round, run, tau=tau, rho=aggregator["clip"])
    benign = ~torch.as_tensor(trial.threat.malicious)[trial.test.owner]
    before = (state.w.double() - aggregator["sigma"] * last_round_noise(trial, state)).to(state.w)
    right = trial.model.forward(before, trial.test.x[benign]).argmax(-1) == trial.test.y[benign]
    assert trial.aggregate.f == 1 and 0 < float(right.double().mean()) < 1
    assert reported == pytest.approx(bound * float(right.double().mean()), rel=1e-9)


def test_a_run_reports_its_certified_radius_and_a_plain_run_none():
    base = {**BASE, "local_steps": 2}
    certified = run_experiment(ExperimentConfig.from_dict({**base, "aggregator": {"name": "crfl", "samples": 20}}))
    plain = run_experiment(ExperimentConfig.from_dict(base))
    assert certified["final"]["certified_radius"] > 0 and "certified_radius" not in plain["final"]
    # more training noise, a larger radius: the bound grows with the noise the attacker's change must beat
    louder = run_experiment(ExperimentConfig.from_dict(
        {**base, "aggregator": {"name": "crfl", "samples": 20, "sigma": 0.02, "test_sigma": 0.01}}))
    assert louder["final"]["certified_radius"] > certified["final"]["certified_radius"]


@pytest.mark.parametrize("params, message", [
    ({"clip": 0.0}, "crfl needs clip > 0"), ({"sigma": -1.0}, "sigma > 0"), ({"test_sigma": 0.0}, "test_sigma > 0"),
    ({"samples": 0}, "samples >= 1"), ({"alpha": 1.5}, "0 < alpha < 1"),
])
def test_bad_crfl_settings_fail_before_training(params, message):
    with pytest.raises(ConfigError, match=message):
        check_aggregator({"name": "crfl", **params}, n=10, f=2)


@pytest.mark.parametrize("samples, alpha, refused", [(13, 0.001, True), (14, 0.001, False), (1, 0.5, True),
                                                     (2, 0.5, False), (5, 0.05, True), (6, 0.05, False),
                                                     (2, math.exp(-1), True), (3, math.exp(-1), False)])  # h = 0.5
def test_a_vote_too_small_to_certify_fails_before_training(samples, alpha, refused):
    # the Hoeffding margin h: p_A <= 1 - h and p_B >= h, so h >= 0.5 (samples <= 2 ln(1 / alpha)) certifies nothing
    assert (hoeffding_margin(samples, alpha) >= 0.5) == refused == (samples <= 2 * math.log(1 / alpha))
    params = {"name": "crfl", "samples": samples, "alpha": alpha}
    if not refused:
        check_aggregator(params, n=10, f=2)
        return
    least = math.floor(2 * math.log(1 / alpha)) + 1
    with pytest.raises(ConfigError, match=rf"Hoeffding margin .* must be below 0.5 .* samples must be >= {least}; "
                                          rf"got samples={samples}$"):
        check_aggregator(params, n=10, f=2)


def test_the_largest_vote_refused_certifies_nothing_and_the_smallest_allowed_does():
    # the smallest vote refused at alpha 0.001 (13 samples) gives every test sample radius 0, even unanimous ones
    trial, state = trained({"local_steps": 2}, {"samples": 20})
    params = {"clip": 15.0, "sigma": 0.01, "test_sigma": 1e-6, "alpha": 0.001}
    assert certified_radius(trial, certified_model(state), state.round, samples=13, **params) == 0.0
    assert certified_radius(trial, certified_model(state), state.round, samples=14, **params) > 0.0


def server_step_adds_the_rules_output(name: str) -> bool:
    """Whether method ``name``'s server step, given a rule that returns c, returns w + c (six clients, three drawn)."""
    gen = torch.Generator().manual_seed(0)
    w, c, updates = (torch.randn(*shape, generator=gen, dtype=torch.float64) for shape in ((5,), (5,), (3, 5)))
    method = METHODS.get(name)()
    clients = method.init_clients(w, np.full(6, 10))
    losses = 0.5 + torch.rand(3, generator=gen, dtype=torch.float64)
    info = ServerInfo(torch.ones(3, dtype=torch.float64), losses, torch.tensor([0, 2, 4]), 0.1)
    new, _ = method.server_step(w, clients, updates, info, lambda *args, **kwargs: c)
    return torch.allclose(new, w + c)


@pytest.mark.parametrize("name", [name for name in METHODS.names() if METHODS.get(name).uses_aggregator])
def test_crfl_refuses_a_method_whose_server_step_is_not_w_plus_the_rules_output(name):
    # the declaration is the method's server step (L2SGD: w + (n/K) times the rule's output; q-FFL, TERM, AFL and
    # FedTilt reweight the updates the rule sees, and add its output)
    cls = METHODS.get(name)
    assert cls.adds_aggregate == server_step_adds_the_rules_output(name) == (name != "l2sgd")
    if cls.adds_aggregate:
        check_crfl_method(cls())
        return
    with pytest.raises(ConfigError, match=r"^crfl certifies w \+ its output as the global model, but the server step "
                                          r"of method 'l2sgd' is not w \+ the rule's output; use crfl with afl, apfl, "
                                          r".*global, .*qffl, .*term$"):
        check_crfl_method(cls())


def test_a_method_whose_server_step_is_not_w_plus_the_rules_output_is_refused_before_the_run():
    from fedarena.config import ExperimentConfig
    from fedarena.errors import ConfigError
    from fedarena.sections import check_planned_server_rule
    from fedarena.simulation.setup import build_trial

    cfg = ExperimentConfig.from_dict({"dataset": {"name": "digits", "num_clients": 10}, "rounds": 2,
                                      "clients_per_round": 5, "method": {"name": "l2sgd"},
                                      "aggregator": {"name": "crfl"}})
    for check in (check_planned_server_rule, build_trial):
        with pytest.raises(ConfigError, match="server step of method 'l2sgd' is not w \\+ the rule's output"):
            check(cfg)


def test_crfl_on_a_task_without_classes_is_refused_before_training():
    # its certificate votes over class predictions: a regression run used to train, then fail at its first
    # evaluation (topk of 2 over 1 class)
    cfg = ExperimentConfig.from_dict({"dataset": {"name": "point_estimation"}, "aggregator": {"name": "crfl"},
                                      "rounds": 2, "clients_per_round": 5})
    with pytest.raises(ConfigError) as err:
        build_trial(cfg)
    assert str(err.value) == ("aggregator 'crfl' is defined for classification tasks; dataset 'point_estimation' is "
                              "a regression task")
