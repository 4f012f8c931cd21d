"""CRFL, exactly (the mutation score of ``methods/aggregators/crfl.py``: docs/testing.md): each function against its
formula, computed here from the paper's Theorem 2 and Hoeffding's bound (math.erf for 2 Phi(x) - 1), with every
contraction factor below 1 so that a factor divided or dropped shows (at the defaults each is exactly 1 in
float64); the vote's bounds on a scripted vote (a model whose prediction in each smoothed copy is written in its
input), the edges of the settings check and its errors word for word, the rule's clip on both sides of the bound
and its registry entry. Nothing trains: a fake trial carries only what certification reads."""

import inspect
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedarena.errors import ConfigError
from fedarena.methods import METHODS
from fedarena.methods.aggregators import check_aggregator, make_aggregator
from fedarena.methods.aggregators.base import AGGREGATORS, RoundDraw
from fedarena.methods.aggregators.crfl import (
    attack_reach,
    bound_denominator,
    certified_bound,
    certified_model,
    certified_radius,
    certify_crfl,
    check_crfl,
    check_crfl_method,
    contraction_rhos,
    crfl,
    hoeffding_margin,
    vote_bounds,
)

F64 = torch.float64
H_QUARTER = math.exp(-0.5)  # alpha where Hoeffding's margin at 4 samples is 0.25 exactly in float64
H_HALF = math.exp(-1)  # alpha where the margin at 2 samples is 0.5 exactly in float64


def phi_factor(rho: float, sigma: float) -> float:
    """A round's contraction factor 2 Phi(rho / sigma) - 1 = erf(rho / (sigma sqrt 2))."""
    return math.erf(rho / sigma / math.sqrt(2))


def theorem2_radius(pa, pb, *, sigma, test_sigma, eta, devices, attackers, share, gamma, tau, rho, rounds):
    """Xie et al.'s Theorem 2 radius (certify_mnist.py's cal_prob_bound) with a constant clip rho, the attack in
    round 1 of ``rounds`` and each attacker weighted 1 / devices; 100000 for p_A = 1, 0 for p_A <= p_B."""
    if pa == 1.0:
        return 100000.0
    gap = max(math.sqrt(pa) - math.sqrt(pb), 0.0)
    reach = (2 * attackers * tau**2 * (2 + 2 * rho + rho**2) * attackers / devices**2 * gamma**2 * eta**2
             * share**2)
    contraction = phi_factor(rho, sigma) ** max(rounds - 2, 0) * phi_factor(rho, test_sigma)
    return math.sqrt(-math.log(1 - gap**2) * sigma**2 / (reach * contraction))


# --- Hoeffding's margin and the settings check --------------------------------------------------------------------

@pytest.mark.parametrize("samples, alpha", [(100, 0.001), (14, 0.001), (1000, 0.05), (3, 0.5)])
def test_the_hoeffding_margin_is_sqrt_ln_1_over_alpha_over_2_samples(samples, alpha):
    assert hoeffding_margin(samples, alpha) == pytest.approx(math.sqrt(math.log(1 / alpha) / (2 * samples)),
                                                             rel=1e-14)


def test_the_alphas_these_tests_use_give_margins_exactly_a_quarter_and_a_half():
    assert hoeffding_margin(4, H_QUARTER) == 0.25 and hoeffding_margin(2, H_HALF) == 0.5


def settings_error(**params) -> str:
    with pytest.raises(ConfigError) as err:
        check_aggregator({"name": "crfl", **params}, n=10, f=2)
    return str(err.value)


@pytest.mark.parametrize("params", [{"clip": 0.5}, {"sigma": 0.5}, {"test_sigma": 0.5}, {"test_sigma": None},
                                    {"samples": 1, "alpha": 0.7}, {"samples": 3, "alpha": H_HALF},
                                    {"samples": 14, "alpha": 0.001}, {}])
