"""fedarena/privacy/audit.py checked exactly, one behaviour per test (the mutation score of the module:
docs/testing.md): the audit's keys and their words, ``AuditSpec``'s defaults (200 resamples, confidence 0.95), its
frozenness and canonical spelling, every edge of ``audit_spec`` (canaries and unseen >= 2, resamples >= 0, confidence
in the open (0, 1), bools and floats refused) and its refusals word for word, the 2 GiB limit of ``check_size`` at
its edge and its refusal's numbers, ``with_canaries``, the directions of ``CanaryAudit.of`` (unit rows, K + U of
them), a canary's row at twice the bound, the running maximum of ``observed`` (a zero or non-finite change is no
observation), the estimates' keys, NaNs, the Gaussian mechanism's epsilon of equal-variance statistics, the lower
bounds in closed form (Clopper-Pearson with no false positive; the exact null of a cosine in R^3, uniform on
[-1, 1]), and ``exceeded``'s claim, strict edge, NaNs and warning (make mutants MODULE=fedarena/privacy/audit.py)."""

import dataclasses
import logging
import math
import re

import numpy as np
import pytest
import torch
from scipy import special

from fedarena.errors import ConfigError
from fedarena.privacy import audit
from fedarena.privacy.audit import (
    ITERATE_MAX,
    LOWER_BOUNDS,
    AuditSpec,
    CanaryAudit,
    audit_spec,
    check_size,
    exceeded,
    with_canaries,
)

F64 = torch.float64
DELTA = 1e-5
ALLOWED = ("canaries: canary clients inserted (>= 2); unseen: directions never sent (>= 2); resamples: bootstrap "
           "resamples of the interval (>= 0; default 200); confidence: the interval's level, in (0, 1) (default 0.95)")
# five unit directions in R^4 (K = 3 sent, U = 2 unseen); a change (0, 3, 0, 4) of norm 5 has cosines
# 0, 0.6, 0, 0.8 and 0.6 * 0.6 = 0.36 with them
ROWS = torch.tensor([[1.0, 0, 0, 0], [0, 1.0, 0, 0], [0, 0, 1.0, 0], [0, 0, 0, 1.0], [0.8, 0.6, 0, 0]], dtype=F64)
COSINES = torch.tensor([0.0, 0.6, 0.0, 0.8, 0.36], dtype=F64)


def refused(section, where="privacy 'central'"):
    with pytest.raises(ConfigError) as err:
        audit_spec(section, where)
    return str(err.value)


def small_audit(spec=AuditSpec(3, 2, 0), devices=10, directions=ROWS, seed=0):
    return CanaryAudit(spec, devices, directions, DELTA, seed)


def gaussian_mechanism_epsilon(mu, delta):
    """Balle and Wang (2018): delta(eps) = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu), solved by bisection."""
    def spent(eps):
        return special.ndtr(mu / 2 - eps / mu) - math.exp(eps) * special.ndtr(-mu / 2 - eps / mu)
    low, high = 0.0, 60.0
    for _ in range(200):
        mid = (low + high) / 2
        low, high = (mid, high) if spent(mid) > delta else (low, mid)
    return (low + high) / 2


# --- constants ------------------------------------------------------------------------------------------------------

def test_the_keys_and_their_words():
    assert audit.KEYS == {"canaries": "canary clients inserted (>= 2)", "unseen": "directions never sent (>= 2)",
                          "resamples": "bootstrap resamples of the interval (>= 0; default 200)",
                          "confidence": "the interval's level, in (0, 1) (default 0.95)"}


def test_the_limit_scale_and_names():
    assert audit.MAX_BYTES == 2 * 2**30
    assert audit.CANARY_SCALE == 2.0
    assert ITERATE_MAX == "iterate_max"
    assert LOWER_BOUNDS == ("epsilon_lower_bound_final", "epsilon_lower_bound_iterates",
                            "epsilon_equal_variance_final_low")
    assert audit.VERSION == 2


# --- AuditSpec ------------------------------------------------------------------------------------------------------

