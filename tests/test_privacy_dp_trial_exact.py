"""fedarena/privacy/dp_trial.py checked exactly (make mutants MODULE=fedarena/privacy/dp_trial.py): every refusal of
``check_privacy`` word for word, with the lists of what each mechanism composes with; what each one lets through
(the refusals' edges); the plan of a trial (delta, the count's noise, the noise multiplier given or calibrated, the
accountant's support); its run properties and add-or-remove epsilon; what the devices send; and central DP's round
(the clip, the noise z_Delta bound sensitivity / 2 recomputed from the same stream, adaptive clipping's next bound
in the server's state)."""

import dataclasses
from contextlib import contextmanager

import numpy as np
import pytest
import torch

from fedarena.attacks.base import ATTACKS, attack
from fedarena.errors import ConfigError
from fedarena.methods.aggregators.base import PRE_AGGREGATORS, pre_aggregator
from fedarena.methods.aggregators.builder import make_aggregator
from fedarena.methods.base import METHOD_SECTION, METHODS, Method, method_from
from fedarena.methods.basic import FedAvg
from fedarena.privacy import accounting
from fedarena.privacy.dp_trial import (
    CLIP_STATE,
    COUNT_NOISE_SHARE,
    READS,
    CentralRule,
    PrivacyPlan,
    check_privacy,
    dp_rules,
    method_reads,
    privacy_plan,
    private_attacks,
    private_methods,
    sum_rules,
    uncovered,
)
from fedarena.privacy.mechanisms import central_dp, local_dp, no_privacy
from fedarena.privacy.noise import clip_rows, local_privatize

F64 = torch.float64
CENTRAL, LOCAL = central_dp(noise_multiplier=1.0), local_dp(noise_multiplier=1.0)
AUDIT = {"canaries": 2, "unseen": 2}

# the lists the refusals name (the registries' built-in entries)
CENTRAL_METHODS = "apfl, ditto, ditto_finetune, ewc, fedprox, fedtilt, finetuning, global, l2sgd, mapper, per_fedavg, skl"
AUDIT_METHODS = "apfl, ditto, ditto_finetune, ewc, fedprox, finetuning, global, mapper, per_fedavg, skl"
CENTRAL_ATTACKS = ("a1, a2, a3, a3fl, badnets, dba, edge_case, iba, model_replacement, none, persistent_gaussian_noise, "
                   "persistent_random_corruption, sign_flip, targeted_flip, fang (as its knowledge says), min_max (as "
                   "its knowledge says), min_sum (as its knowledge says)")
LOCAL_ATTACKS = ("a1, a2, a3, a3fl, adaptive, alie, badnets, dba, edge_case, fang, iba, ipm, min_max, min_sum, "
                 "model_replacement, neurotoxin, none, persistent_gaussian_noise, persistent_random_corruption, "
                 "sign_flip, tailored_bulyan, tailored_krum, tailored_median, targeted_flip")
DP_RULES = "clipping, geometric_median, k_norm, krum, mean, median, multi_krum, norm_bound, trimmed_mean, weighted_mean"
SUM_RULES = "crfl, mean, norm_bound (max_norm set), weak_dp (max_norm set), weighted_mean"

LOSSES = "each device's training loss at the global model, computed on its data without noise"
LOCAL_COVERS = "but local DP's noise covers only what the devices send (each update, noised on its device)"
CENTRAL_COVERS = ("but central DP's noise covers only one device's clipped update, as far as the rule's sensitivity "
                  "says it moves the output")
BEFORE_CLIP = (" (it runs before the server clips: one honest device then moves the attackers' rows too, beyond the "
               "rule's sensitivity)")


def method(name, **params):
    return method_from(METHOD_SECTION.resolve({"name": name, **params}))


def rule(name, f=1, **section):
    return make_aggregator({"name": name, **section}, f=f)