def test_settings_inside_every_bound_pass(params):
    # clip, sigma and test_sigma below 1 are fine; one sample at alpha 0.7 has margin 0.42 < 0.5
    check_aggregator({"name": "crfl", **params}, n=10, f=2)


@pytest.mark.parametrize("params", [{"clip": 0.0}, {"clip": -1.0}, {"sigma": 0.0}, {"sigma": -0.5},
                                    {"test_sigma": 0.0}, {"test_sigma": -1.0}])
def test_a_noise_or_clip_not_above_zero_is_refused_in_words(params):
    given = {"clip": 15.0, "sigma": 0.01, "test_sigma": None, **params}
    assert settings_error(**params) == (
        f"crfl needs clip > 0, sigma > 0 and test_sigma > 0 (or null: sigma); got clip={given['clip']}, "
        f"sigma={given['sigma']}, test_sigma={given['test_sigma']}")


@pytest.mark.parametrize("params", [{"samples": 0}, {"samples": True, "alpha": 0.7}, {"samples": 2.0},
                                    {"alpha": 0.0}, {"alpha": 1.0}, {"alpha": 1.5}, {"alpha": -0.1}])
def test_a_vote_size_not_whole_or_an_alpha_outside_0_1_is_refused_in_words(params):
    # called directly: a config's section refuses a bool or a fraction for samples (and makes 2.0 the int 2) first;
    # True at alpha 0.7 would pass the margin's check as one sample (margin 0.42)
    given = {"samples": 100, "alpha": 0.001, **params}
    with pytest.raises(ConfigError) as err:
        check_crfl(10, 2, **params)
    assert str(err.value) == (f"crfl votes with samples >= 1 smoothed models at confidence 1 - alpha, 0 < alpha < 1; "
                              f"got samples={given['samples']!r}, alpha={given['alpha']}")


@pytest.mark.parametrize("samples, alpha, least", [
    (2, H_HALF, 3),  # margin exactly 0.5: refused (p_A <= 1 - h = h <= p_B)
    (1, H_HALF, 3),  # 2 samples give margin exactly 0.5, so the least allowed is 3
    (13, 0.001, 14), (1, 0.001, 14),  # the least allowed is not always one more than given
])
def test_a_vote_too_small_to_certify_is_refused_with_the_least_vote_that_can(samples, alpha, least):
    assert least == math.floor(2 * math.log(1 / alpha)) + 1  # the least whole number above 2 ln(1 / alpha)
    assert settings_error(samples=samples, alpha=alpha) == (
        f"crfl's Hoeffding margin sqrt(ln(1 / alpha) / (2 samples)) must be below 0.5 (samples > 2 ln(1 / alpha)), "
        f"or p_A <= p_B in every vote and every radius is 0: at alpha={alpha} samples must be >= {least}; "
        f"got samples={samples}")


def test_the_defaults_are_the_authors_mnist_ones_and_the_checks_defaults_the_rules():
    # clip 15 and sigma 0.01 (their MNIST config), 100 votes (theirs 1000, for a CPU), alpha 0.001
    defaults = {"clip": 15.0, "sigma": 0.01, "test_sigma": None, "samples": 100, "alpha": 0.001}
    assert make_aggregator({"name": "crfl"}, f=0).params == defaults
    # a direct call of the check checks what the rule runs with
    signature = inspect.signature(check_crfl).parameters
    assert {name: signature[name].default for name in defaults} == defaults
    check_crfl(10, 2)


def test_the_methods_crfl_is_offered_with_are_those_that_aggregate_and_add_its_output():
    with pytest.raises(ConfigError) as err:
        check_crfl_method(METHODS.get("l2sgd")())
    head = ("crfl certifies w + its output as the global model, but the server step of method 'l2sgd' is not w + "
            "the rule's output; use crfl with ")
    assert str(err.value).startswith(head)
    offered = str(err.value)[len(head):].split(", ")
    # local and mocha add their (mean) aggregate but take no aggregator: crfl cannot run with them
    assert not METHODS.get("local").uses_aggregator and METHODS.get("local").adds_aggregate
    # every method with an aggregator but l2sgd (tests/test_aggregators_crfl.py runs each one's server step)
    assert offered == [name for name in METHODS.names()
                       if METHODS.get(name).uses_aggregator and name != "l2sgd"]
    assert "local" not in offered and "mocha" not in offered