def test_a_spec_defaults_to_200_resamples_at_confidence_095():
    spec = AuditSpec(3, 4)
    assert (spec.canaries, spec.unseen, spec.resamples, spec.confidence) == (3, 4, 200, 0.95)


def test_a_spec_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        AuditSpec(3, 4).canaries = 5


def test_the_canonical_spelling_leaves_out_the_defaults():
    assert AuditSpec(3, 4).canonical() == {"canaries": 3, "unseen": 4}
    assert AuditSpec(3, 4, 200, 0.9).canonical() == {"canaries": 3, "unseen": 4, "confidence": 0.9}
    assert AuditSpec(3, 4, 7, 0.95).canonical() == {"canaries": 3, "unseen": 4, "resamples": 7}


# --- audit_spec -----------------------------------------------------------------------------------------------------

def test_no_section_is_no_audit():
    assert audit_spec(None, "w") is None


def test_a_minimal_section_takes_the_defaults():
    assert audit_spec({"canaries": 2, "unseen": 2}, "w") == AuditSpec(2, 2, 200, 0.95)


def test_a_full_section_is_read_as_given():
    spec = audit_spec({"canaries": 5, "unseen": 7, "resamples": 0, "confidence": 0.5}, "w")
    assert spec == AuditSpec(5, 7, 0, 0.5)
    assert type(spec.confidence) is float


def test_the_edges_accepted():
    assert audit_spec({"canaries": 2, "unseen": 3, "resamples": 0, "confidence": 0.001}, "w").resamples == 0
    assert audit_spec({"canaries": 3, "unseen": 2, "resamples": 1, "confidence": 0.999}, "w").confidence == 0.999


def test_an_unknown_key_is_refused_with_the_allowed_ones():
    message = refused({"canaries": 3, "unseen": 3, "seen": 3, "a": 1})
    assert message == f"privacy 'central': unknown audit key(s) ['a', 'seen']; allowed: {ALLOWED}"


def test_one_canary_is_refused_word_for_word():
    assert refused({"canaries": 1, "unseen": 2}) == ("privacy 'central': audit.canaries must be a whole number >= 2 "
                                                     "(canary clients inserted (>= 2)), got 1")


def test_a_missing_unseen_is_refused_as_missing():
    assert refused({"canaries": 2}) == ("privacy 'central': audit.unseen must be a whole number >= 2 (directions "
                                        "never sent (>= 2)), got None (missing)")


def test_a_missing_canaries_is_refused_as_missing():
    assert refused({"unseen": 2}, "w") == ("w: audit.canaries must be a whole number >= 2 (canary clients inserted "
                                           "(>= 2)), got None (missing)")


def test_negative_resamples_are_refused_word_for_word():
    assert refused({"canaries": 2, "unseen": 2, "resamples": -1}, "w") == (
        "w: audit.resamples must be a whole number >= 0 (bootstrap resamples of the interval (>= 0; default 200)), "
        "got -1")


@pytest.mark.parametrize("key, value", [("canaries", 1), ("unseen", 1), ("canaries", 2.0), ("canaries", 2.5),
                                        ("unseen", True), ("resamples", True), ("resamples", False),
                                        ("resamples", 1.0), ("canaries", "3"), ("unseen", None)])
def test_a_count_that_is_not_a_whole_number_in_range_is_refused(key, value):
    section = {"canaries": 2, "unseen": 2, key: value}
    assert f"audit.{key} must be a whole number >= " in refused(section, "w")


@pytest.mark.parametrize("value", [0, 0.0, 1, 1.0, 1.5, -0.5, True, False, "0.5", None])
def test_a_confidence_outside_the_open_unit_interval_is_refused(value):
    message = refused({"canaries": 2, "unseen": 2, "confidence": value}, "w")
    assert message == f"w: audit.confidence must be in (0, 1), got {value!r}"


# --- check_size -----------------------------------------------------------------------------------------------------

