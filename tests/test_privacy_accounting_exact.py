"""fedarena/privacy/accounting.py checked against its formulas, one behaviour per test: each test here kills
mutants the older tests let survive (make mutants MODULE=fedarena/privacy/accounting.py)."""

import math
from importlib import metadata

import dp_accounting
import pytest
from dp_accounting import mechanism_calibration
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant
from scipy.optimize import brentq
from test_privacy_accounting import gaussian_epsilon, rdp_epsilon

from fedarena.errors import ConfigError
from fedarena.privacy import accounting

REPLACE_ONE = dp_accounting.NeighboringRelation.REPLACE_ONE
ADD_OR_REMOVE = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
PLD_TOLERANCE = 2e-3  # dp-accounting's PLD discretises the loss (1e-4 steps), pessimistically


def rdp_of(event, delta, relation=REPLACE_ONE):
    """dp-accounting's RDP epsilon of ``event`` at ``delta`` (the reference, built without fedarena's code)."""
    acc = RdpAccountant(neighboring_relation=relation)
    acc.compose(event)
    return acc.get_epsilon(delta)


def gaussians(event):
    """The noise multipliers of every Gaussian in ``event``, outermost first."""
    if isinstance(event, dp_accounting.GaussianDpEvent):
        return [event.noise_multiplier]
    if isinstance(event, dp_accounting.ComposedDpEvent):
        return [s for e in event.events for s in gaussians(e)]
    return gaussians(event.event)


# --- adaptive clipping's split of the budget -----------------------------------------------------------------


def test_the_update_keeps_the_whole_multiplier_without_a_count_or_without_noise():
    assert accounting.update_noise(1.5, None) == 1.5
    assert accounting.update_noise(0.0, 1.2) == 0.0  # no noise: nothing to split (and no 0 ** -2)
    assert accounting.update_noise(0.0, None) == 0.0


@pytest.mark.parametrize("z, count_noise", [(1.5, 1.2), (1.0, 2.0), (0.8, 3.0), (2.0, 1.5)])
def test_the_update_and_the_count_together_cost_exactly_z(z, count_noise):
    # Execute: z_Delta = (z^-2 - (2 sigma_b)^-2)^-1/2 (Andrew et al. 2021, Theorem 1)
    z_delta = accounting.update_noise(z, count_noise)
    # Assert: the formula, and the budget it keeps: 4 / z_Delta^2 + 1 / sigma_b^2 = 4 / z^2
    assert z_delta == pytest.approx((z ** -2 - (2 * count_noise) ** -2) ** -0.5, rel=1e-12)
    assert 4 / z_delta ** 2 + 1 / count_noise ** 2 == pytest.approx(4 / z ** 2, rel=1e-12)
    assert z_delta > z


@pytest.mark.parametrize("z, count_noise, half", [(1.0, 0.5, "0.5"), (3.0, 1.0, "1.5"), (2.0, 1.0, "1")])
def test_a_count_noise_at_or_below_half_the_multiplier_is_refused_in_words(z, count_noise, half):
    # Prepare: (1, 0.5) and (2, 1) leave nothing for the update (z^-2 - (2 sigma_b)^-2 = 0 exactly), (3, 1) less
    expected = (f"privacy: adaptive clipping's count_noise={count_noise:g} must exceed noise_multiplier / 2 = {half} "
                "(its release alone would spend more than the budget); raise count_noise or lower the noise "
                "multiplier")
    # Execute
    with pytest.raises(ConfigError) as err:
        accounting.update_noise(z, count_noise)
    # Assert
    assert str(err.value) == expected


# --- the events ------------------------------------------------------------------------------------------------


def test_a_round_without_noise_is_non_private_and_with_z_1_a_gaussian_of_half():
    assert isinstance(accounting.round_mechanism(0.0, None), dp_accounting.NonPrivateDpEvent)
    assert isinstance(accounting.round_mechanism(0.0, 1.2), dp_accounting.NonPrivateDpEvent)
    assert accounting.round_mechanism(1.0, None) == dp_accounting.GaussianDpEvent(0.5)
    assert accounting.round_mechanism(3.0, None) == dp_accounting.GaussianDpEvent(1.5)


