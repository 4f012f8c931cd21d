"""fedarena/privacy/base.py checked exactly, one behaviour per test (make mutants MODULE=fedarena/privacy/base.py):
``NONE`` and ``ACCOUNTANTS``; the kinds of the ``PRIVACY`` and ``ACCOUNTANT`` registries and their built-in entries;
``PrivacySpec``'s defaults (as ``none`` and ``local`` leave them), frozenness, declared types and derived facts
(``private``, ``central``, ``local``, ``canaries``); ``checked``: every refusal word for word and each bound's edge
(noise_multiplier 0 taken and inf refused, target_epsilon, clip, delta, target_quantile, clip_lr and count_noise
open at 0, the finite or (0, 1) upper edge, NaN), noise_multiplier xor target_epsilon, and whole numbers read as
floats; ``canonical_audit`` (no audit, a null one, an audit in one spelling, its refusal naming the mechanism);
``PRIVACY_SECTION`` (its kind, keys and resolution) and ``privacy_from``."""

import dataclasses
import math
import re
import typing

import pytest

from fedarena.errors import ConfigError
from fedarena.privacy import accounting as _registers_the_accountants  # noqa: F401
from fedarena.privacy.audit import AuditSpec
from fedarena.privacy.base import (
    ACCOUNTANT,
    ACCOUNTANTS,
    NONE,
    PRIVACY,
    PRIVACY_SECTION,
    PrivacySpec,
    canonical_audit,
    checked,
    privacy_from,
)
from fedarena.privacy.mechanisms import central_dp, local_dp, no_privacy
from fedarena.registry import UnknownNameError

GIVE = ("give noise_multiplier (noise standard deviation / clip) or target_epsilon (calibrated before training), "
        "not ")


def refused(message: str):
    """The ConfigError whose whole message is ``message``."""
    return pytest.raises(ConfigError, match="^" + re.escape(message) + "$")


# --- constants and registries ----------------------------------------------------------------------------------------

def test_the_mechanism_without_privacy_is_named_none():
    assert NONE == "none"


def test_the_accountants_are_rdp_then_pld():
    assert ACCOUNTANTS == ("rdp", "pld")


def test_the_registries_kinds_name_them_in_their_errors():
    assert PRIVACY.kind == "privacy" and ACCOUNTANT.kind == "accountant"
    with pytest.raises(UnknownNameError, match=r"^unknown privacy 'centrl' \(did you mean 'central'\?\); available: "):
        PRIVACY.get("centrl")
    with pytest.raises(UnknownNameError, match=r"^unknown accountant 'rpd' \(did you mean 'rdp'\?\); available: "):
        ACCOUNTANT.get("rpd")


def test_the_built_in_mechanisms_and_accountants():
    assert PRIVACY.built_in() == ["central", "local", "none"]
    assert ACCOUNTANT.built_in() == ["pld", "rdp"]
    assert PRIVACY.get("none") is no_privacy and PRIVACY.get("central") is central_dp and PRIVACY.get("local") is local_dp


# --- PrivacySpec -----------------------------------------------------------------------------------------------------

def test_a_spec_defaults_to_no_privacy_with_every_documented_default():
    spec = PrivacySpec()
    assert spec.name == "none"
    assert spec.noise_multiplier is None and spec.target_epsilon is None and spec.delta is None
    assert spec.clip == 1.0 and spec.accountant == "rdp"
    assert spec.adaptive is False and spec.secure_aggregation is False
    assert spec.target_quantile == 0.5 and spec.clip_lr == 0.2
    assert spec.count_noise is None and spec.audit is None


def test_the_none_mechanism_is_the_default_spec():
    assert no_privacy() == PrivacySpec()
    assert no_privacy(secure_aggregation=True) == PrivacySpec(secure_aggregation=True)


def test_local_dp_leaves_adaptive_clipping_at_the_specs_defaults():
    spec = local_dp(noise_multiplier=1.0)
    assert spec.adaptive is False and spec.target_quantile == 0.5 and spec.clip_lr == 0.2 and spec.count_noise is None
    assert spec.secure_aggregation is False and spec.audit is None