def test_no_audit_holds_nothing():
    assert check_size(None, 2**29 + 1) is None  # a single row of it would be 2 GiB and 4 bytes


def test_exactly_2_gib_of_directions_is_held():
    assert check_size(AuditSpec(2, 2), 2**27) is None  # 4 rows * 2^27 * 4 bytes = 2^31


def test_four_bytes_past_2_gib_are_refused_with_the_numbers():
    with pytest.raises(ConfigError) as err:
        check_size(AuditSpec(2, 2), 2**27 + 1)
    assert str(err.value) == (
        "privacy audit: 2 canaries and 2 unseen directions of the model's 134,217,729 parameters take 2.0 GiB, "
        "above the 2 GiB an audit keeps; lower audit.canaries or audit.unseen (at most 3 together) or audit a "
        "smaller model")


def test_the_refusal_counts_canaries_and_unseen_together():
    with pytest.raises(ConfigError) as err:
        check_size(AuditSpec(2, 4), 2**27)  # 6 rows of 2^29 bytes: 3 GiB, room for 4
    assert str(err.value) == (
        "privacy audit: 2 canaries and 4 unseen directions of the model's 134,217,728 parameters take 3.0 GiB, "
        "above the 2 GiB an audit keeps; lower audit.canaries or audit.unseen (at most 4 together) or audit a "
        "smaller model")


# --- with_canaries --------------------------------------------------------------------------------------------------

def test_without_an_audit_the_sizes_are_the_devices():
    sizes = np.array([5, 7])
    assert with_canaries(None, sizes) is sizes


def test_each_canary_adds_one_of_size_one():
    out = with_canaries(AuditSpec(3, 2), np.array([5, 7], dtype=np.int64))
    assert out.tolist() == [5, 7, 1, 1, 1] and out.dtype == np.int64


# --- CanaryAudit ----------------------------------------------------------------------------------------------------

def test_an_audit_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        small_audit().devices = 3


def test_the_directions_are_k_plus_u_normalised_gaussian_rows():
    spec = AuditSpec(3, 2)
    made = CanaryAudit.of(spec, 10, 3, DELTA, torch.Generator().manual_seed(4), 9, torch.device("cpu"), F64)
    assert (made.spec, made.devices, made.delta, made.seed) == (spec, 10, DELTA, 9)
    assert made.directions.shape == (5, 3) and made.directions.dtype == F64
    torch.testing.assert_close(made.directions.norm(dim=1), torch.ones(5, dtype=F64))
    raw = torch.randn(5, 3, generator=torch.Generator().manual_seed(4)).double()
    ratio = made.directions / raw  # each row a positive multiple of its Gaussian draw
    assert (ratio > 0).all()
    torch.testing.assert_close(ratio, ratio[:, :1].expand(5, 3))


def test_the_directions_are_kept_in_the_dtype_asked_for():
    made = CanaryAudit.of(AuditSpec(2, 2), 4, 6, DELTA, torch.Generator().manual_seed(0), 0, torch.device("cpu"),
                          torch.float32)
    assert made.directions.shape == (4, 6) and made.directions.dtype == torch.float32


def test_an_audit_too_large_is_refused_before_drawing():
    with pytest.raises(ConfigError, match=r"above the 2 GiB an audit keeps"):
        CanaryAudit.of(AuditSpec(2, 2), 4, 2**27 + 1, DELTA, torch.Generator(), 0, torch.device("cpu"), F64)


def test_a_drawn_canary_sends_its_direction_at_twice_the_bound():
    rows = small_audit().rows(np.array([10, 12]), 0.25)  # canaries 0 and 2 of devices 10
    torch.testing.assert_close(rows, torch.tensor([[0.5, 0, 0, 0], [0, 0, 0.5, 0]], dtype=F64))


def test_one_drawn_canary_is_one_row():
    rows = small_audit().rows(np.array([11]), 3.0)
    torch.testing.assert_close(rows, torch.tensor([[0, 6.0, 0, 0]], dtype=F64))


# --- observed -------------------------------------------------------------------------------------------------------