def test_an_adaptive_round_is_the_update_over_twice_the_clip_composed_with_the_count():
    event = accounting.round_mechanism(1.5, 1.2)
    assert isinstance(event, dp_accounting.ComposedDpEvent)
    assert gaussians(event) == pytest.approx([(1.5 ** -2 - 2.4 ** -2) ** -0.5 / 2, 1.2], rel=1e-12)


def test_central_rounds_sample_only_when_fewer_than_all_devices_take_part():
    # Execute
    sampled = accounting.central_event(1.5, 100, 10, 7)
    everyone = accounting.central_event(1.5, 100, 100, 7)
    silent = accounting.central_event(0.0, 100, 10, 7)
    # Assert: m < N samples without replacement; m = N is the plain Gaussian (PLD can account for it)
    assert sampled == dp_accounting.SelfComposedDpEvent(
        dp_accounting.SampledWithoutReplacementDpEvent(100, 10, dp_accounting.GaussianDpEvent(0.75)), 7)
    assert everyone == dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(0.75), 7)
    assert isinstance(silent, dp_accounting.NonPrivateDpEvent)


def test_a_local_device_composes_its_own_gaussian_over_its_rounds():
    assert accounting.local_event(2.0, 5) == dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(1.0), 5)


# --- the accountants -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, kind", [("rdp", RdpAccountant), ("pld", PLDAccountant)])
def test_each_accountant_is_dp_accountings_under_replace_one_unless_told_add_or_remove(name, kind):
    assert isinstance(accounting.accountant(name), kind)
    assert accounting.accountant(name).neighboring_relation == REPLACE_ONE
    assert accounting.accountant(name, ADD_OR_REMOVE).neighboring_relation == ADD_OR_REMOVE


def test_an_unknown_accountant_is_refused_with_the_names_it_may_take():
    with pytest.raises(ConfigError) as err:
        accounting.accountant("moments")
    assert str(err.value) == "privacy accountant must be one of rdp, pld; got 'moments'"


def test_rdp_reads_the_events_as_they_are_and_pld_doubles_every_gaussian():
    # Prepare: an adaptive round, sampled, over 3 rounds (every kind of event fedarena makes)
    event = accounting.central_event(1.5, 50, 10, 3, 1.2)
    # Execute
    rdp, pld = accounting.for_accountant("rdp", event), accounting.for_accountant("pld", event)
    # Assert: the same structure, every multiplier times 2 for PLD
    assert rdp is event
    assert pld == dp_accounting.SelfComposedDpEvent(dp_accounting.SampledWithoutReplacementDpEvent(
        50, 10, dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(2 * s) for s in gaussians(event)])), 3)
    silent = dp_accounting.NonPrivateDpEvent()
    assert accounting.for_accountant("pld", silent) is silent


def test_an_event_fedarena_never_makes_has_no_reading_for_pld():
    with pytest.raises(TypeError) as err:
        accounting.for_accountant("pld", dp_accounting.LaplaceDpEvent(1.0))
    assert str(err.value) == "no reading of LaplaceDpEvent for another accountant"


def test_pld_is_refused_for_sampling_without_replacement_in_words_and_the_rest_is_accepted():
    # Assert: what each accountant supports passes silently
    assert accounting.check_supported("rdp", accounting.central_event(1.5, 50, 10, 3)) is None
    assert accounting.check_supported("pld", accounting.central_event(1.5, 50, 50, 3)) is None
    assert accounting.check_supported("pld", accounting.local_event(1.5, 3)) is None
    # Execute: PLD with sampling
    with pytest.raises(ConfigError) as err:
        accounting.check_supported("pld", accounting.central_event(1.5, 50, 10, 3))
    # Assert: its wording, the installed dp-accounting named
    assert str(err.value) == (
        f"privacy accountant 'pld' cannot account for SampledWithoutReplacementDpEvent (dp-accounting "
        f"{metadata.version('dp-accounting')}); use accountant rdp (the default), or pld under local DP or where "
        "every device takes part in every round")


# --- epsilon at the edges ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", accounting.ACCOUNTANT.names())
def test_no_rounds_spend_nothing(name):
    assert accounting.central_epsilon(name, 1.5, 50, 10, 0, 1e-5) == 0.0
    assert accounting.central_epsilon(name, 1.5, 50, 50, 0, 1e-5, 1.2) == 0.0
    assert accounting.local_epsilon(name, 1.5, 0, 1e-5) == 0.0
    assert accounting.add_remove_epsilon(name, 1.5, 0, 1e-5) == 0.0