def refusal(spec, sampling="uniform", who=None, aggregate=None, attack_section=None) -> str:
    with pytest.raises(ConfigError) as err:
        check_privacy(spec, sampling, who or FedAvg(), aggregate, attack_section)
    return str(err.value)


@contextmanager
def registered(registry, name, obj):
    """``obj`` registered as ``name`` for the block (a plugin's component), then removed."""
    registry.add(name, obj)
    try:
        yield
    finally:
        registry.remove(name)


# ---- what each mechanism composes with --------------------------------------------------------------------------

def test_the_lists_of_methods_attacks_and_rules_each_mechanism_composes_with():
    assert ", ".join(private_methods(CENTRAL)) == CENTRAL_METHODS
    assert ", ".join(private_methods(LOCAL)) == CENTRAL_METHODS  # the same built-in ones; a plugin's may differ
    assert private_methods(no_privacy()) == [n for n in METHODS.names() if METHODS.get(n).uses_aggregator]
    assert private_attacks(CENTRAL) == CENTRAL_ATTACKS and private_attacks(LOCAL) == LOCAL_ATTACKS
    assert ", ".join(dp_rules()) == DP_RULES and ", ".join(sum_rules()) == SUM_RULES


def test_a_plugin_method_that_reweights_the_devices_but_reads_nothing_else_composes_with_local_dp_only():
    class Reweighting(Method):
        name = "reweighting_probe"
        reweights_clients = True

    with registered(METHODS, "reweighting_probe", Reweighting):
        assert "reweighting_probe" in private_methods(LOCAL)
        assert "reweighting_probe" not in private_methods(CENTRAL)


def test_what_a_method_reads_is_its_declaration_and_losses_where_it_needs_them_once():
    class NeedsLosses(Method):
        needs_losses = True

    class ReadsBoth(Method):
        needs_losses = True
        device_reads = ("device_data", "losses")

    assert method_reads(NeedsLosses) == ("losses",) and method_reads(NeedsLosses()) == ("losses",)
    assert method_reads(ReadsBoth) == ("device_data", "losses")
    assert method_reads(FedAvg) == () and method_reads(method("term")) == ("losses",)


def test_what_each_mechanism_covers():
    reads = ("losses", "device_data", "honest_updates", "undeclared", "gpu_time")
    assert uncovered(LOCAL, reads) == ["losses", "device_data", "undeclared", "gpu_time"]
    assert uncovered(CENTRAL, reads) == list(reads)
    assert uncovered(no_privacy(), reads) == []
    assert READS == {"losses": LOSSES, "device_data": "raw training data of the devices",
                     "honest_updates": "the honest devices' updates of the round",
                     "undeclared": "values it does not declare (register it with attack(name, device_reads=...))"}


# ---- check_privacy: the method and the section ------------------------------------------------------------------

def test_dp_needs_uniform_sampling_and_without_dp_any_sampling_goes():
    assert refusal(LOCAL, "proportional") == (
        "privacy 'local' needs sampling: uniform (a fixed number of devices drawn uniformly without replacement, the "
        "sampling its accountant covers); got sampling=proportional")
    check_privacy(LOCAL, "uniform", FedAvg(), rule("mean"))
    check_privacy(no_privacy(), "proportional", FedAvg(), rule("mean"))


def test_a_method_without_global_aggregation_is_refused_under_dp_only():
    assert refusal(CENTRAL, who=method("local")) == (
        "privacy 'central': method 'local' has no global aggregation, so nothing leaves a device to privatize; leave "
        "privacy at none")
    check_privacy(no_privacy(), "uniform", method("local"), None)


