"""Privacy accounting against closed forms: both accountants, every kind of event fedarena gives them, the
convention of the pinned dp-accounting, the default delta, and the versions that make old privacy runs stale.

Replace-one adjacency: one device's clipped update (norm <= C) replaced by any other moves the clipped sum by
Delta = 2C; the noise has standard deviation sigma = z C (DP-FedAvg's multiplier z). So one round without
sampling is the Gaussian mechanism with mu = Delta / sigma = 2 / z, and T rounds are one Gaussian mechanism with
mu sqrt(T) (a T-fold composition of Gaussians is a Gaussian with sigma / sqrt(T)).

- RDP (Mironov 2017): RDP(alpha) = alpha Delta^2 / (2 sigma^2) = 2 alpha / z^2 per round, converted to (eps,
  delta) as dp-accounting converts (Canonne, Kamath and Steinke 2020, Proposition 12): the least over its orders
  of RDP(alpha) + log(1 - 1 / alpha) - log(delta alpha) / (alpha - 1).
- PLD: the exact Gaussian mechanism (Balle and Wang 2018, Theorem 8): delta(eps) = Phi(mu / 2 - eps / mu) -
  e^eps Phi(-mu / 2 - eps / mu), solved for eps.
"""

import math
import tomllib
from importlib import metadata
from pathlib import Path

import dp_accounting
import pytest
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant
from dp_accounting.rdp.rdp_privacy_accountant import DEFAULT_RDP_ORDERS
from packaging.requirements import Requirement
from scipy.optimize import brentq
from scipy.stats import norm

from fedarena.config import ExperimentConfig
from fedarena.privacy import accounting, base
from fedarena.simulation.identity import registered_version, trial_identity

REPLACE_ONE = dp_accounting.NeighboringRelation.REPLACE_ONE
PLD_TOLERANCE = 2e-3  # dp-accounting's PLD discretises the loss (1e-4 steps), pessimistically
TINY = {"dataset": {"name": "digits", "num_clients": 10}, "model": {"name": "mlp", "hidden": [8]}, "rounds": 4,
        "eval_every": 2, "clients_per_round": 5, "local_steps": 1, "batch_size": 16, "lr": 0.2, "sampling": "uniform"}


def gaussian_delta(eps: float, mu: float) -> float:
    """Balle and Wang's delta(eps) of the Gaussian mechanism with mu = sensitivity / noise std."""
    return norm.cdf(mu / 2 - eps / mu) - math.exp(eps + norm.logcdf(-mu / 2 - eps / mu))


def gaussian_epsilon(mu: float, delta: float) -> float:
    """The exact Gaussian mechanism's epsilon at delta (the root of delta(eps) = delta; 0 where delta(0) <= delta)."""
    if gaussian_delta(0.0, mu) <= delta:
        return 0.0
    high = 1.0
    while gaussian_delta(high, mu) > delta:  # delta(eps) falls in eps: double until it brackets the root
        high *= 2
    return brentq(lambda eps: gaussian_delta(eps, mu) - delta, 0.0, high, xtol=1e-13, rtol=1e-13)


def rdp_epsilon(rdp_at, delta: float) -> float:
    """dp-accounting's conversion of an RDP curve (a function of the order) to epsilon at delta, over its orders."""
    best = math.inf
    for alpha in DEFAULT_RDP_ORDERS:
        r = rdp_at(alpha)
        if delta ** 2 + math.expm1(-r) > 0:
            return 0.0
        if alpha > 1.01:
            best = min(best, r + math.log1p(-1 / alpha) - math.log(delta * alpha) / (alpha - 1))
    return max(0.0, best)


def rdp_at_order(event, alpha: float, relation=REPLACE_ONE) -> float:
    """RDP of ``event`` at one order, read back through dp-accounting's public conversion (one order only)."""
    acc = RdpAccountant(orders=[alpha], neighboring_relation=relation)
    acc.compose(event)
    delta = 1e-5
    return acc.get_epsilon(delta) - math.log1p(-1 / alpha) + math.log(delta * alpha) / (alpha - 1)