@pytest.mark.parametrize("name", accounting.ACCOUNTANT.names())
def test_no_noise_has_no_privacy(name):
    assert accounting.central_epsilon(name, 0.0, 50, 50, 2, 1e-5) == math.inf
    assert accounting.local_epsilon(name, 0.0, 2, 1e-5) == math.inf
    assert accounting.add_remove_epsilon(name, 0.0, 2, 1e-5) == math.inf
    assert accounting.add_remove_epsilon(name, 0.0, 2, 1e-5, 1.2) == math.inf


@pytest.mark.parametrize("z, rounds", [(1.0, 1), (1.0, 3), (2.5, 1)])
def test_one_round_at_z_1_is_the_closed_form_not_a_special_case(z, rounds):
    # Assert: T rounds of mu = 2 / z, RDP(alpha) = 2 T alpha / z^2, centrally (every device) and locally
    assert accounting.central_epsilon("rdp", z, 20, 20, rounds, 1e-5) == pytest.approx(
        rdp_epsilon(lambda a: 2 * rounds * a / z ** 2, 1e-5), rel=1e-9)
    assert accounting.local_epsilon("rdp", z, rounds, 1e-5) == pytest.approx(
        rdp_epsilon(lambda a: 2 * rounds * a / z ** 2, 1e-5), rel=1e-9)


# --- a canary audit's add-or-remove claim ------------------------------------------------------------------------


def add_or_remove_mu(z, rounds, count_noise):
    """Add-or-remove: the update's mu is 1 / z_Delta (not 2 / z), the count's 1 / sigma_b; T rounds of both are one
    Gaussian with mu^2 = T (1 / z_Delta^2 + 1 / sigma_b^2)."""
    z_delta = z if count_noise is None else (z ** -2 - (2 * count_noise) ** -2) ** -0.5
    return math.sqrt(rounds * (z_delta ** -2 + (0.0 if count_noise is None else count_noise ** -2)))


@pytest.mark.parametrize("z, rounds, count_noise", [(1.0, 1, None), (1.0, 4, None), (1.5, 3, None), (1.5, 3, 1.2),
                                                    (0.9, 1, 2.0)])
def test_add_or_remove_under_rdp_moves_the_sum_by_one_clip_and_the_count_by_one(z, rounds, count_noise):
    mu = add_or_remove_mu(z, rounds, count_noise)
    # Assert: RDP(alpha) = alpha mu^2 / 2, converted
    assert accounting.add_remove_epsilon("rdp", z, rounds, 1e-5, count_noise) == pytest.approx(
        rdp_epsilon(lambda a: a * mu ** 2 / 2, 1e-5), rel=1e-9)


@pytest.mark.parametrize("z, rounds, count_noise", [(1.0, 1, None), (1.5, 3, 1.2)])
def test_add_or_remove_under_pld_is_the_exact_gaussian(z, rounds, count_noise):
    mu = add_or_remove_mu(z, rounds, count_noise)
    # Execute
    eps = accounting.add_remove_epsilon("pld", z, rounds, 1e-5, count_noise)
    # Assert: Balle and Wang's exact Gaussian, from above (PLD is pessimistic)
    assert eps == pytest.approx(gaussian_epsilon(mu, 1e-5), rel=PLD_TOLERANCE)
    assert eps >= gaussian_epsilon(mu, 1e-5) - 1e-9


# --- calibration -------------------------------------------------------------------------------------------------


def test_calibration_of_a_central_run_is_the_smallest_z_that_reaches_the_target():
    # Execute: all 20 devices in each of 5 rounds, target 2 at 1e-5
    z = accounting.calibrate("rdp", 2.0, 1e-5, ("central", 20, 20, 5, None))

    def closed_form(z):  # 5 rounds of mu = 2 / z: RDP(alpha) = 2 5 alpha / z^2
        return rdp_epsilon(lambda a: 10 * a / z ** 2, 1e-5)

    # Assert: the closed form at z is the target from below; 1e-6 less noise exceeds it
    assert closed_form(z) <= 2.0 * (1 + 1e-12) and closed_form(z) == pytest.approx(2.0, rel=1e-5)
    assert closed_form(z - 1e-6) > 2.0