# --- the bound ----------------------------------------------------------------------------------------------------

FACTS = {"eta": 0.05, "devices": 10, "attackers": 2, "share": 0.2, "gamma": 3.0, "tau": 4.0}


def test_the_denominator_is_the_attacks_reach_times_each_rounds_contraction():
    # distinct bounds, each factor below 1: rounds t_adv + 1 .. T - 1 with sigma 0.4, round T with test sigma 0.6
    rhos, weights = [0.3, 0.5, 0.8, 1.1], [0.1, 0.3]
    reach = 2 * 2 * 4.0**2 * (2 + 2 * 0.7 + 0.7**2) * (0.1**2 + 0.3**2) * 3.0**2 * 0.05**2 * 0.2**2
    contraction = phi_factor(0.3, 0.4) * phi_factor(0.5, 0.4) * phi_factor(0.8, 0.4) * phi_factor(1.1, 0.6)
    assert all(phi_factor(rho, 0.4) < 0.999 for rho in rhos)
    ours = bound_denominator(sigma_train=0.4, sigma_test=0.6, rho_adv=0.7, rhos=rhos, weights=weights, **FACTS)
    assert ours == pytest.approx(reach * contraction, rel=1e-12)


def test_the_attackers_weigh_one_over_the_devices_each_by_default():
    # R = 2 attackers of weight 1 / 10: sum of squares 2 / 100; one round (T = 1): round T's factor only
    reach = 2 * 2 * 4.0**2 * (2 + 2 * 0.7 + 0.7**2) * (2 / 10**2) * 3.0**2 * 0.05**2 * 0.2**2
    ours = bound_denominator(sigma_train=0.4, sigma_test=0.6, rho_adv=0.7, rhos=[0.5], **FACTS)
    assert ours == pytest.approx(reach * phi_factor(0.5, 0.6), rel=1e-12)


@pytest.mark.parametrize("rounds, expected", [(1, [0.5]), (2, [0.5]), (3, [0.5, 0.5]), (5, [0.5] * 4)])
def test_the_contracting_rounds_are_those_after_the_first_through_the_last(rounds, expected):
    # the authors' range(t_adv + 1, T) with t_adv = 1, then round T: max(T - 2, 0) training rounds and the last
    assert contraction_rhos(0.5, rounds) == expected


def test_the_radius_is_theorem_2s_and_100000_for_a_unanimous_vote_and_0_where_p_a_is_not_above_p_b():
    pa, pb = [1.0, 0.9, 0.6, 0.3, 0.4], [0.0, 0.05, 0.3, 0.4, 0.4]
    ours = certified_bound(torch.tensor(pa, dtype=F64), torch.tensor(pb, dtype=F64), sigma_train=0.4,
                           sigma_test=0.6, rho_adv=0.7, rhos=[0.7, 0.7, 0.7], **FACTS)
    expected = [theorem2_radius(a, b, sigma=0.4, test_sigma=0.6, eta=0.05, devices=10, attackers=2, share=0.2,
                                gamma=3.0, tau=4.0, rho=0.7, rounds=4) for a, b in zip(pa, pb, strict=True)]
    assert ours.dtype == F64 and ours[0].item() == 100000.0 and ours[3:].tolist() == [0.0, 0.0]
    assert ours.tolist() == pytest.approx(expected, rel=1e-12)
    # numbers in, one radius out
    one = certified_bound(0.9, 0.05, sigma_train=0.4, sigma_test=0.6, rho_adv=0.7, rhos=[0.7, 0.7, 0.7], **FACTS)
    assert float(one) == pytest.approx(expected[1], rel=1e-12)