# --- the convention of the pinned dp-accounting --------------------------------------------------------------


def test_dp_accounting_is_pinned_below_its_next_minor_release_and_the_installed_one_is_in_the_pin():
    # Prepare: the pin in pyproject.toml
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    pin = next(Requirement(d) for d in project["dependencies"] if Requirement(d).name == "dp-accounting")
    installed = metadata.version("dp-accounting")
    major, minor = (int(p) for p in installed.split(".")[:2])
    # Assert: the installed version is allowed, the next minor release is not
    assert pin.specifier.contains(installed)
    assert not pin.specifier.contains(f"{major}.{minor + 1}.0")


@pytest.mark.parametrize("relation", [REPLACE_ONE, dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE])
@pytest.mark.parametrize("s, alpha", [(0.5, 2.0), (1.0, 8.0), (2.3, 32.0), (0.75, 1.5)])
def test_rdp_reads_a_gaussian_multiplier_as_noise_std_over_the_distance_of_neighbours(relation, s, alpha):
    # Assert: RDP(alpha) of GaussianDpEvent(s) is alpha / (2 s^2) under either relation: s is the noise std over
    # the L2 distance of neighbouring outputs, not over the per-record bound (the docstring's reading)
    assert rdp_at_order(dp_accounting.GaussianDpEvent(s), alpha, relation) == pytest.approx(
        alpha / (2 * s ** 2), rel=1e-9)


@pytest.mark.parametrize("s", [0.5, 1.0, 3.0])
def test_pld_under_replace_one_reads_a_gaussian_multiplier_as_noise_std_over_half_the_distance(s):
    # Prepare: under REPLACE_ONE dp-accounting's PLD shifts the noise by -1 and +1: neighbours 2 apart
    acc = PLDAccountant(neighboring_relation=REPLACE_ONE)
    acc.compose(dp_accounting.GaussianDpEvent(s))
    # Assert: the exact Gaussian with mu = 2 / s
    exact = gaussian_epsilon(2 / s, 1e-5)
    assert acc.get_epsilon(1e-5) == pytest.approx(exact, rel=PLD_TOLERANCE) and acc.get_epsilon(1e-5) >= exact - 1e-9


# --- fedarena's accountants against the closed forms ---------------------------------------------------------


def test_the_reviews_case_one_gaussian_step_is_the_exact_gaussians_epsilon_under_pld():
    # Prepare: z = 2, so Delta / sigma = 2C / 2C = 1 (the review's 9.997 was mu = 2: the factor 2 twice)
    eps = accounting.local_epsilon("pld", 2.0, 1, 1e-5)
    # Assert: Balle and Wang's 4.377
    assert eps == pytest.approx(gaussian_epsilon(1.0, 1e-5), rel=PLD_TOLERANCE)
    assert eps == pytest.approx(4.377, abs=0.01)


@pytest.mark.parametrize("z, steps, delta", [(2.0, 12, 1e-5), (0.8, 1, 1e-5), (1.3, 50, 1e-6), (4.0, 3, 1e-3)])
def test_local_dp_under_pld_is_the_exact_gaussian_composed_over_a_devices_rounds(z, steps, delta):
    # Execute
    eps = accounting.local_epsilon("pld", z, steps, delta)
    # Assert: T steps of mu = 2 / z are one Gaussian of mu = 2 sqrt(T) / z (z 2 x 12 at 1e-5: 20.13, not 52.8)
    assert eps == pytest.approx(gaussian_epsilon(2 * math.sqrt(steps) / z, delta), rel=PLD_TOLERANCE)