@pytest.mark.parametrize("target, make", [(1.0, ("local", 3)), (3.7, ("central", 20, 20, 5, None)),
                                          (12.0, ("central", 20, 20, 5, 2.0))])
def test_calibration_is_within_1e_7_of_the_exact_multiplier_and_never_below_it(target, make):
    # Prepare: the exact root of epsilon(z) = target, by dp-accounting's RDP (T rounds of one Gaussian of multiplier
    # z / 2: with every device every round adaptive clipping costs the same as fixed clipping)
    rounds = make[1] if make[0] == "local" else make[3]

    def gap(z):
        return rdp_of(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z / 2), rounds), 1e-5) - target

    exact = brentq(gap, 0.5, 50.0, xtol=1e-14, rtol=1e-15)
    # Execute
    z = accounting.calibrate("rdp", target, 1e-5, make)
    # Assert: at or above the root (epsilon at most the target) and within its 1e-7 (the search lands up to 1e-7
    # above the root in these cases; a search at 2e-7 lands up to 2e-7 above it)
    assert exact - 1e-12 <= z <= exact + 1.2e-7


def test_adaptive_calibration_searches_down_to_a_multiplier_of_1e_6():
    # Prepare: an enormous target, reached only at z = 1.5e-6 (epsilon about 1e12)
    target = accounting.central_epsilon("rdp", 1.5e-6, 20, 20, 1, 1e-5, 2.0)
    # Execute
    z = accounting.calibrate("rdp", target, 1e-5, ("central", 20, 20, 1, 2.0))
    # Assert: found (within the search's 1e-7), not missed by a search that starts above it
    assert 1e-6 <= z < 2e-6 and accounting.central_epsilon("rdp", z, 20, 20, 1, 1e-5, 2.0) <= target


def test_calibration_with_a_large_target_finds_a_multiplier_below_one():
    # Execute: one local round, target 20 at 1e-5: far less noise than z = 1
    z = accounting.calibrate("rdp", 20.0, 1e-5, ("local", 1))
    # Assert: the closed form at z is the target
    assert 0 < z < 1
    assert rdp_epsilon(lambda a: 2 * a / z ** 2, 1e-5) == pytest.approx(20.0, rel=1e-5)


def test_adaptive_calibration_finds_the_plain_runs_z_between_2_and_2_count_noise():
    # Prepare: every device every round (3 rounds), so the adaptive run at z costs exactly the plain run at z;
    # the target is the plain run's epsilon at z = 3.5, which count_noise 2 allows (z < 4) but only just: a
    # search from z = 1 by doubling would try z = 7, a bracket up to 2 / count_noise = 1 would miss it
    target = accounting.central_epsilon("rdp", 3.5, 20, 20, 3, 1e-5)
    # Execute
    z = accounting.calibrate("rdp", target, 1e-5, ("central", 20, 20, 3, 2.0))
    # Assert
    assert z == pytest.approx(3.5, rel=1e-6)
    assert accounting.central_epsilon("rdp", z, 20, 20, 3, 1e-5, 2.0) <= target * (1 + 1e-9)


def test_a_target_at_exactly_the_least_epsilon_is_reached_with_the_most_noise():
    # Prepare: the least epsilon of one local round, at z = 1e4 (the most noise calibration allows)
    least = rdp_of(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(1e4 / 2), 1), 1e-5)
    # Execute: that epsilon is within reach, not out of it
    z = accounting.calibrate("rdp", least, 1e-5, ("local", 1))
    # Assert
    assert z == pytest.approx(1e4, rel=1e-3)


def test_an_adaptive_target_at_exactly_the_least_epsilon_is_reached_just_below_2_count_noise():
    # Prepare: the most noise adaptive clipping allows is z = 2 count_noise (1 - 1e-9) (at 2 count_noise itself the
    # update's share of the budget is nothing); its epsilon, 3 rounds of every device, by dp-accounting's RDP
    upper = 2 * 1.2 * (1 - 1e-9)
    z_delta = (upper ** -2 - 2.4 ** -2) ** -0.5
    least = rdp_of(dp_accounting.SelfComposedDpEvent(dp_accounting.ComposedDpEvent(
        [dp_accounting.GaussianDpEvent(z_delta / 2), dp_accounting.GaussianDpEvent(1.2)]), 3), 1e-5)
    # Execute: that epsilon is within reach (a bound of 2 count_noise (1 - 2e-9) would put it out of reach)
    z = accounting.calibrate("rdp", least, 1e-5, ("central", 20, 20, 3, 1.2))
    # Assert: the most noise allowed
    assert upper - 1e-6 <= z <= upper