def test_central_dp_refuses_a_reweighting_method_pointing_to_local_dp_where_it_takes_the_method():
    head = ("weights the devices by their losses or updates, which DP-FedAvg's noise does not cover; central DP "
            "composes with methods that average the updates (global, ditto, finetuning, fedprox, ...)")
    assert refusal(CENTRAL, who=method("term")) == f"privacy 'central': method 'term' {head}"
    assert refusal(CENTRAL, who=method("fedtilt", q=1.0)) == (
        f"privacy 'central': method 'fedtilt' {head} or use privacy local")
    check_privacy(CENTRAL, "uniform", method("fedtilt", q=0.0), rule("mean"))  # q = 0 weights nobody
    check_privacy(LOCAL, "uniform", method("fedtilt", q=1.0), rule("mean"))


def test_a_method_reading_the_losses_is_refused_under_local_dp_naming_what_it_composes_with():
    assert refusal(LOCAL, who=method("term")) == (
        f"privacy 'local': method 'term' reads {LOSSES}, {LOCAL_COVERS}; local DP composes with methods that read "
        f"only the updates: {CENTRAL_METHODS}")


def test_adaptive_clipping_is_refused_under_secure_aggregation_alone():
    both = central_dp(noise_multiplier=1.0, adaptive=True, secure_aggregation=True)
    assert refusal(both) == (
        "privacy 'central': adaptive clipping under secure aggregation is not modelled (the devices would count the "
        "unclipped updates securely too); use a fixed clip or drop secure_aggregation")
    check_privacy(central_dp(noise_multiplier=1.0, adaptive=True), "uniform", FedAvg(), rule("mean"))
    check_privacy(central_dp(noise_multiplier=1.0, secure_aggregation=True), "uniform", FedAvg(), rule("mean"))


def test_an_audit_needs_the_servers_own_aggregation_and_nothing_is_asked_without_one():
    audited = central_dp(noise_multiplier=1.0, audit=AUDIT)
    assert refusal(audited, who=method("l2sgd")) == (
        "privacy 'central': audit inserts canary clients into the server's aggregation, and method 'l2sgd' has a "
        f"server step of its own; audit composes with {AUDIT_METHODS}")
    assert refusal(local_dp(noise_multiplier=1.0, audit=AUDIT), who=method("l2sgd")).startswith(
        "privacy 'local': audit inserts canary clients")
    check_privacy(audited, "uniform", FedAvg(), rule("mean"))
    check_privacy(CENTRAL, "uniform", method("l2sgd"), rule("mean"))
    check_privacy(no_privacy(), "uniform", method("l2sgd"), None)


# ---- check_privacy: the rule ------------------------------------------------------------------------------------

def test_a_rule_that_reads_more_than_the_updates_is_refused_naming_the_rules_each_mechanism_takes():
    assert refusal(CENTRAL, aggregate=rule("k_loss")) == (
        f"privacy 'central': aggregator 'k_loss' reads {LOSSES}, {CENTRAL_COVERS}; central DP composes with {DP_RULES}")
    assert refusal(LOCAL, aggregate=rule("fltrust")) == (
        f"privacy 'local': aggregator 'fltrust' reads raw training data of the devices, {LOCAL_COVERS}; local DP "
        "composes with every rule that reads only the updates (all but fltrust, k_loss)")
    check_privacy(no_privacy(), "uniform", FedAvg(), rule("k_loss"))


def test_a_pre_aggregator_that_reads_more_than_the_updates_is_refused():
    pre_aggregator("losses_probe", device_reads=("losses",))(lambda updates: updates)
    try:
        assert refusal(LOCAL, aggregate=rule("mean", pre=["losses_probe"])) == (
            f"privacy 'local': pre-aggregator 'losses_probe' reads {LOSSES}, {LOCAL_COVERS}; drop it from "
            "aggregator.pre")
    finally:
        PRE_AGGREGATORS.remove("losses_probe")
    check_privacy(LOCAL, "uniform", FedAvg(), rule("mean", pre=["clip"]))


