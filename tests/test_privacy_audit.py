"""The privacy audit (``privacy.audit``: one-shot empirical estimation by canary clients, Andrew et al. 2024): the
two-Gaussian epsilon against dp-accounting's Gaussian mechanism, the add-or-remove epsilon against its closed form,
the measured epsilon of a correct mechanism between half its add/remove claim and the claim, a mechanism with too
little noise or no clipping caught, canaries absent from every device metric, a resumed audit equal to an
uninterrupted one, and bad audits refused in one line."""

import copy
import math

import dp_accounting
import numpy as np
import pytest
import torch
from dp_accounting.pld import PLDAccountant
from scipy import optimize, stats

import fedarena.privacy.dp_trial as dp_trial
from fedarena.config import ExperimentConfig
from fedarena.errors import ConfigError
from fedarena.privacy import accounting
from fedarena.privacy.audit import ITERATE_MAX, VERSION, CanaryAudit
from fedarena.privacy.empirical import (
    bootstrap_interval,
    cosine_log_sf,
    epsilon_lower_bound,
    fitted_epsilon,
    two_gaussian_epsilon,
)
from fedarena.privacy.noise import clip_rows, unclipped_count
from fedarena.simulation.engine import SimState, initial_state, run_round, simulate
from fedarena.simulation.experiment import run_experiment
from fedarena.simulation.identity import AUDIT, registered_version, trial_identity
from fedarena.simulation.setup import build_trial

DEVICES, CANARIES = 10, 1000
# every client (10 devices and 1,000 canaries) in each of 4 rounds; 19,210 parameters, so the canaries' directions
# are nearly orthogonal (their cross-talk adds K / d = 5% to the noise's variance)
AUDITED = {"dataset": {"name": "digits", "num_clients": DEVICES}, "model": {"name": "mlp", "hidden": [256]},
           "rounds": 4, "eval_every": 4, "clients_per_round": DEVICES + CANARIES, "local_steps": 1, "batch_size": 16,
           "lr": 0.2, "sampling": "uniform"}


def audited(z, seed=0, resamples=0, **privacy):
    return ExperimentConfig.from_dict({**AUDITED, "seed": seed, "privacy": {
        "name": "central", "noise_multiplier": z, "clip": 0.5,
        "audit": {"canaries": CANARIES, "unseen": 1000, "resamples": resamples}, **privacy}})


def final_row(cfg):
    return run_experiment(cfg)["final"]


@pytest.mark.parametrize("mu", [0.3, 1.0, 2.5])
def test_equal_variances_give_the_gaussian_mechanisms_epsilon(mu):
    # dp-accounting's PLD, add-or-remove: GaussianDpEvent(s) is the Gaussian mechanism of sensitivity 1 / s
    acc = PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE, value_discretization_interval=1e-4)
    acc.compose(dp_accounting.GaussianDpEvent(1 / mu))
    assert two_gaussian_epsilon(mu, 1.0, 0.0, 1.0, 1e-5) == pytest.approx(acc.get_epsilon(1e-5), rel=1e-3)
    assert two_gaussian_epsilon(0.0, 2.0, 2 * mu, 2.0, 1e-5) == pytest.approx(acc.get_epsilon(1e-5), rel=1e-3)


@pytest.mark.parametrize("pair", [(1.5, 1.3, 0.0, 1.0), (0.5, 0.7, 0.1, 1.0), (0.0, 1.0, 0.0, 1.2)])
def test_unequal_variances_give_the_hockey_stick_divergences_root(pair):
    # the divergence integrated numerically on a fine grid, both directions; the estimate is where it equals delta
    x = np.linspace(-15, 15, 600_001)
    p, q = stats.norm.pdf(x, pair[0], pair[1]), stats.norm.pdf(x, pair[2], pair[3])

    def divergence(eps):
        return max(np.maximum(p - math.exp(eps) * q, 0).sum(), np.maximum(q - math.exp(eps) * p, 0).sum()) * (x[1] - x[0])

    expected = optimize.brentq(lambda e: divergence(e) - 1e-5, 0, 60)
    assert two_gaussian_epsilon(*pair, 1e-5) == pytest.approx(expected, rel=2e-3)
    assert two_gaussian_epsilon(0.0, 1.0, 0.0, 1.0, 1e-5) == 0.0  # identical: (0, delta) already
    assert math.isnan(two_gaussian_epsilon(1.0, 0.0, 0.0, 1.0, 1e-5))