def test_a_first_observation_is_the_cosines():
    state = small_audit().observed({}, torch.tensor([0, 3.0, 0, 4.0], dtype=F64))
    assert set(state) == {ITERATE_MAX}
    torch.testing.assert_close(state[ITERATE_MAX], COSINES)


def test_a_unit_change_is_observed():
    state = small_audit().observed({}, torch.tensor([0, 0, 1.0, 0], dtype=F64))
    torch.testing.assert_close(state[ITERATE_MAX], torch.tensor([0, 0, 1.0, 0, 0], dtype=F64))


def test_later_observations_keep_the_largest_cosine_and_the_rest_of_the_state():
    before = {ITERATE_MAX: torch.tensor([0.5, 0.1, 0.9, -1.0, 0.2], dtype=F64), "other": 7}
    after = small_audit().observed(before, torch.tensor([0, 3.0, 0, 4.0], dtype=F64))
    assert after["other"] == 7 and set(after) == {ITERATE_MAX, "other"}
    torch.testing.assert_close(after[ITERATE_MAX], torch.tensor([0.5, 0.6, 0.9, 0.8, 0.36], dtype=F64))
    torch.testing.assert_close(before[ITERATE_MAX], torch.tensor([0.5, 0.1, 0.9, -1.0, 0.2], dtype=F64))


@pytest.mark.parametrize("change", [[0.0, 0, 0, 0], [math.inf, 1, 0, 0], [math.nan, 1, 0, 0]])
def test_a_zero_or_non_finite_change_is_no_observation(change):
    before = {"other": 1}
    assert small_audit().observed(before, torch.tensor(change, dtype=F64)) is before


# --- estimates ------------------------------------------------------------------------------------------------------

KEYS_OUT = {"audit_canaries"} | {f"epsilon_empirical_{w}{end}" for w in ("final", "iterates")
                                 for end in ("", "_low", "_high")} | set(LOWER_BOUNDS) | {
    f"epsilon_equal_variance_final{end}" for end in ("", "_low", "_high")} | {"audit_confidence"}


def test_nothing_observed_is_nan_everywhere_but_the_count():
    w = torch.tensor([1.0, 2, 3, 4], dtype=F64)
    out = small_audit().estimates({}, w, w.clone(), 3)
    assert set(out) == KEYS_OUT and out["audit_canaries"] == 3.0 and out["audit_confidence"] == 0.95
    assert all(math.isnan(v) for k, v in out.items() if k not in ("audit_canaries", "audit_confidence"))


def test_equal_variances_give_the_gaussian_mechanism_epsilon():
    # seen 2, 3, 4, 5 and unseen 1, 2, 3, 4 (the same sample sd, sqrt(5/3)): mu = 1 / sqrt(5/3); the final model
    # did not move (NaN there) and the iterates are still estimated
    directions = torch.eye(8, dtype=F64)
    state = {ITERATE_MAX: torch.tensor([2.0, 3, 4, 5, 1, 2, 3, 4], dtype=F64)}
    w = torch.ones(8, dtype=F64)
    out = small_audit(AuditSpec(4, 4, 0), directions=directions).estimates(state, w, w.clone(), 1)
    assert set(out) == KEYS_OUT and out["audit_canaries"] == 4.0
    expected = gaussian_mechanism_epsilon(1 / math.sqrt(5 / 3), DELTA)
    assert out["epsilon_empirical_iterates"] == pytest.approx(expected, rel=1e-6)
    assert math.isnan(out["epsilon_empirical_iterates_low"]) and math.isnan(out["epsilon_empirical_iterates_high"])
    assert math.isnan(out["epsilon_empirical_final"]) and math.isnan(out["epsilon_lower_bound_final"])