def test_calibration_is_dp_accountings_own_search_to_the_last_digit():
    # Prepare: dp-accounting's search (its default bracket: up from z = 1 by doubling) at tolerance 1e-7; a private
    # trial's z is part of its numbers, which must not move unless the accountant's version does
    def reference(target, rounds):
        return mechanism_calibration.calibrate_dp_mechanism(
            RdpAccountant, lambda z: dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z / 2), rounds),
            target, 1e-5, tol=1e-7)

    # Execute / Assert: roots below 1, between 1 and 2 and above 2 (a search from another guess, or by another
    # bracket, lands elsewhere within its 1e-7)
    for target, rounds in [(20.0, 1), (8.0, 100), (2.0, 5), (1.0, 3)]:
        assert accounting.calibrate("rdp", target, 1e-5, ("local", rounds)) == reference(target, rounds)


def test_a_local_target_out_of_reach_says_so_with_the_most_noise_and_its_epsilon():
    # Prepare: RDP's conversion (orders up to 1024) never goes below about 0.0035 at 1e-5, whatever the noise
    least = rdp_of(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(1e4 / 2), 3), 1e-5)
    # Execute
    with pytest.raises(ConfigError) as err:
        accounting.calibrate("rdp", 0.001, 1e-5, ("local", 3))
    # Assert
    assert str(err.value) == (f"privacy: target_epsilon=0.001 is out of reach at delta=1e-05 in 3 rounds of one "
                              f"device: the most noise allowed (z=10000) gives epsilon {least:.4g}")


def test_a_central_target_out_of_reach_names_its_rounds_and_devices():
    least = rdp_of(dp_accounting.SelfComposedDpEvent(dp_accounting.SampledWithoutReplacementDpEvent(
        100, 10, dp_accounting.GaussianDpEvent(1e4 / 2)), 5), 1e-5)
    with pytest.raises(ConfigError) as err:
        accounting.calibrate("rdp", 0.01, 1e-5, ("central", 100, 10, 5, None))
    assert str(err.value) == (f"privacy: target_epsilon=0.01 is out of reach at delta=1e-05 in 5 rounds of 10 of 100 "
                              f"devices: the most noise allowed (z=10000) gives epsilon {least:.4g}")


def test_an_adaptive_target_out_of_reach_says_the_count_noise_bounds_z():
    # Prepare: at z just below 2 x count_noise = 2.4 the update's noise is endless: the count's own release
    # (3 rounds of a Gaussian of multiplier 1.2) is the least epsilon
    least = rdp_of(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(1.2), 3), 1e-5)
    # Execute
    with pytest.raises(ConfigError) as err:
        accounting.calibrate("rdp", 0.5, 1e-5, ("central", 20, 20, 3, 1.2))
    # Assert
    assert str(err.value) == (f"privacy: target_epsilon=0.5 is out of reach at delta=1e-05 in 3 rounds of 20 of 20 "
                              f"devices: the most noise allowed (z=2.4) gives epsilon {least:.4g}; adaptive clipping "
                              f"keeps z below 2 x count_noise = 2.4: raise count_noise")


# --- caching -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("function, args", [
    (accounting.central_epsilon, ("rdp", 1.7, 40, 8, 3, 1e-5)),
    (accounting.local_epsilon, ("rdp", 1.7, 3, 1e-5)),
    (accounting.add_remove_epsilon, ("rdp", 1.7, 3, 1e-5)),
    (accounting.calibrate, ("rdp", 3.0, 1e-5, ("local", 3))),
])
def test_the_trials_of_a_suite_share_their_accounting(function, args):
    # Execute: the same accounting twice
    first = function(*args)
    hits = function.cache_info().hits
    # Assert: the second is the cached first
    assert function(*args) == first and function.cache_info().hits == hits + 1