def test_the_bootstrap_interval_covers_the_fitted_estimate():
    rng = np.random.default_rng(0)
    seen, unseen = rng.normal(1.0, 1.0, 2000), rng.normal(0.0, 1.0, 2000)
    low, high = bootstrap_interval(seen, unseen, 1e-5, 100, 0.95, np.random.default_rng(1))
    assert low < fitted_epsilon(seen, unseen, 1e-5) < high and high - low < 3


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_the_add_remove_epsilon_is_the_composed_gaussians(accountant):
    # T rounds of a Gaussian of multiplier z on a sensitivity-one sum: mu = sqrt(T) / z (Balle and Wang 2018's
    # exact epsilon; RDP is an upper bound of it, within 15% here)
    z, rounds, delta = 2.0, 4, 1e-5
    mu = math.sqrt(rounds) / z
    exact = optimize.brentq(lambda e: stats.norm.cdf(mu / 2 - e / mu) - math.exp(e) * stats.norm.cdf(-mu / 2 - e / mu)
                            - delta, 0, 50)
    got = accounting.add_remove_epsilon(accountant, z, rounds, delta)
    if accountant == "pld":
        assert got == pytest.approx(exact, rel=1e-3)
    else:
        assert exact <= got <= 1.15 * exact
    assert accounting.add_remove_epsilon(accountant, 0.0, rounds, delta) == math.inf


@pytest.mark.parametrize("z", [1.0, 2.0])
def test_a_correct_mechanisms_estimate_lies_between_half_its_add_remove_epsilon_and_it(z):
    final = final_row(audited(z, resamples=20))
    claim = final["epsilon_add_remove"]  # the exact claim (PLD), RDP's looser bound beside it
    assert claim == pytest.approx(accounting.add_remove_epsilon("pld", z, 4, 1e-5))
    assert final["epsilon_add_remove_rdp"] == pytest.approx(accounting.add_remove_epsilon("rdp", z, 4, 1e-5))
    assert claim < final["epsilon_add_remove_rdp"]
    # the equal-variance estimate: below the claim by the canaries' own share of the model's change (T K / (z^2 d):
    # 21% of the noise's variance at z = 1), its lower end below the claim (no flag)
    equal = final["epsilon_equal_variance_final"]
    assert final["epsilon_equal_variance_final_low"] < equal < final["epsilon_equal_variance_final_high"]
    assert claim / 2 <= equal <= claim and final["epsilon_equal_variance_final_low"] < claim
    assert claim / 2 <= final["epsilon_empirical_iterates"] <= claim
    assert final["epsilon_empirical_iterates_low"] <= final["epsilon_empirical_iterates"]
    assert final["epsilon_empirical_iterates"] <= final["epsilon_empirical_iterates_high"]
    assert final["audit_canaries"] == CANARIES and final["audit_exceeded"] == 0.0
    assert 0 < final["epsilon_lower_bound_final"] <= claim and 0 <= final["epsilon_lower_bound_iterates"] <= claim
    assert final["epsilon"] > claim  # replace-one's claim: twice the distance


def half_the_noise(monkeypatch):
    real = dp_trial.gaussian
    monkeypatch.setattr(dp_trial, "gaussian", lambda like, std, generator: real(like, std / 2, generator))


def no_clipping(monkeypatch):
    monkeypatch.setattr(dp_trial, "clip_rows", lambda updates, bound: updates)
    rows = CanaryAudit.rows
    monkeypatch.setattr(CanaryAudit, "rows", lambda self, drawn, bound: 4 * rows(self, drawn, bound))


@pytest.mark.parametrize("fault", [half_the_noise, no_clipping])
def test_a_mechanism_that_spends_more_than_it_claims_is_flagged(monkeypatch, fault):
    # a test-only fault: the server's noise halved, or its clipping skipped with the canaries sent at 4 clips; the
    # flag (a lower bound above the exact claim) rises, not merely a point estimate
    fault(monkeypatch)
    rows = [final_row(audited(2.0, seed=seed)) for seed in range(10)]
    assert sum(row["audit_exceeded"] == 1.0 for row in rows) >= 9, [
        (row["epsilon_equal_variance_final_low"], row["epsilon_add_remove"]) for row in rows]


def test_a_lower_bound_above_the_claim_is_flagged_in_the_run(monkeypatch, caplog):
    # the thresholded bound is conservative (Clopper-Pearson, Bonferroni over 1,000 thresholds): half the noise
    # leaves it near the claim (the equal-variance lower end catches that); updates sent unclipped at 8 clips put it
    # far above
    no_clipping(monkeypatch)
    final = final_row(audited(2.0))
    assert final["epsilon_lower_bound_final"] > final["epsilon_add_remove"] and final["audit_exceeded"] == 1.0
    assert "spends more than its accountant says" in caplog.text