def test_central_dp_needs_a_rule_of_known_sensitivity_without_pre_aggregators():
    assert refusal(CENTRAL, aggregate=rule("flame")) == (
        "privacy 'central': aggregator 'flame' has no known sensitivity to one device's update, so no noise can be "
        f"calibrated to it; central DP composes with {DP_RULES}, or use privacy local, which composes with every "
        "rule that reads only the updates and removes no device")
    assert refusal(CENTRAL, aggregate=rule("mean", pre=["clip"])) == (
        "privacy 'central': pre-aggregator 'clip' couples the updates before the rule, which the rule's sensitivity "
        "does not cover; drop aggregator.pre under central DP")
    check_privacy(CENTRAL, "uniform", FedAvg(), rule("mean"))
    check_privacy(LOCAL, "uniform", FedAvg(), rule("flame"))


def test_local_dp_refuses_a_rule_that_removes_devices_and_only_local_dp_does():
    assert refusal(LOCAL, aggregate=rule("fldetector")) == (
        "privacy 'local': aggregator 'fldetector' removes devices during the run, so how often a device takes part "
        "(what local DP's accountant counts) is not known before it; use another rule")
    check_privacy(no_privacy(), "uniform", FedAvg(), rule("fldetector"))
    check_privacy(LOCAL, "uniform", FedAvg(), rule("mean"))


def test_secure_aggregation_refuses_a_rule_or_pre_aggregator_that_needs_each_update_and_only_there():
    secure = no_privacy(secure_aggregation=True)
    tail = ("needs each device's update, which secure aggregation hides; under secure_aggregation the server rule "
            f"must need only their sum: {SUM_RULES}")
    assert refusal(secure, aggregate=rule("krum")) == f"privacy 'none': aggregator 'krum' {tail}"
    assert refusal(secure, aggregate=rule("mean", pre=["clip"])) == f"privacy 'none': pre-aggregator 'clip' {tail}"
    assert refusal(secure, aggregate=rule("mean", pre=["clip", "bucketing"])) == (
        f"privacy 'none': pre-aggregator 'clip' {tail}")
    check_privacy(secure, "uniform", FedAvg(), rule("norm_bound", max_norm=1.0))
    check_privacy(no_privacy(), "uniform", FedAvg(), rule("krum"))


# ---- check_privacy: the attack ----------------------------------------------------------------------------------

def test_central_dp_refuses_an_attack_reading_the_honest_updates_pointing_to_local_dp():
    assert refusal(CENTRAL, attack_section={"name": "alie", "level": 0.3}) == (
        f"privacy 'central': attack 'alie' reads the honest devices' updates of the round{BEFORE_CLIP}, "
        f"{CENTRAL_COVERS}; central DP composes with attacks that read only the attackers' own data and updates: "
        f"{CENTRAL_ATTACKS}; or use privacy local (the attack then reads noised updates)")
    check_privacy(LOCAL, "uniform", FedAvg(), None, {"name": "alie", "level": 0.3})
    check_privacy(CENTRAL, "uniform", FedAvg(), None, {"name": "a1", "level": 0.3})


def test_an_attack_reading_raw_device_data_is_refused_by_both_and_not_pointed_to_local_dp():
    assert refusal(CENTRAL, attack_section={"name": "mimic"}) == (
        "privacy 'central': attack 'mimic' reads the honest devices' updates of the round and raw training data of "
        f"the devices{BEFORE_CLIP}, {CENTRAL_COVERS}; central DP composes with attacks that read only the attackers' "
        f"own data and updates: {CENTRAL_ATTACKS}")
    assert refusal(LOCAL, attack_section={"name": "mimic"}) == (
        f"privacy 'local': attack 'mimic' reads raw training data of the devices, {LOCAL_COVERS}; local DP composes "
        f"with attacks that read only the attackers' own data and updates and the noised updates: {LOCAL_ATTACKS}")