def test_a_spec_is_frozen_and_hashable():
    spec = PrivacySpec()
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.clip = 2.0
    assert hash(spec) == hash(PrivacySpec())


def test_the_specs_declared_types_resolve():
    assert typing.get_type_hints(PrivacySpec) == {
        "name": str, "noise_multiplier": float | None, "target_epsilon": float | None, "clip": float,
        "delta": float | None, "accountant": str, "adaptive": bool, "target_quantile": float, "clip_lr": float,
        "count_noise": float | None, "secure_aggregation": bool, "audit": AuditSpec | None}


@pytest.mark.parametrize("name, private, central, local", [
    ("none", False, False, False), ("central", True, True, False), ("local", True, False, True)])
def test_which_mechanism_a_spec_names(name, private, central, local):
    spec = PrivacySpec(name)
    assert spec.private is private and spec.central is central and spec.local is local


def test_a_spec_counts_its_audits_canaries():
    assert PrivacySpec().canaries == 0
    assert PrivacySpec("central", 1.0, audit=AuditSpec(canaries=3, unseen=5)).canaries == 3


# --- checked: which of noise_multiplier and target_epsilon -----------------------------------------------------------

def test_neither_noise_multiplier_nor_target_epsilon_is_refused():
    with refused("privacy 'central': " + GIVE + "neither"):
        central_dp()
    with refused("privacy 'none': " + GIVE + "neither"):
        checked(PrivacySpec())


def test_both_noise_multiplier_and_target_epsilon_are_refused():
    with refused("privacy 'local': " + GIVE + "both"):
        local_dp(noise_multiplier=1.0, target_epsilon=2.0)


def test_either_one_alone_is_taken():
    assert central_dp(noise_multiplier=1.5).noise_multiplier == 1.5
    spec = central_dp(target_epsilon=3.0)
    assert spec.target_epsilon == 3.0 and spec.noise_multiplier is None


# --- checked: each value's bounds ------------------------------------------------------------------------------------

def test_noise_multiplier_zero_and_below_one_are_taken():
    assert central_dp(noise_multiplier=0.0).noise_multiplier == 0.0
    assert central_dp(noise_multiplier=0.5).noise_multiplier == 0.5


@pytest.mark.parametrize("value", [-0.5, math.inf, math.nan])
def test_noise_multiplier_negative_infinite_or_nan_is_refused(value):
    with refused(f"privacy 'central': noise_multiplier must be a finite number >= 0 (0: clipping only, epsilon "
                 f"infinite), got {value!r}"):
        central_dp(noise_multiplier=value)


def test_target_epsilon_below_one_is_taken():
    assert local_dp(target_epsilon=0.5).target_epsilon == 0.5


@pytest.mark.parametrize("value", [0.0, -1.0, math.inf, math.nan])
def test_target_epsilon_not_positive_and_finite_is_refused(value):
    with refused(f"privacy 'local': target_epsilon must be a finite number > 0, got {value!r}"):
        local_dp(target_epsilon=value)


def test_clip_below_one_is_taken():
    assert central_dp(noise_multiplier=1.0, clip=0.5).clip == 0.5


@pytest.mark.parametrize("value", [0.0, -1.0, math.inf, math.nan])
def test_clip_not_positive_and_finite_is_refused(value):
    with refused(f"privacy 'central': clip (the L2 bound of an update) must be a finite number > 0, got {value!r}"):
        central_dp(noise_multiplier=1.0, clip=value)


def test_delta_inside_the_open_unit_interval_is_taken():
    assert central_dp(noise_multiplier=1.0, delta=1e-5).delta == 1e-5
    assert central_dp(noise_multiplier=1.0, delta=0.999).delta == 0.999
    assert central_dp(noise_multiplier=1.0).delta is None


@pytest.mark.parametrize("value", [0.0, 1.0, 1.5, -0.1, math.nan])
def test_delta_outside_the_open_unit_interval_is_refused(value):
    with refused(f"privacy 'central': delta must be in (0, 1) (null: 1e-5, or N^-1.1 for N devices where smaller), "
                 f"got {value!r}"):
        central_dp(noise_multiplier=1.0, delta=value)