def test_a_correct_mechanisms_lower_bounds_stay_below_its_claim_across_seeds():
    # the flag's false alarms: none in 5 seeds at z = 1 (the thresholded bounds hold at 95%, the equal-variance
    # lower end at 97.5% one-sided), where the fitted estimate of the final model lies above the claim in most
    rows = [final_row(audited(1.0, seed=seed)) for seed in range(5)]
    assert all(row["audit_exceeded"] == 0.0 for row in rows)
    assert all(0 < row["epsilon_lower_bound_final"] < row["epsilon_add_remove"] for row in rows)
    assert all(0 < row["epsilon_equal_variance_final_low"] < row["epsilon_add_remove"] for row in rows)


def test_the_exact_null_is_a_random_directions_cosine():
    # 200,000 random unit directions in R^50 against a fixed vector: their cosines' tail against the Beta form
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(200_000, 50))
    cosines = rows[:, 0] / np.linalg.norm(rows, axis=1)
    t = np.array([-0.2, 0.0, 0.1, 0.3])  # at 0.3 3,200 cosines lie above: a Monte Carlo error of 2%
    expected = np.array([(cosines >= v).mean() for v in t])
    np.testing.assert_allclose(np.exp(cosine_log_sf(50)(t)), expected, rtol=0.05)


def test_the_lower_bound_certifies_less_than_the_truth():
    # ideal statistics at mu = 2 (true epsilon 9.997 at 1e-5): the bound lies below it and well above 0
    rng = np.random.default_rng(1)
    seen, unseen = rng.normal(2.0, 1.0, 1000), rng.normal(0.0, 1.0, 100_000)
    bound = epsilon_lower_bound(seen, 1e-5, 0.025, unseen)
    exact = epsilon_lower_bound(seen, 1e-5, 0.025, null_log_sf=lambda x: stats.norm.logsf(x))
    assert 2.0 < bound < 9.997 and 2.0 < exact < 9.997


def test_a_mechanism_that_leaks_everything_gets_an_infinite_estimate_not_an_error():
    assert two_gaussian_epsilon(40.0, 1.0, 0.0, 1.0, 1e-5) == math.inf
    low, high = bootstrap_interval(np.full(50, 5.0) + np.arange(50) * 1e-3, np.arange(50) * 1e-3, 1e-5, 5, 0.95,
                                   np.random.default_rng(0))
    assert low == high == math.inf


def test_adaptive_clipping_counts_every_canary_clipped():
    trial = build_trial(audited(1.0, adaptive=True, count_noise=50.0))
    rows = trial.audit.rows(np.arange(DEVICES, DEVICES + CANARIES), 0.5)
    assert unclipped_count(rows, 0.5) == 0 and torch.allclose(clip_rows(rows, 0.5).norm(dim=1), torch.tensor(0.5))


def test_no_canary_appears_in_a_device_metric():
    # Ditto under BadNets, audited with 50 canaries: every per-device table, count and metric is the devices'
    cfg = ExperimentConfig.from_dict({**AUDITED, "model": {"name": "mlp", "hidden": [16]}, "clients_per_round": 30,
                                      "method": {"name": "ditto"}, "attack": {"name": "badnets", "level": 0.2},
                                      "privacy": {"name": "central", "noise_multiplier": 1.0, "clip": 0.5,
                                                  "audit": {"canaries": 50, "unseen": 50, "resamples": 0}}})
    trial = build_trial(cfg)
    drawn = [run_round(trial, initial_state(trial))]  # a round draws canaries beside the devices
    assert trial.population_sizes().shape == (DEVICES + 50,) and len(trial.threat.malicious) == DEVICES
    state, counts = simulate(trial)
    assert state.clients["personal"].shape[0] == DEVICES and drawn[0].clients["personal"].shape[0] == DEVICES
    assert all(np.asarray(v).shape[0] == DEVICES for v in vars(counts).values() if isinstance(v, np.ndarray))
    assert counts.backdoor is not None and all(np.asarray(v).shape[0] == DEVICES
                                               for v in vars(counts.backdoor).values() if isinstance(v, np.ndarray))
    unaudited = ExperimentConfig.from_dict({**cfg.to_dict(), "clients_per_round": 5, "privacy": {
        "name": "central", "noise_multiplier": 1.0, "clip": 0.5}})
    assert set(run_experiment(unaudited)["final"]) < set(run_experiment(cfg)["final"])  # the audit adds, never moves


def test_a_resumed_audit_measures_what_an_uninterrupted_one_does():
    trial = build_trial(audited(1.0, resamples=10))
    state = run_round(trial, run_round(trial, initial_state(trial)))
    saved = copy.deepcopy(state.state_dict())  # a checkpoint on disk shares nothing with the running state
    straight, _ = simulate(trial, state)
    resumed, _ = simulate(trial, SimState.from_state_dict(saved, trial.device))
    assert torch.equal(resumed.w, straight.w)
    assert torch.equal(resumed.part("audit")[ITERATE_MAX], straight.part("audit")[ITERATE_MAX])
    last, again = straight.history[-1], resumed.history[-1]
    assert "epsilon_empirical_final" in last and last.keys() == again.keys()
    assert all(last[k] == again[k] or (math.isnan(last[k]) and math.isnan(again[k])) for k in last)
    old = {k: v for k, v in state.state_dict().items() if k != "audit"}  # a checkpoint from before the audit
    assert SimState.from_state_dict(old, trial.device).part("audit") == {}