@pytest.mark.parametrize("z, n, rounds, delta", [(1.1, 30, 25, 1e-5), (2.0, 10, 1, 1e-5), (0.7, 100, 8, 1e-6)])
def test_central_dp_with_every_device_every_round_under_pld_is_the_exact_gaussian(z, n, rounds, delta):
    # Execute: no sampling (m = N)
    eps = accounting.central_epsilon("pld", z, n, n, rounds, delta)
    # Assert: N = m = 30, z = 1.1, 25 rounds at 1e-5: 79.28 (not 241.9)
    assert eps == pytest.approx(gaussian_epsilon(2 * math.sqrt(rounds) / z, delta), rel=PLD_TOLERANCE)


@pytest.mark.parametrize("z, steps, delta", [(2.0, 12, 1e-5), (0.8, 1, 1e-5), (1.3, 50, 1e-6), (4.0, 3, 1e-3)])
def test_local_dp_under_rdp_is_the_gaussians_closed_form_rdp_converted(z, steps, delta):
    # Execute
    eps = accounting.local_epsilon("rdp", z, steps, delta)
    # Assert: RDP(alpha) = T alpha Delta^2 / (2 sigma^2) = 2 T alpha / z^2, and RDP bounds the exact epsilon
    assert eps == pytest.approx(rdp_epsilon(lambda a: 2 * steps * a / z ** 2, delta), rel=1e-9)
    assert eps >= gaussian_epsilon(2 * math.sqrt(steps) / z, delta)


@pytest.mark.parametrize("z, n, rounds, delta", [(1.1, 30, 25, 1e-5), (2.0, 10, 1, 1e-5), (0.7, 100, 8, 1e-6)])
def test_central_dp_with_every_device_every_round_under_rdp_is_the_closed_form(z, n, rounds, delta):
    eps = accounting.central_epsilon("rdp", z, n, n, rounds, delta)
    assert eps == pytest.approx(rdp_epsilon(lambda a: 2 * rounds * a / z ** 2, delta), rel=1e-9)


@pytest.mark.parametrize("alpha", [2.0, 10.0, 64.0])
def test_one_rounds_rdp_at_each_order_is_alpha_delta_squared_over_two_sigma_squared(alpha):
    # Prepare: z = 1.5, C = 1: Delta = 2, sigma = 1.5; the event fedarena gives the RDP accountant for 7 rounds
    event = accounting.for_accountant("rdp", accounting.central_event(1.5, 20, 20, 7))
    # Assert
    assert rdp_at_order(event, alpha) == pytest.approx(7 * alpha * 2.0 ** 2 / (2 * 1.5 ** 2), rel=1e-9)


@pytest.mark.parametrize("name", accounting.ACCOUNTANT.names())
def test_adaptive_clipping_spends_exactly_z_under_either_accountant(name):
    # Prepare: every device every round; the count (replace-one distance 1, noise 1.2) takes part of z = 1.5
    plain = accounting.central_epsilon(name, 1.5, 20, 20, 10, 1e-5)
    adaptive = accounting.central_epsilon(name, 1.5, 20, 20, 10, 1e-5, 1.2)
    # Assert: 4 / z_Delta^2 + 1 / sigma_b^2 = 4 / z^2, so both are the Gaussian of mu = 2 sqrt(10) / 1.5
    assert adaptive == pytest.approx(plain, rel=PLD_TOLERANCE if name == "pld" else 1e-9)
    if name == "pld":
        assert adaptive == pytest.approx(gaussian_epsilon(2 * math.sqrt(10) / 1.5, 1e-5), rel=PLD_TOLERANCE)


@pytest.mark.parametrize("name", accounting.ACCOUNTANT.names())
def test_calibration_reaches_the_target_under_either_accountant(name):
    # Execute: local DP over 12 rounds, target 5 at 1e-5
    z = accounting.calibrate(name, 5.0, 1e-5, ("local", 12))
    # Assert: the closed form at that z is the target
    mu = 2 * math.sqrt(12) / z
    closed = gaussian_epsilon(mu, 1e-5) if name == "pld" else rdp_epsilon(lambda a: mu ** 2 * a / 2, 1e-5)
    assert closed == pytest.approx(5.0, rel=0.01)