# --- the attack's facts -------------------------------------------------------------------------------------------

def reach_of(attack: dict, attackers: int = 4) -> tuple[float, float]:
    return attack_reach(SimpleNamespace(cfg=SimpleNamespace(attack=attack, clients_per_round=10)), attackers)


def test_the_attacks_share_is_its_poison_fraction_or_a_half_and_its_boost_models_replacements():
    assert reach_of({"name": "badnets", "poison_fraction": 0.3}) == (0.3, 1.0)
    assert reach_of({"name": "none"}) == (0.5, 1.0)  # an attack without a poisoned share
    assert reach_of({"name": "model_replacement", "poison_fraction": 0.3, "boost": 7}) == (0.3, 7.0)
    # a null boost is model replacement's n / k: the round's 10 devices over the 4 attackers assumed
    assert reach_of({"name": "model_replacement", "poison_fraction": 0.3, "boost": None}) == (0.3, 2.5)


# --- the vote -----------------------------------------------------------------------------------------------------

class Scripted:
    """A model whose vote is written in its input: sample i's row x[i] holds the class it predicts in each smoothed
    copy (call j predicts x[:, j], whatever the weights); it records the weights of each call."""

    def __init__(self, classes: int):
        self.classes, self.calls = classes, []

    def forward(self, w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        self.calls.append(w.clone())
        return F.one_hot(x[:, len(self.calls) - 1], self.classes).to(w.dtype)


def fake_trial(scripts, labels, owners, malicious, *, classes=3, f=0, attack=None):
    """What certification reads of a trial: test samples with their owners, which devices are malicious, the seed,
    the model, f, the attack, the learning rate, the round's devices and each device's local steps (3 and 5)."""
    test = SimpleNamespace(x=torch.tensor(scripts, dtype=torch.long).reshape(len(labels), -1),
                           y=torch.tensor(labels), owner=torch.tensor(owners))
    return SimpleNamespace(test=test, threat=SimpleNamespace(malicious=np.array(malicious)),
                           cfg=SimpleNamespace(seed=7, lr=0.05, clients_per_round=10,
                                               attack=attack or {"name": "badnets", "poison_fraction": 0.2}),
                           dataset=SimpleNamespace(num_classes=classes), model=Scripted(classes),
                           aggregate=SimpleNamespace(f=f), local_steps=lambda: np.array([3, 5]))


def four_votes():
    """Four votes at margin 0.25 (4 samples, alpha H_QUARTER): device 0's samples (label 0, unanimous 0: p_A 0.75,
    p_B 0.25, right; label 1, 3 to 1: p_A = p_B = 0.5, not right), malicious device 1's (left out), device 2's
    (label 2, unanimous 0: p_A 0.75, p_B 0.25, wrong)."""
    scripts = [[0, 0, 0, 0], [1, 1, 1, 2], [2, 2, 2, 2], [0, 0, 0, 0]]
    return fake_trial(scripts, [0, 1, 2, 2], [0, 0, 1, 2], [False, True, False])


W = torch.tensor([0.5, -1.0, 2.0], dtype=F64)


def test_the_votes_bounds_are_the_shares_minus_and_plus_hoeffdings_margin_over_benign_samples():
    trial = four_votes()
    pa, pb, right = vote_bounds(trial, W, 3, test_sigma=0.3, samples=4, alpha=H_QUARTER)
    assert pa.tolist() == [0.75, 0.5, 0.75] and pb.tolist() == [0.25, 0.5, 0.25]
    assert right.tolist() == [True, False, False]  # p_A = p_B certifies nothing; a wrong vote is not right


def test_each_smoothed_copy_is_the_model_plus_test_sigma_times_the_rounds_own_draw():
    trial = four_votes()
    vote_bounds(trial, W, 3, test_sigma=0.3, samples=4, alpha=H_QUARTER)
    gen = torch.Generator().manual_seed(7 * 1_000_003 + 3)  # the trial's seed and the round: the same on a rerun
    expected = [W + 0.3 * torch.randn(3, generator=gen, dtype=F64) for _ in range(4)]
    assert len(trial.model.calls) == 4
    assert all(torch.equal(seen, copy) for seen, copy in zip(trial.model.calls, expected, strict=True))


def test_bounds_beyond_0_and_1_are_kept_inside_by_1e_8_on_two_classes():
    # 2 votes at alpha 0.001: margin 1.31, a split vote's p_A = 0.5 - 1.31 and p_B = 0.5 + 1.31 are clamped
    trial = fake_trial([[0, 1]], [0], [0], [False], classes=2)
    pa, pb, right = vote_bounds(trial, W, 1, test_sigma=0.3, samples=2, alpha=0.001)
    assert pa.tolist() == [1e-8] and pb.tolist() == [1 - 1e-8] and right.tolist() == [False]


def test_without_benign_test_samples_there_is_no_vote_and_the_radius_is_nan():
    trial = fake_trial([[0, 0, 0, 0]], [0], [1], [False, True])
    assert vote_bounds(trial, W, 3, test_sigma=0.3, samples=4, alpha=H_QUARTER) is None
    assert math.isnan(certified_radius(trial, W, 3, clip=0.8, sigma=0.5, test_sigma=0.3, samples=4,
                                       alpha=H_QUARTER))


def radius_of_four_votes(*, sigma: float, test_sigma: float, rounds: int) -> float:
    """The mean radius of four_votes: theorem2_radius(0.75, 0.25) for the one right vote, 0 for the other two; R =
    1 (f = 0: a clean run is certified against one attacker), badnets' share 0.2, gamma 1, tau = mean(3, 5)."""
    return theorem2_radius(0.75, 0.25, sigma=sigma, test_sigma=test_sigma, eta=0.05, devices=10, attackers=1,
                           share=0.2, gamma=1.0, tau=4.0, rho=0.8, rounds=rounds) / 3


def test_the_radius_is_the_mean_over_benign_samples_of_the_bound_where_the_vote_is_right():
    ours = certified_radius(four_votes(), W, 3, clip=0.8, sigma=0.5, test_sigma=0.3, samples=4, alpha=H_QUARTER)
    assert ours == pytest.approx(radius_of_four_votes(sigma=0.5, test_sigma=0.3, rounds=3), rel=1e-12)


def state_after(rounds: int) -> SimpleNamespace:
    # the run's model is the noised one; the certified one is the clipped model before the noise ("crfl_model")
    return SimpleNamespace(round=rounds, w=(W + 1.0).float(), server={"crfl_model": W})


@pytest.mark.parametrize("rounds", [1, 3])
def test_the_hook_certifies_the_pre_noise_model_from_the_first_round_on(rounds):
    trial = four_votes()
    out = certify_crfl(trial, state_after(rounds), clip=0.8, sigma=0.5, test_sigma=0.3, samples=4, alpha=H_QUARTER)
    assert list(out) == ["certified_radius"]
    assert out["certified_radius"] == pytest.approx(radius_of_four_votes(sigma=0.5, test_sigma=0.3, rounds=rounds),
                                                    rel=1e-12)
    # the votes smooth the pre-noise model (not the run's w), in the run's dtype, with the round's draw
    gen = torch.Generator().manual_seed(7 * 1_000_003 + rounds)
    assert torch.equal(trial.model.calls[0], W.float() + 0.3 * torch.randn(3, generator=gen, dtype=torch.float32))


def test_a_null_test_sigma_is_the_training_sigma():
    trial = four_votes()
    out = certify_crfl(trial, state_after(3), clip=0.8, sigma=0.3, test_sigma=None, samples=4, alpha=H_QUARTER)
    assert out["certified_radius"] == pytest.approx(radius_of_four_votes(sigma=0.3, test_sigma=0.3, rounds=3),
                                                    rel=1e-12)
    gen = torch.Generator().manual_seed(7 * 1_000_003 + 3)
    assert torch.equal(trial.model.calls[0], W.float() + 0.3 * torch.randn(3, generator=gen, dtype=torch.float32))


def test_before_the_first_round_there_is_no_certificate():
    out = certify_crfl(four_votes(), state_after(0), clip=0.8, sigma=0.5, test_sigma=0.3, samples=4,
                       alpha=H_QUARTER)
    assert list(out) == ["certified_radius"] and math.isnan(out["certified_radius"])


def test_the_certified_model_is_the_servers_crfl_model_in_the_runs_dtype_or_the_model_itself():
    state = state_after(3)
    assert certified_model(state).dtype == torch.float32 and torch.equal(certified_model(state), W.float())
    assert torch.equal(certified_model(SimpleNamespace(w=W, server={})), W)


# --- the rule -----------------------------------------------------------------------------------------------------

def noise(seed: int, d: int) -> torch.Tensor:
    return torch.randn(d, generator=torch.Generator().manual_seed(seed), dtype=F64)


def test_a_new_model_inside_the_bound_is_kept_as_it_is_and_stored_as_crfl_model():
    model = torch.tensor([0.1, 0.2], dtype=F64)
    updates = torch.tensor([[0.1, 0.0], [0.3, 0.4]], dtype=F64)  # mean (0.2, 0.2): new model (0.3, 0.4), norm 0.5
    server = {}
    draw = RoundDraw(torch.arange(2), seed=5, server=server, inputs={"model": model})
    out = make_aggregator({"name": "crfl", "clip": 1.0, "sigma": 0.1}, f=0).for_round(draw)(
        updates, torch.ones(2, dtype=F64))
    new = torch.tensor([0.3, 0.4], dtype=F64)
    assert list(server) == ["crfl_model"]  # the server state's entry, checkpointed and read back by that name
    torch.testing.assert_close(server["crfl_model"], new, rtol=1e-15, atol=1e-15)
    torch.testing.assert_close(out, new + 0.1 * noise(5, 2) - model, rtol=1e-15, atol=1e-15)


def test_the_clip_holds_at_any_scale():
    # a new model of norm 1.5e-12 clipped to 1e-12 (the guard against a zero norm is 1e-12)
    server = {}
    draw = RoundDraw(torch.arange(1), server=server, inputs={"model": torch.zeros(2, dtype=F64)})
    make_aggregator({"name": "crfl", "clip": 1e-12, "sigma": 0.1}, f=0).for_round(draw)(
        torch.tensor([[1.5e-12, 0.0]], dtype=F64), torch.ones(1, dtype=F64))
    torch.testing.assert_close(server["crfl_model"], torch.tensor([1e-12, 0.0], dtype=F64), rtol=1e-12, atol=0.0)


def test_a_direct_call_of_one_update_takes_the_model_as_zero_and_seed_0():
    out = crfl(torch.tensor([[6.0, 8.0]], dtype=F64), weights=torch.ones(1, dtype=F64), losses=None, f=0, clip=5.0,
               sigma=0.1)
    torch.testing.assert_close(out, torch.tensor([3.0, 4.0], dtype=F64) + 0.1 * noise(0, 2), rtol=1e-15, atol=1e-15)


def test_crfl_is_registered_reading_the_round_needing_only_the_sum_with_its_check_and_certificate():
    entry = AGGREGATORS.get("crfl")
    assert entry.rule is crfl and entry.check is check_crfl and entry.certify is certify_crfl
    assert entry.needs_round and not entry.needs_each_update()  # secure aggregation's mean suffices
    # the certificate's property, higher is better (the store logs it, the tables rank it); classification only
    assert dict(entry.reports) == {"certified_radius": True} and entry.tasks == ("classification",)
    assert entry.reads == ("round", "model")
    assert AGGREGATORS.version("crfl") == 2  # docs/fidelity.md: version 2, tau and the certified model