def test_an_attack_whose_reads_depend_on_its_options_is_named_with_them():
    section = {"name": "fang", "level": 0.3, "knowledge": "benign_strict"}
    assert refusal(CENTRAL, attack_section=section).startswith(
        "privacy 'central': attack 'fang' (knowledge: benign_strict) reads the honest devices' updates of the round")
    assert refusal(CENTRAL, attack_section={"name": "fang"}).startswith(
        "privacy 'central': attack 'fang' (knowledge: benign) reads")  # its default
    check_privacy(CENTRAL, "uniform", FedAvg(), None, {"name": "fang", "knowledge": "malicious"})


def test_a_plugin_attacks_options_are_all_named_and_listed():
    def reads(*, knowledge="benign", window=3):
        return () if knowledge == "malicious" else ("honest_updates",)

    attack("options_probe", device_reads=reads)(lambda dataset, malicious, rng: None)
    try:
        error = refusal(CENTRAL, attack_section={"name": "options_probe", "window": 5})
        assert error.startswith("privacy 'central': attack 'options_probe' (knowledge: benign, window: 5) reads the "
                                "honest devices' updates of the round (it runs")
        assert error.endswith("min_sum (as its knowledge says), options_probe (as its knowledge, window says); or use "
                              "privacy local (the attack then reads noised updates)")
    finally:
        ATTACKS.remove("options_probe")


def test_an_undeclared_attack_and_an_unknown_read_are_refused_by_both():
    ATTACKS.register("undeclared_probe")(lambda dataset, malicious, rng: None)
    attack("gpu_probe", device_reads=("gpu_time",))(lambda dataset, malicious, rng: None)
    try:
        assert refusal(CENTRAL, attack_section={"name": "undeclared_probe"}) == (
            "privacy 'central': attack 'undeclared_probe' reads values it does not declare (register it with "
            f"attack(name, device_reads=...)), {CENTRAL_COVERS}; central DP composes with attacks that read only the "
            f"attackers' own data and updates: {CENTRAL_ATTACKS}")
        assert refusal(LOCAL, attack_section={"name": "gpu_probe"}) == (
            f"privacy 'local': attack 'gpu_probe' reads 'gpu_time' (no DP mechanism covers it), {LOCAL_COVERS}; local "
            "DP composes with attacks that read only the attackers' own data and updates and the noised updates: "
            f"{LOCAL_ATTACKS}")
        check_privacy(no_privacy(), "uniform", FedAvg(), None, {"name": "undeclared_probe"})
    finally:
        ATTACKS.remove("undeclared_probe")
        ATTACKS.remove("gpu_probe")


# ---- the plan ---------------------------------------------------------------------------------------------------

def test_no_plan_without_dp_and_a_given_noise_multiplier_is_kept_with_the_default_delta():
    assert privacy_plan(no_privacy(), 10, 5, 3) is None
    spec = central_dp(noise_multiplier=1.5)
    assert privacy_plan(spec, 10, 5, 3) == PrivacyPlan(spec, 1.5, 1e-5, 10, 5, None, None)
    # N^-1.1 where that is below 1e-5 (N = 10^5: 10^-5.5); a given delta as given
    assert privacy_plan(spec, 100_000, 5, 3).delta == pytest.approx(10 ** -5.5, rel=1e-12)
    assert privacy_plan(central_dp(noise_multiplier=1.5, delta=1e-3), 10, 5, 3).delta == 1e-3


def test_adaptive_clippings_count_noise_is_clients_per_round_over_20_unless_given():
    assert COUNT_NOISE_SHARE == 20
    assert privacy_plan(central_dp(noise_multiplier=0.5, adaptive=True), 20, 10, 3).count_noise == 0.5
    given = privacy_plan(central_dp(noise_multiplier=0.5, adaptive=True, count_noise=3.0), 20, 10, 3)
    assert given.count_noise == 3.0
    assert privacy_plan(central_dp(noise_multiplier=0.5, count_noise=3.0), 20, 10, 3).count_noise is None  # fixed