def test_pld_is_tighter_than_rdp_and_sampling_only_lowers_rdps_epsilon():
    full = accounting.central_epsilon("rdp", 1.1, 30, 30, 25, 1e-5)
    assert accounting.central_epsilon("pld", 1.1, 30, 30, 25, 1e-5) < full
    assert accounting.central_epsilon("rdp", 1.1, 30, 10, 25, 1e-5) < full


# --- the default delta ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("n, delta", [(1, 1e-5), (10, 1e-5), (30, 1e-5), (3000, 1e-5), (10 ** 5, 10 ** -5.5),
                                      (10 ** 6, 10 ** -6.6)])
def test_the_default_delta_is_1e5_or_n_to_the_minus_1_1_where_that_is_smaller(n, delta):
    assert accounting.default_delta(n) == pytest.approx(delta, rel=1e-12)


def test_a_private_run_without_a_delta_reports_the_default_one():
    from fedarena.simulation.experiment import run_experiment

    cfg = ExperimentConfig.from_dict({**TINY, "rounds": 2, "eval_every": 2,
                                      "privacy": {"name": "central", "noise_multiplier": 1.5}})
    assert run_experiment(cfg)["final"]["delta"] == 1e-5


# --- versions ------------------------------------------------------------------------------------------------


def identity(**privacy):
    return trial_identity(ExperimentConfig.from_dict({**TINY, **({"privacy": privacy} if privacy else {})}))


def test_a_private_trial_carries_its_mechanisms_and_its_accountants_versions():
    # Execute
    rdp = identity(name="central", noise_multiplier=1.0).versions
    pld = identity(name="local", noise_multiplier=1.0, accountant="pld").versions
    # Assert: the mechanisms at v2 (default delta 1e-5), PLD at v2 (replace-one's factor 2 counted once)
    assert rdp["privacy/central"] == 2 and rdp["accountant/rdp"] == 1 and "accountant/pld" not in rdp
    assert pld["privacy/local"] == 2 and pld["accountant/pld"] == 2 and "accountant/rdp" not in pld
    assert registered_version("accountant/pld") == 2 and registered_version("accountant/rdp") == 1


def test_a_trial_without_privacy_has_no_privacy_or_accountant_version():
    versions = identity().versions
    assert not any(k.startswith(("privacy/", "accountant/")) for k in versions)
    secure = identity(name="none", secure_aggregation=True).versions
    assert secure["privacy/none"] == 1 and not any(k.startswith("accountant/") for k in secure)


def test_the_accountants_a_config_may_name_are_the_versioned_ones():
    assert tuple(accounting.ACCOUNTANT.registered()) == base.ACCOUNTANTS


def test_an_integer_count_noise_is_accounted_as_its_float():
    # dp-accounting's RDP of sampled Gaussians takes an int multiplier for its own stop signal and drops the
    # update's release: count_noise 2 reported epsilon 3.68 where 2.0 gives 47.0 (z 1, N 100, m 10, 50 rounds)
    from fedarena.privacy.mechanisms import central_dp

    spec = central_dp(noise_multiplier=1, adaptive=True, count_noise=2)
    assert isinstance(spec.count_noise, float) and isinstance(spec.noise_multiplier, float)
    as_int = accounting.round_mechanism(1, 2)
    acc = dp_accounting.rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    acc.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.SampledWithoutReplacementDpEvent(100, 10, as_int), 50))
    fixed_clip = dp_accounting.rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    fixed_clip.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.SampledWithoutReplacementDpEvent(
        100, 10, dp_accounting.GaussianDpEvent(0.5)), 50))
    assert acc.get_epsilon(1e-5) == pytest.approx(fixed_clip.get_epsilon(1e-5), rel=1e-6)  # about 47, not 3.7