def test_both_accountants_are_taken():
    assert central_dp(noise_multiplier=1.0).accountant == "rdp"
    assert central_dp(noise_multiplier=1.0, accountant="rdp").accountant == "rdp"
    assert local_dp(noise_multiplier=1.0, accountant="pld").accountant == "pld"


def test_an_unknown_accountant_is_refused_with_the_two_allowed():
    with refused("privacy 'central': accountant must be one of rdp, pld, got 'RDP'"):
        central_dp(noise_multiplier=1.0, accountant="RDP")


def test_target_quantile_inside_the_open_unit_interval_is_taken():
    assert central_dp(noise_multiplier=1.0, adaptive=True, target_quantile=0.01).target_quantile == 0.01
    assert central_dp(noise_multiplier=1.0, adaptive=True, target_quantile=0.99).target_quantile == 0.99


@pytest.mark.parametrize("value", [0.0, 1.0, 1.5, -0.5, math.nan])
def test_target_quantile_outside_the_open_unit_interval_is_refused(value):
    with refused(f"privacy 'central': target_quantile must be in (0, 1), got {value!r}"):
        central_dp(noise_multiplier=1.0, adaptive=True, target_quantile=value)


def test_clip_lr_below_one_is_taken():
    assert central_dp(noise_multiplier=1.0, clip_lr=0.5).clip_lr == 0.5


@pytest.mark.parametrize("value", [0.0, -0.2, math.inf, math.nan])
def test_clip_lr_not_positive_and_finite_is_refused(value):
    with refused(f"privacy 'central': clip_lr must be a finite number > 0, got {value!r}"):
        central_dp(noise_multiplier=1.0, clip_lr=value)


def test_count_noise_below_one_or_null_is_taken():
    assert central_dp(noise_multiplier=1.0, count_noise=0.5).count_noise == 0.5
    assert central_dp(noise_multiplier=1.0).count_noise is None


@pytest.mark.parametrize("value", [0.0, -1.0, math.inf, math.nan])
def test_count_noise_not_positive_and_finite_is_refused(value):
    with refused(f"privacy 'central': count_noise must be a finite number > 0 (null: clients_per_round / 20), "
                 f"got {value!r}"):
        central_dp(noise_multiplier=1.0, count_noise=value)


# --- checked: what it returns ----------------------------------------------------------------------------------------

def test_whole_numbers_read_as_floats():
    spec = central_dp(noise_multiplier=2, clip=3, clip_lr=1, count_noise=4)
    assert [type(v) for v in (spec.noise_multiplier, spec.clip, spec.clip_lr, spec.count_noise)] == [float] * 4
    assert (spec.noise_multiplier, spec.clip, spec.clip_lr, spec.count_noise) == (2.0, 3.0, 1.0, 4.0)
    calibrated = local_dp(target_epsilon=8)
    assert type(calibrated.target_epsilon) is float and calibrated.target_epsilon == 8.0
    assert calibrated.noise_multiplier is None and calibrated.delta is None


def test_checked_keeps_every_other_value():
    spec = PrivacySpec("central", 1.0, None, 0.5, 1e-6, "pld", True, 0.25, 0.1, 2.0, True, AuditSpec(2, 3))
    assert checked(spec) == spec
    assert checked(PrivacySpec("local", None, 4.0)) == PrivacySpec("local", None, 4.0)


def test_a_central_spec_holds_every_value_given():
    spec = central_dp(noise_multiplier=1.0, clip=0.5, delta=1e-6, accountant="pld", adaptive=True,
                      target_quantile=0.25, clip_lr=0.1, count_noise=2.0, secure_aggregation=True,
                      audit={"canaries": 2, "unseen": 3})
    assert spec == PrivacySpec("central", 1.0, None, 0.5, 1e-6, "pld", True, 0.25, 0.1, 2.0, True, AuditSpec(2, 3))