def test_a_count_noise_of_half_the_multiplier_is_refused_before_training():
    # z = 0.5, count noise 10 / 20 = 0.25 = z / 2: the count alone spends the whole budget
    with pytest.raises(ConfigError, match=r"count_noise=0.25 must exceed noise_multiplier / 2 = 0.25"):
        privacy_plan(central_dp(noise_multiplier=0.5, adaptive=True), 20, 5, 3)
    # one more device per round: 6 / 20 = 0.3 leaves budget for the updates
    assert privacy_plan(central_dp(noise_multiplier=0.5, adaptive=True), 20, 6, 3).count_noise == 0.3


def test_a_target_epsilon_is_calibrated_for_the_trials_sampling_and_rounds():
    # (every device in every round: no sampling event, a fast search)
    spec = central_dp(target_epsilon=5.0, delta=1e-3)
    plan = privacy_plan(spec, 10, 10, 3)
    assert plan.noise_multiplier == accounting.calibrate("rdp", 5.0, 1e-3, ("central", 10, 10, 3, None))
    assert plan.epsilon(3) == pytest.approx(5.0, rel=1e-3) and plan.epsilon(3) <= 5.0 * (1 + 1e-6)
    # local: the device taking part most, after the last round
    local = privacy_plan(local_dp(target_epsilon=5.0, delta=1e-3), 10, 5, 3, np.array([0, 1, 2, 2]))
    assert local.noise_multiplier == accounting.calibrate("rdp", 5.0, 1e-3, ("local", 2))


def test_pld_is_refused_for_sampling_without_replacement_and_taken_otherwise():
    pld = central_dp(noise_multiplier=1.0, accountant="pld")
    with pytest.raises(ConfigError, match="privacy accountant 'pld' cannot account for SampledWithoutReplacementDpEvent"):
        privacy_plan(pld, 10, 5, 3)
    assert privacy_plan(pld, 10, 10, 3).noise_multiplier == 1.0
    assert privacy_plan(local_dp(noise_multiplier=1.0, accountant="pld"), 10, 5, 3,
                        np.array([0, 1, 1, 2])).noise_multiplier == 1.0