def test_the_bootstrap_interval_is_drawn_and_reproducible():
    directions = torch.eye(8, dtype=F64)
    state = {ITERATE_MAX: torch.tensor([2.0, 3, 4, 5, 1, 2, 3, 4], dtype=F64)}
    w = torch.ones(8, dtype=F64)
    made = small_audit(AuditSpec(4, 4, 5), directions=directions, seed=3)
    first, again = made.estimates(state, w, w.clone(), 2), made.estimates(state, w, w.clone(), 2)
    low, high = first["epsilon_empirical_iterates_low"], first["epsilon_empirical_iterates_high"]
    assert not math.isnan(low) and not math.isnan(high) and low <= high
    assert (again["epsilon_empirical_iterates_low"], again["epsilon_empirical_iterates_high"]) == (low, high)


def test_the_final_models_equal_variance_estimate_and_its_t_interval():
    # the final change (2, 3, 4, 5, 1, 2, 3, 4) against the unit axes: cosines proportional to it, so seen 2..5 and
    # unseen 1..4 (sd sqrt(5/3) each) give mu = 1 / sqrt(5/3); its standard error sqrt(1/4 + 1/4 + mu^2 / 6), and
    # the 95% interval mu -+ t(0.975, 3) x that crosses 0 (its epsilon's lower end 0)
    directions, w0 = torch.eye(8, dtype=F64), torch.zeros(8, dtype=F64)
    w = torch.tensor([2.0, 3, 4, 5, 1, 2, 3, 4], dtype=F64)
    out = small_audit(AuditSpec(4, 4, 0), directions=directions).estimates({}, w, w0, 1)
    mu = 1 / math.sqrt(5 / 3)
    half = 3.182446305284263 * math.sqrt(0.5 + mu**2 / 6)
    assert out["epsilon_equal_variance_final"] == pytest.approx(gaussian_mechanism_epsilon(mu, DELTA), rel=1e-6)
    assert out["epsilon_equal_variance_final_low"] == 0.0
    assert out["epsilon_equal_variance_final_high"] == pytest.approx(gaussian_mechanism_epsilon(mu + half, DELTA),
                                                                     rel=1e-6)
    assert math.isnan(out["epsilon_empirical_iterates"])  # no round observed


def lower_bound_audit():
    # K = U = 20 in R^3; the sent directions at cosine 0.8 with the final change (2, 0, 0), the unseen at -0.8;
    # iterates: the sent 0.49 .. 0.51, the unseen -0.01 .. 0.01 (every unseen below every sent)
    sent = torch.tensor([0.8, 0.6, 0.0], dtype=F64).expand(20, 3)
    unseen = torch.tensor([-0.8, 0.6, 0.0], dtype=F64).expand(20, 3)
    spread = torch.linspace(-0.01, 0.01, 20, dtype=F64)
    state = {ITERATE_MAX: torch.cat([0.5 + spread, spread])}
    made = small_audit(AuditSpec(20, 20, 0, 0.5), devices=4, directions=torch.cat([sent, unseen]).contiguous())
    return made.estimates(state, torch.tensor([1.0, 0, 0], dtype=F64), torch.tensor([-1.0, 0, 0], dtype=F64), 5)


def test_the_iterates_lower_bound_in_closed_form():
    # alpha = (1 - 0.5) / 2 per rate, / 20 thresholds (Bonferroni); at the lowest threshold no seen falls below and
    # no unseen above: both Clopper-Pearson bounds are 1 - a^(1/20), and epsilon >= log(a^(1/20) - delta) - log(1 -
    # a^(1/20))
    a = 0.25 / 20
    root = a ** (1 / 20)
    out = lower_bound_audit()
    assert out["epsilon_lower_bound_iterates"] == pytest.approx(math.log(root - DELTA) - math.log(1 - root),
                                                                rel=1e-9)
    assert out["epsilon_empirical_iterates"] == math.inf  # mu = 0.5 / 0.0062: far past 700