def test_a_sampled_audit_reports_no_add_remove_epsilon_and_local_dp_does():
    sampled = final_row(ExperimentConfig.from_dict(
        {**AUDITED, "clients_per_round": 20, "model": {"name": "mlp", "hidden": [8]}, "privacy": {
            "name": "central", "noise_multiplier": 1.0, "clip": 0.5, "audit": {"canaries": 20, "unseen": 20}}}))
    assert "epsilon_add_remove" not in sampled and math.isfinite(sampled["epsilon_empirical_final"])
    local = final_row(ExperimentConfig.from_dict(
        {**AUDITED, "clients_per_round": 20, "model": {"name": "mlp", "hidden": [8]}, "privacy": {
            "name": "local", "noise_multiplier": 1.0, "clip": 0.5, "audit": {"canaries": 20, "unseen": 20}}}))
    assert local["epsilon_add_remove"] <= local["epsilon"] and math.isfinite(local["epsilon_empirical_iterates"])


@pytest.mark.parametrize("privacy, message", [
    ({"name": "central", "noise_multiplier": 1.0, "audit": {"unseen": 10}}, r"audit.canaries must be .* \(missing\)"),
    ({"name": "central", "noise_multiplier": 1.0, "audit": {"canaries": 10, "unseen": 0}}, "audit.unseen must be"),
    ({"name": "central", "noise_multiplier": 1.0, "audit": {"canaries": 10, "unseen": 10, "seen": 3}},
     r"unknown audit key\(s\) \['seen'\]"),
    ({"name": "none", "audit": {"canaries": 10, "unseen": 10}}, r"unknown parameter\(s\) \['audit'\] for privacy"),
    ({"name": "local", "noise_multiplier": 1.0, "audit": {"canaries": 10, "unseen": 10, "confidence": 1.5}},
     "audit.confidence must be in"),
])
def test_a_bad_audit_is_refused_in_one_line(privacy, message):
    with pytest.raises(ConfigError, match=message) as err:
        build_trial(ExperimentConfig.from_dict({**AUDITED, "clients_per_round": 5, "privacy": privacy}))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("change, message", [
    ({"sampling": "proportional"}, "needs sampling: uniform"),
    ({"method": {"name": "l2sgd"}}, "has a server step of its own; audit composes with .*global"),
    ({"clients_per_round": 100}, "exceeds the 10 clients of dataset 'digits' and the privacy audit's 20 canaries"),
    ({"model": {"name": "mlp", "hidden": [8192]}}, r"take [\d.]+ GiB, above the 2 GiB an audit keeps"),
])
def test_an_audit_the_run_cannot_hold_is_refused_before_training(change, message):
    privacy = {"name": "central", "noise_multiplier": 1.0, "audit": {"canaries": 20, "unseen": 20000}
               if "model" in change else {"canaries": 20, "unseen": 20}}
    with pytest.raises(ConfigError, match=message):
        build_trial(ExperimentConfig.from_dict({**AUDITED, "clients_per_round": 5, "privacy": privacy, **change}))


def test_the_lower_bound_is_bonferroni_corrected_over_its_thresholds():
    # two inserted statistics, an exact N(0, 1) null: each threshold's rates bounded by Clopper-Pearson at alpha / 2
    seen, delta, alpha = np.array([3.0, 4.0]), 1e-5, 0.05
    fnr = [stats.beta.ppf(1 - alpha / 2, 1, 2), stats.beta.ppf(1 - alpha / 2, 2, 1)]  # 0 and 1 of 2 below
    expected = max(max(math.log(1 - delta - f) - stats.norm.logsf(t),
                       math.log(1 - delta - math.exp(stats.norm.logsf(t))) - math.log(f)) for f, t in zip(fnr, seen, strict=True))
    assert epsilon_lower_bound(seen, delta, alpha, null_log_sf=stats.norm.logsf) == pytest.approx(expected, rel=1e-9)


def test_an_audited_trials_identity_carries_the_audits_version():
    # what an audit reports changed at v2 (the equal-variance estimate, the exact claim): older audited runs are stale
    audited_versions = trial_identity(audited(1.0)).versions
    plain = ExperimentConfig.from_dict({**AUDITED, "clients_per_round": 5, "privacy": {
        "name": "central", "noise_multiplier": 1.0, "clip": 0.5}})
    assert audited_versions[AUDIT] == VERSION == registered_version(AUDIT)
    assert AUDIT not in trial_identity(plain).versions