def test_plans_are_frozen():
    plan = privacy_plan(CENTRAL, 10, 5, 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.delta = 0.5
    central = plan.server_rule(rule("mean"), {}, torch.Generator(), torch.Generator())
    with pytest.raises(dataclasses.FrozenInstanceError):
        central.server = {}


# ---- epsilon and the run properties -----------------------------------------------------------------------------

def test_the_properties_are_epsilon_delta_and_z_without_an_audit():
    plan = PrivacyPlan(CENTRAL, 1.5, 1e-3, 10, 10, None, None)
    assert plan.properties(2) == {"epsilon": accounting.central_epsilon("rdp", 1.5, 10, 10, 2, 1e-3),
                                  "delta": 1e-3, "noise_multiplier": 1.5}
    assert plan.add_remove_computable is True


def test_an_audited_run_adds_the_add_or_remove_epsilon_where_every_device_takes_part():
    spec = central_dp(noise_multiplier=1.5, audit=AUDIT, adaptive=True, count_noise=2.0)
    full = PrivacyPlan(spec, 1.5, 1e-3, 10, 10, 2.0, None)
    assert full.add_remove_computable is True
    assert full.properties(2) == {
        "epsilon": accounting.central_epsilon("rdp", 1.5, 10, 10, 2, 1e-3, 2.0), "delta": 1e-3,
        "noise_multiplier": 1.5, "epsilon_add_remove": accounting.add_remove_epsilon("pld", 1.5, 2, 1e-3, 2.0),
        "epsilon_add_remove_rdp": accounting.add_remove_epsilon("rdp", 1.5, 2, 1e-3, 2.0)}
    sampled = PrivacyPlan(spec, 1.5, 1e-3, 10, 9, 2.0, None)
    assert sampled.add_remove_computable is False and "epsilon_add_remove" not in sampled.properties(2)


def test_local_dp_counts_the_rounds_of_the_device_that_took_part_most():
    spec = local_dp(noise_multiplier=2.0, audit=AUDIT)
    plan = PrivacyPlan(spec, 2.0, 1e-3, 10, 5, None, np.array([0, 1, 1, 2]))
    assert plan.add_remove_computable is True  # a device's own releases, whatever the sampling
    assert plan.epsilon(2) == accounting.local_epsilon("rdp", 2.0, 1, 1e-3)
    assert plan.epsilon_add_remove(2, "rdp") == accounting.add_remove_epsilon("rdp", 2.0, 1, 1e-3)
    assert plan.properties(3)["epsilon_add_remove"] == accounting.add_remove_epsilon("pld", 2.0, 2, 1e-3)
    assert plan.properties(3)["epsilon_add_remove_rdp"] == accounting.add_remove_epsilon("rdp", 2.0, 2, 1e-3)
    assert plan.epsilon_add_remove(2, "pld") < plan.epsilon_add_remove(3, "pld")


# ---- the round ----------------------------------------------------------------------------------------------------

UPDATES = torch.tensor([[3.0, 4.0, 0.0, 0.0, 0.0], [0.3, 0.0, 0.4, 0.0, 0.0], [0.0, 0.0, 0.0, 0.6, 0.8]], dtype=F64)


def test_what_the_devices_send_under_each_mechanism():
    local = PrivacyPlan(local_dp(noise_multiplier=2.0, clip=0.5), 2.0, 1e-3, 10, 3, None, np.zeros(2, dtype=int))
    sent = local.before_sending(UPDATES, torch.Generator().manual_seed(4))
    torch.testing.assert_close(sent, local_privatize(UPDATES, 0.5, 2.0, torch.Generator().manual_seed(4)),
                               rtol=0, atol=0)
    secure = PrivacyPlan(central_dp(noise_multiplier=2.0, clip=0.5, secure_aggregation=True), 2.0, 1e-3, 10, 3,
                         None, None)
    torch.testing.assert_close(secure.before_sending(UPDATES, torch.Generator()), clip_rows(UPDATES, 0.5),
                               rtol=0, atol=0)
    central = PrivacyPlan(central_dp(noise_multiplier=2.0, clip=0.5), 2.0, 1e-3, 10, 3, None, None)
    assert central.before_sending(UPDATES, torch.Generator()) is UPDATES  # the server clips


def test_the_bound_is_the_adaptive_one_in_the_servers_state_else_the_clip():
    plan = PrivacyPlan(central_dp(noise_multiplier=1.0, clip=0.5), 1.0, 1e-3, 10, 3, None, None)
    assert plan.bound_now({}) == 0.5
    bound = plan.bound_now({"dp_clip": torch.tensor(0.25, dtype=F64)})
    assert bound == 0.25 and type(bound) is float


def test_the_server_rule_is_wrapped_under_central_dp_only():
    mean = rule("mean")
    local = PrivacyPlan(LOCAL, 1.0, 1e-3, 10, 3, None, np.zeros(2, dtype=int))
    assert local.server_rule(mean, {}, torch.Generator(), torch.Generator()) is mean
    plan = PrivacyPlan(CENTRAL, 1.0, 1e-3, 10, 3, None, None)
    server, noise, count = {}, torch.Generator(), torch.Generator()
    assert plan.server_rule(mean, server, noise, count) == CentralRule(plan, mean, server, noise, count)


def test_central_dp_clips_takes_the_uniform_mean_and_adds_z_bound_sensitivity_over_two():
    # Prepare: z = 1.5, clip 0.5; 3 updates of 5 entries, norms 5 (clipped to 0.5), 0.5 and 1 (clipped)
    plan = PrivacyPlan(central_dp(noise_multiplier=1.5, clip=0.5), 1.5, 1e-3, 10, 3, None, None)
    central = plan.server_rule(rule("mean"), {}, torch.Generator().manual_seed(7), torch.Generator())
    # Execute: weights a weighted mean would use are ignored
    out = central(UPDATES, torch.tensor([5.0, 1.0, 1.0], dtype=F64))
    # Assert: the mean of the clipped rows plus N(0, (1.5 x 0.5 x (2/3) / 2)^2) = N(0, 0.25^2) from the same stream
    clipped = torch.tensor([[0.3, 0.4, 0, 0, 0], [0.3, 0, 0.4, 0, 0], [0, 0, 0, 0.3, 0.4]], dtype=F64)
    expected = clipped.mean(0) + torch.randn(5, generator=torch.Generator().manual_seed(7), dtype=F64) * 0.25
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-15)