def test_the_final_lower_bound_uses_the_exact_null_of_a_cosine():
    # in R^3 a random direction's cosine is uniform on [-1, 1]: P[cos >= 0.8] = 0.1 exactly (the unseen directions,
    # all at -0.8, would say otherwise); the false negatives' bound is 1 - a^(1/20) as above
    a = 0.25 / 20
    fnr = 1 - a ** (1 / 20)
    expected = max(math.log(1 - DELTA - fnr) - math.log(0.1), math.log(1 - DELTA - 0.1) - math.log(fnr))
    out = lower_bound_audit()
    assert out["epsilon_lower_bound_final"] == pytest.approx(expected, rel=1e-9)
    assert out["audit_canaries"] == 20.0 and set(out) == KEYS_OUT


# --- exceeded -------------------------------------------------------------------------------------------------------

def bounds(final=math.nan, iterates=math.nan, equal=math.nan):
    return {"epsilon_lower_bound_final": final, "epsilon_lower_bound_iterates": iterates,
            "epsilon_equal_variance_final_low": equal, "epsilon_empirical_final": 99.0,
            "epsilon_equal_variance_final": 99.0}


def test_the_equal_variance_lower_end_is_evidence_and_its_estimate_is_not():
    assert exceeded(bounds(0.5, 0.5, 2.0), {"epsilon_add_remove": 1.5}) == 1.0
    assert exceeded(bounds(0.5, 0.5, 1.0), {"epsilon_add_remove": 1.5}) == 0.0  # the estimates (99) do not count
    assert exceeded(bounds(equal=1.0), {"epsilon_add_remove": 1.5}) == 0.0


def test_an_infinite_lower_bound_is_a_leak_not_a_gap():
    assert exceeded(bounds(equal=math.inf), {"epsilon_add_remove": 1.5}) == 1.0


def test_the_add_remove_epsilon_is_the_claim_where_there_is_one():
    assert exceeded(bounds(2.0), {"epsilon_add_remove": 5.0, "epsilon": 1.0}) == 0.0
    assert exceeded(bounds(2.0), {"epsilon_add_remove": 1.0, "epsilon": 5.0}) == 1.0


def test_else_the_claimed_epsilon():
    assert exceeded(bounds(iterates=2.0), {"epsilon": 1.0}) == 1.0
    assert exceeded(bounds(iterates=2.0), {"epsilon": 3.0}) == 0.0


def test_the_larger_bound_counts():
    assert exceeded(bounds(0.5, 2.0), {"epsilon": 1.0}) == 1.0
    assert exceeded(bounds(2.0, 0.5), {"epsilon": 1.0}) == 1.0
    assert exceeded(bounds(0.5, math.nan), {"epsilon": 1.0}) == 0.0


def test_a_bound_equal_to_the_claim_is_not_above_it(caplog):
    with caplog.at_level(logging.WARNING, logger="fedarena.privacy.audit"):
        assert exceeded(bounds(1.5, 1.5), {"epsilon": 1.5}) == 0.0
    assert caplog.records == []


def test_nothing_measured_or_no_finite_claim_is_nan():
    assert math.isnan(exceeded(bounds(), {"epsilon": 1.0}))
    assert math.isnan(exceeded(bounds(2.0), {"epsilon": math.inf}))
    assert math.isnan(exceeded(bounds(2.0), {"epsilon_add_remove": math.inf, "epsilon": 1.0}))
    assert math.isnan(exceeded(bounds(2.0), {}))


def test_a_bound_above_the_claim_warns(caplog):
    with caplog.at_level(logging.WARNING, logger="fedarena.privacy.audit"):
        assert exceeded(bounds(2.5, 0.1), {"epsilon": 1.25}) == 1.0
    assert [(r.name, r.levelno) for r in caplog.records] == [("fedarena.privacy.audit", logging.WARNING)]
    assert caplog.records[0].getMessage() == (
        "privacy audit: a measured lower bound on epsilon (2.5) lies above the claim (1.25): the mechanism spends "
        "more than its accountant says")


def test_the_refusal_words_are_exact():
    # the allowed keys' line as one regex too (the existing suite matches on its parts)
    assert re.fullmatch(re.escape(f"w: unknown audit key(s) ['x']; allowed: {ALLOWED}"), refused({"x": 1}, "w"))