# --- canonical_audit -------------------------------------------------------------------------------------------------

def test_a_section_without_an_audit_is_left_as_it_is():
    section = {"name": "none", "secure_aggregation": False}
    assert canonical_audit(section) is section
    nulled = {"name": "central", "noise_multiplier": 1.0, "audit": None}
    assert canonical_audit(nulled) is nulled


def test_an_audit_is_spelt_without_its_defaults():
    section = {"name": "central", "noise_multiplier": 1.0,
               "audit": {"canaries": 2, "unseen": 3, "resamples": 200, "confidence": 0.9}}
    assert canonical_audit(section) == {"name": "central", "noise_multiplier": 1.0,
                                        "audit": {"canaries": 2, "unseen": 3, "confidence": 0.9}}
    assert section["audit"] == {"canaries": 2, "unseen": 3, "resamples": 200, "confidence": 0.9}  # not mutated


def test_a_wrong_audit_is_refused_naming_the_mechanism():
    with refused("privacy 'local': audit.canaries must be a whole number >= 2 (canary clients inserted (>= 2)), "
                 "got 1"):
        canonical_audit({"name": "local", "noise_multiplier": 1.0, "audit": {"canaries": 1, "unseen": 3}})


# --- PRIVACY_SECTION and privacy_from --------------------------------------------------------------------------------

def test_the_section_kind_reads_the_mechanisms_keywords():
    assert PRIVACY_SECTION.kind == "privacy" and PRIVACY_SECTION.registry is PRIVACY
    assert PRIVACY_SECTION.canonical is canonical_audit
    assert PRIVACY_SECTION.keys("none") == {"secure_aggregation"}
    assert PRIVACY_SECTION.keys("local") == {"noise_multiplier", "target_epsilon", "clip", "delta", "accountant",
                                             "secure_aggregation", "audit"}


def test_a_section_without_a_name_is_refused_as_a_privacy_section():
    with refused("a privacy section needs a 'name'; available: " + ", ".join(PRIVACY.names())):
        PRIVACY_SECTION.resolve({})


def test_an_unknown_key_is_refused_for_the_privacy_mechanism():
    with pytest.raises(ConfigError, match=r"^unknown parameter\(s\) \['adaptive'\] for privacy 'local'; allowed: "
                                          r"accountant, audit, clip, delta, noise_multiplier, secure_aggregation, "
                                          r"target_epsilon$"):
        PRIVACY_SECTION.resolve({"name": "local", "noise_multiplier": 1.0, "adaptive": True})


def test_a_section_resolves_with_its_defaults_and_its_audit_in_one_spelling():
    resolved = PRIVACY_SECTION.resolve({"name": "local", "noise_multiplier": 1.0,
                                        "audit": {"canaries": 2, "unseen": 4, "resamples": 200}})
    assert resolved == {"name": "local", "noise_multiplier": 1.0, "target_epsilon": None, "clip": 1.0, "delta": None,
                        "accountant": "rdp", "secure_aggregation": False, "audit": {"canaries": 2, "unseen": 4}}


def test_privacy_from_builds_the_named_mechanisms_spec():
    assert privacy_from({"name": "none"}) == PrivacySpec()
    assert privacy_from({"name": "none", "secure_aggregation": True}) == PrivacySpec(secure_aggregation=True)
    assert privacy_from({"name": "local", "noise_multiplier": 1.0, "clip": 0.5, "audit": {"canaries": 2, "unseen": 4}}) \
        == PrivacySpec("local", 1.0, None, 0.5, audit=AuditSpec(2, 4))


def test_privacy_from_a_resolved_section_round_trips():
    resolved = PRIVACY_SECTION.resolve({"name": "central", "target_epsilon": 5.0, "adaptive": True})
    assert privacy_from(resolved) == PrivacySpec("central", None, 5.0, adaptive=True)


def test_privacy_from_refuses_an_unknown_mechanism():
    with pytest.raises(UnknownNameError, match=r"^unknown privacy 'locl' \(did you mean 'local'\?\)"):
        privacy_from({"name": "locl"})