def test_central_dp_under_secure_aggregation_takes_the_rows_as_the_devices_clipped_them():
    plan = PrivacyPlan(central_dp(noise_multiplier=0.0, clip=0.5, secure_aggregation=True), 0.0, 1e-3, 10, 3,
                       None, None)
    out = plan.server_rule(rule("mean"), {}, torch.Generator(), torch.Generator())(UPDATES, torch.ones(3, dtype=F64))
    torch.testing.assert_close(out, UPDATES.mean(0), rtol=0, atol=0)


def test_a_method_weighting_the_devices_itself_is_refused_by_the_central_rule():
    plan = PrivacyPlan(CENTRAL, 1.0, 1e-3, 10, 3, None, None)
    central = plan.server_rule(rule("mean"), {}, torch.Generator(), torch.Generator())
    with pytest.raises(ConfigError) as err:
        central(UPDATES, torch.ones(3, dtype=F64), None, torch.ones(3, dtype=F64))
    assert str(err.value) == "central DP: a method's own client weighting is not covered by its noise"


def test_adaptive_clipping_noises_with_z_delta_at_the_states_bound_and_stores_the_next_bound():
    # Prepare: z = 1.5, count noise 1 (z_Delta = (1.5^-2 - 2^-2)^-1/2); the state's bound 0.8: norms 5, 0.5, 1, of
    # which one (0.5) is at most 0.8
    spec = central_dp(noise_multiplier=1.5, clip=0.5, adaptive=True, count_noise=1.0, target_quantile=0.4,
                      clip_lr=0.3)
    plan = privacy_plan(spec, 10, 3, 2)
    server = {CLIP_STATE: torch.tensor(0.8, dtype=F64)}
    central = plan.server_rule(rule("mean"), server, torch.Generator().manual_seed(1), torch.Generator().manual_seed(2))
    # Execute
    out = central(UPDATES, torch.ones(3, dtype=F64))
    # Assert: the output's noise std z_Delta x 0.8 x (2/3) / 2, the rows clipped to 0.8
    z_delta = (1.5 ** -2 - 2.0 ** -2) ** -0.5
    clipped = UPDATES * torch.tensor([0.16, 1.0, 0.8], dtype=F64)[:, None]
    noise = torch.randn(5, generator=torch.Generator().manual_seed(1), dtype=F64) * (z_delta * 0.8 / 3)
    torch.testing.assert_close(out, clipped.mean(0) + noise, rtol=1e-12, atol=1e-15)
    # the next bound: 0.8 exp(-0.3 ((1 + N(0, 1)) / 3 - 0.4)), the count's noise from its own stream
    count = float(torch.randn((), generator=torch.Generator().manual_seed(2), dtype=F64))
    expected = 0.8 * np.exp(-0.3 * ((1 + count) / 3 - 0.4))
    assert list(server) == ["dp_clip"] and server["dp_clip"].dtype == F64
    assert float(server["dp_clip"]) == pytest.approx(expected, rel=1e-14)
    assert plan.bound_now(server) == float(server["dp_clip"])
