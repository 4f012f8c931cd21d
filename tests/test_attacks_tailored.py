"""AGR-tailored attacks (NDSS 2021 Section 4) and the generic adaptive attack: on small hand-made rounds with 1
to 4 malicious copies among 10 and the server's own rule (its f, not the copies'), each selection-tailored
attack is selected and each spread-tailored one moves its rule at least as far as Min-Max with the same
direction, in the server's dtype; the search matches a float64 transcription of the authors' notebooks, and
the adaptive attack finds the magnitude a brute-force scan finds, for a rule registered inside the test."""

import numpy as np
import pytest
import torch

from fedarena.attacks import ATTACKS
from fedarena.attacks.base import RoundRule, with_rows
from fedarena.attacks.tailored import holds_malicious, merged_rows, spread, spread_of
from fedarena.datasets.base import ClientData, FederatedDataset, Split
from fedarena.errors import ConfigError
from fedarena.methods.aggregators import AGGREGATORS, RoundDraw, make_aggregator
from fedarena.methods.aggregators.base import aggregator


def tamper_of(name, **params):
    client = ClientData(*(Split(torch.zeros(2, 1), torch.tensor([0, 1])) for _ in range(3)))
    ds = FederatedDataset("tiny", [client, client], 2, (1,), "fp", "classification")
    return ATTACKS.get(name)(ds, np.array([False, True]), np.random.default_rng(0), **params).tamper


def spiky(n_honest: int, s: float = 1.0, mu: float = 10.0) -> torch.Tensor:
    """Honest updates mu e_d + s e_i, i < n_honest: equidistant, each s sqrt(1 - 1/n) from their mean."""
    honest = torch.zeros(n_honest, n_honest + 1, dtype=torch.float64)
    honest[:, -1] = mu
    honest[torch.arange(n_honest), torch.arange(n_honest)] = s
    return honest


# six honest updates whose coordinate-wise median and trimmed mean Min-Max's bounded update barely moves
SPREAD = torch.tensor([[0.9, 1.7, 1.5], [0.9, 0.3, 0.6], [1.1, 1.3, 1.1], [1.6, 1.6, -2.8], [2.0, 0.3, -1.4],
                       [0.9, -0.7, -1.7]], dtype=torch.float64)


def round_of(honest: torch.Tensor, bad_count: int) -> tuple[torch.Tensor, torch.Tensor]:
    updates = torch.cat([honest, honest[:bad_count]])  # the attackers' own updates are not read
    return updates, torch.tensor([False] * len(honest) + [True] * bad_count)


def deviation(rule: dict, f: int, updates: torch.Tensor, honest: torch.Tensor) -> float:
    out = make_aggregator(rule, f=f)(updates, torch.ones(len(updates), dtype=updates.dtype))
    return float((out - honest.mean(0)).norm())


def server(rule: dict, f: int, n: int) -> RoundRule:
    """The server's rule of a round of n updates as the engine hands it to an attack."""
    agg = make_aggregator(rule, f=f).for_round(RoundDraw.rows_in_order(n))
    return RoundRule(agg, torch.ones(n))


def cluster(n_honest: int, seed: int, dtype=torch.float64) -> torch.Tensor:
    """Honest updates: a Gaussian cluster around a common direction (seeded)."""
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(n_honest, 6, generator=gen, dtype=torch.float64) * 0.3 + 1.0).to(dtype)


# The server's f is the trial's (here 2, Bulyan's 1 on 10 updates), whatever the round's copies are
SELECTIONS = [({"name": "krum"}, {"name": "tailored_krum", "target": "krum"}, 2),
              ({"name": "multi_krum"}, {"name": "tailored_krum"}, 2),
              ({"name": "krum"}, {"name": "tailored_krum"}, 2),
              ({"name": "bulyan"}, {"name": "tailored_bulyan"}, 1)]


@pytest.mark.parametrize("copies", [1, 2, 3, 4])
@pytest.mark.parametrize("rule,attack,f", SELECTIONS, ids=["krum", "multi_krum", "krum_default", "bulyan"])
@pytest.mark.parametrize("mode", ["paper", "reference"])
def test_a_selection_tailored_attack_is_selected_by_the_servers_rule(rule, attack, f, copies, mode):
    # Prepare: 10 updates, `copies` of them malicious, the server's rule with the trial's f
    options = {"direction": "unit", **{k: v for k, v in attack.items() if k != "name"}}
    feasible = 0
    for seed in range(6):
        updates, bad = round_of(cluster(10 - copies, seed), copies)
        rule_of_round = server(rule, f, 10)
        mean = updates[~bad].mean(0)
        push = -mean / mean.norm()
        scan = [holds_malicious(rule_of_round.kept(with_rows(updates, bad, mean + g * push)), bad)
                for g in np.linspace(0.0, 6.0, 121)]  # the search's range: (0, 2 x gamma_init)
        # Execute
        out = tamper_of(attack["name"], mode=mode, **options)(updates, bad, torch.Generator(), rule=rule_of_round)
        # Assert: where some magnitude is selected, the attack moved and the server's selection holds the
        # malicious updates; where none is, it sends the honest mean (gamma 0)
        assert torch.equal(out[~bad], updates[~bad])
        gamma = float((out[-1] - mean).norm())
        if any(scan):
            feasible += 1
            assert gamma > 1e-3 and holds_malicious(rule_of_round.kept(out), bad), (seed, gamma)
        else:
            assert gamma == pytest.approx(0.0, abs=1e-4)
    assert feasible >= 4  # the rounds are not vacuous


@pytest.mark.parametrize("copies", [1, 2, 3, 4])
@pytest.mark.parametrize("rule,attack", [
    ({"name": "median"}, {"name": "tailored_median"}),
    ({"name": "trimmed_mean"}, {"name": "tailored_median", "rule": "trimmed_mean"}),
], ids=["median", "trimmed_mean"])
def test_a_spread_tailored_attack_moves_the_servers_rule_at_least_as_far_as_min_max(rule, attack, copies):
    # Prepare: the server trims the trial's f = 2 (copies vary); both attacks push along the same direction
    for seed in range(5):
        updates, bad = round_of(cluster(10 - copies, seed), copies)
        rule_of_round = server(rule, 2, 10)
        options = {k: v for k, v in attack.items() if k != "name"}
        # Execute
        agnostic = tamper_of("min_max", direction="unit")(updates, bad, torch.Generator())
        tailored = tamper_of(attack["name"], direction="unit", **options)(updates, bad, torch.Generator(),
                                                                            rule=rule_of_round)
        # Assert
        honest = updates[~bad]
        assert deviation(rule, 2, tailored, honest) >= deviation(rule, 2, agnostic, honest) - 1e-12


def test_the_search_checks_the_server_in_its_own_dtype():
    # Prepare: float32 rounds against Bulyan (f = 1): a gamma found in float64 may stop passing in float32
    kept_all = []
    for seed in range(45):
        updates, bad = round_of(cluster(8, seed, torch.float32), 2)
        rule_of_round = server({"name": "bulyan"}, 1, 10)
        # Execute
        out = tamper_of("tailored_bulyan", direction="unit")(updates, bad, torch.Generator(), rule=rule_of_round)
        kept_all.append(bool(rule_of_round.kept(out)[bad].all()))
    # Assert: every round's float32 update is in Bulyan's selection
    assert all(kept_all), kept_all.count(False)


def test_another_row_meets_the_attacks_own_target_with_the_trials_f():
    # Prepare: the server runs the median (f = 2); tailored_krum (target krum) simulates Krum with f = 2
    updates, bad = round_of(cluster(7, 0), 3)
    out = tamper_of("tailored_krum", target="krum")(updates, bad, torch.Generator(),
                                                     rule=server({"name": "median"}, 2, 10))
    # Assert: Krum with the trial's f picks the malicious update
    assert bool(make_aggregator({"name": "krum"}, f=2).kept(out)[bad].any())


def test_tailored_krum_on_krum_goes_as_far_as_krum_still_picks_it():
    # Prepare: 8 equidistant honest updates (squared distances 2), 2 attackers, n = 10, f = 2: Krum scores k = 6
    # neighbours. m = mean + gamma p, p orthogonal to every mean - h_j, is at 7/8 + gamma^2 from each
    # honest update: m scores 0 (its twin) + 5 (7/8 + gamma^2); past gamma^2 = 9/8 an honest one scores 6 x 2
    updates, bad = round_of(spiky(8), 2)
    out = tamper_of("tailored_krum", target="krum", direction="unit")(updates, bad, torch.Generator(),
                                                                       rule=server({"name": "krum"}, 2, 10))
    gamma = float((out[-1] - spiky(8).mean(0)).norm())
    # Assert: 5 (7/8 + gamma^2) < 12 up to gamma^2 = 12/5 - 7/8
    assert gamma == pytest.approx((12 / 5 - 7 / 8) ** 0.5, abs=1e-4)
    picked = make_aggregator({"name": "krum"}, f=2)(out, torch.ones(10))
    assert torch.equal(picked, out[-1])


@pytest.mark.parametrize("rule", ["krum", "multi_krum"])
def test_tailored_krums_default_target_is_the_servers_own_rule(rule):
    # Prepare: a round where the attack tailored to Krum and the one tailored to multi-Krum differ; the server runs
    # one of them; the attack is configured without a target
    updates, bad = round_of(cluster(7, 1), 3)
    run = server({"name": rule}, 2, 10)
    by_target = {target: tamper_of("tailored_krum", target=target)(updates, bad, torch.Generator(), rule=run)
                 for target in ("krum", "multi_krum")}
    assert float((by_target["krum"][-1] - by_target["multi_krum"][-1]).norm()) > 0.5
    # Execute
    default = tamper_of("tailored_krum")(updates, bad, torch.Generator(), rule=run)
    # Assert: the default is the attack tailored to the rule the server runs
    assert torch.equal(default, by_target[rule])


def test_tailored_krums_default_target_elsewhere_is_multi_krum():
    updates, bad = round_of(cluster(7, 0), 3)
    rule = server({"name": "median"}, 2, 10)
    default = tamper_of("tailored_krum")(updates, bad, torch.Generator(), rule=rule)
    multi = tamper_of("tailored_krum", target="multi_krum")(updates, bad, torch.Generator(), rule=rule)
    assert torch.equal(default, multi)


# ---- the authors' notebooks, transcribed (float64 NumPy) -------------------------------------------------

def notebook_multi_krum(all_updates: np.ndarray, n_attackers: int) -> list[int]:
    """``multi_krum(..., multi_k=True)``'s candidate indices."""
    remaining, indices, picked = all_updates, list(range(len(all_updates))), []
    while len(remaining) > 2 * n_attackers + 2:
        dist = ((remaining[:, None] - remaining[None]) ** 2).sum(-1)
        scores = np.sort(dist, axis=1)[:, : len(remaining) - 2 - n_attackers].sum(1)
        best = int(np.argsort(scores, kind="stable")[0])
        picked.append(indices.pop(best))
        remaining = np.delete(remaining, best, axis=0)
    return picked


def notebook_mkrum_gamma(benign: np.ndarray, n_attackers: int) -> float:
    """``our_attack_mkrum`` (unit direction): from 3, the halving search on 'every attacker is a candidate'."""
    model_re = benign.mean(0)
    deviation = model_re / np.linalg.norm(model_re)
    lamda, fail, succ = 3.0, 3.0, 0.0
    while abs(succ - lamda) > 1e-5:
        mal = np.vstack([np.repeat((model_re - lamda * deviation)[None], n_attackers, 0), benign])
        if sum(i < n_attackers for i in notebook_multi_krum(mal, n_attackers)) == n_attackers:
            succ, lamda = lamda, lamda + fail / 2
        else:
            lamda = lamda - fail / 2
        fail /= 2
    return succ


def notebook_median_gamma(benign: np.ndarray, n_attackers: int, trimmed: bool) -> float:
    """``our_attack_median`` / ``our_attack_trmean`` (unit direction): a step succeeds when the rule's
    distance from the benign mean grew since the previous step."""
    model_re = benign.mean(0)
    deviation = model_re / np.linalg.norm(model_re)
    lamda, fail, succ, prev = 10.0, 10.0, 0.0, -1.0
    while abs(succ - lamda) > 1e-5:
        mal = np.vstack([np.repeat((model_re - lamda * deviation)[None], n_attackers, 0), benign])
        ordered = np.sort(mal, axis=0)
        agg = ordered[n_attackers:-n_attackers].mean(0) if trimmed else np.median(mal, axis=0)
        loss = np.linalg.norm(agg - model_re)
        if prev < loss:
            succ, lamda = lamda, lamda + fail / 2
        else:
            lamda = lamda - fail / 2
        fail, prev = fail / 2, loss
    return succ


def sent_gamma(name: str, honest: torch.Tensor, bad_count: int, **params) -> float:
    """The gamma sent against a server that runs the mean with f = the attackers' count, as the notebooks
    pass n_attackers to the attack (the attack then simulates its own target with that f)."""
    updates, bad = round_of(honest, bad_count)
    rule = server({"name": "mean"}, bad_count, len(updates))
    out = tamper_of(name, direction="unit", **params)(updates, bad, torch.Generator(), rule=rule)
    return float((honest.mean(0) - out[-1]).norm())


@pytest.mark.parametrize("name", ["tailored_krum", "tailored_bulyan"])
def test_reference_mode_is_the_notebooks_our_attack_mkrum(name):
    gen = np.random.default_rng(3)
    benign = gen.normal(size=(9, 4)) + np.array([1.0, -0.5, 2.0, 0.0])
    expected = notebook_mkrum_gamma(benign, 2)
    assert expected > 0
    assert sent_gamma(name, torch.tensor(benign), 2, mode="reference", gamma_init=3.0) == pytest.approx(
        expected, abs=1e-6)


@pytest.mark.parametrize("rule", ["median", "trimmed_mean"])
def test_tailored_median_reference_mode_is_the_notebooks_search(rule):
    expected = notebook_median_gamma(SPREAD.numpy(), 3, trimmed=rule == "trimmed_mean")
    got = sent_gamma("tailored_median", SPREAD, 3, rule=rule, mode="reference", gamma_init=10.0)
    assert expected > 0 and got == pytest.approx(expected, abs=1e-6)


def test_merging_m_into_the_sorted_honest_rows_gives_the_sorted_rounds_rows():
    # Prepare: 3 honest values per column, m sent by 2 attackers (one column ties m with an honest value)
    ordered = torch.tensor([[1.0, -3.0], [2.0, 0.5], [4.0, 0.5]], dtype=torch.float64)
    m = torch.tensor([3.0, 0.5], dtype=torch.float64)
    # Execute: every position of the 5 sorted values
    rows = merged_rows(ordered, m, 2, range(5))
    # Assert: column 0 sorts to 1, 2, 3, 3, 4; column 1 to -3, 0.5, 0.5, 0.5, 0.5
    assert rows.T.tolist() == [[1.0, 2.0, 3.0, 3.0, 4.0], [-3.0, 0.5, 0.5, 0.5, 0.5]]


@pytest.mark.parametrize("rule", ["median", "trimmed_mean"])
def test_the_searchs_rule_output_is_the_rule_on_the_whole_round(rule):
    # Prepare: rounds of 1-13 updates with ties, infinities and NaN, any number of attackers
    gen = torch.Generator().manual_seed(0)
    for case in range(150):
        n, d = int(torch.randint(1, 14, (1,), generator=gen)), int(torch.randint(1, 40, (1,), generator=gen))
        bad = torch.randperm(n, generator=gen) < int(torch.randint(1, n + 1, (1,), generator=gen))
        x = torch.round(2 * torch.randn(n, d, generator=gen, dtype=torch.float64)) / 2
        x[torch.rand(n, d, generator=gen) < (0.05 if case % 5 == 0 else 0.0)] = float("nan")
        x[torch.rand(n, d, generator=gen) < (0.05 if case % 7 == 0 else 0.0)] = float("inf")
        t = int(torch.randint(0, n // 2 + 1, (1,), generator=gen))  # the trial's f, not the attackers' count
        output = spread_of(rule, x, bad, t)
        for m in (torch.round(2 * torch.randn(d, generator=gen, dtype=torch.float64)) / 2, x[0].clone()):
            # Execute: the merged output and the rule on the whole round with m in the attackers' rows
            got, expected = output(m), spread(rule, with_rows(x, bad, m), t)
            # Assert: the same values, NaN where a NaN is
            assert torch.equal(got.isnan(), expected.isnan())
            assert torch.equal(got.nan_to_num(7.0), expected.nan_to_num(7.0))


def test_tailored_bulyan_paper_mode_keeps_every_attacker_in_bulyans_selection():
    # Prepare: 8 honest, 1 attacker: Bulyan (n = 9 >= 4f + 3, f = 1) picks n - 2f = 7 by iterated Krum
    updates, bad = round_of(spiky(8), 1)
    rule = server({"name": "bulyan"}, 1, 9)
    out = tamper_of("tailored_bulyan", direction="unit")(updates, bad, torch.Generator(), rule=rule)
    gamma = float((out[-1] - spiky(8).mean(0)).norm())
    # Assert: a brute-force scan of gamma agrees on where the selection stops holding the attacker
    push = out[-1] - spiky(8).mean(0)
    fits = [holds_malicious(rule.kept(with_rows(updates, bad, spiky(8).mean(0) + g * push / gamma)), bad)
            for g in np.linspace(0.01, 3 * gamma, 300)]
    last_fit = np.linspace(0.01, 3 * gamma, 300)[np.nonzero(fits)[0].max()]
    assert gamma > 0 and last_fit == pytest.approx(gamma, abs=3 * gamma / 300)


def test_tailored_attacks_refuse_unknown_options():
    with pytest.raises(ConfigError, match="target must be one of krum, multi_krum, got 'bulyan'"):
        tamper_of("tailored_krum", target="bulyan")
    with pytest.raises(ConfigError, match="rule must be one of median, trimmed_mean, got 'mean'"):
        tamper_of("tailored_median", rule="mean")
    with pytest.raises(ConfigError, match="mode must be one of paper, reference, got 'notebook'"):
        tamper_of("tailored_bulyan", mode="notebook")


# ---- the generic adaptive attack ---------------------------------------------------------------------------

@pytest.fixture
def norm_filter():
    """A user's rule, registered for the test: the mean of the updates whose norm is at most twice the median
    norm (the malicious ones pass while small enough: the best magnitude sits at the edge)."""

    @aggregator("test_norm_filter")
    def rule(updates, *, weights, losses, f):
        norms = updates.norm(dim=1)
        return updates[norms <= 2 * norms.median()].mean(0)

    yield "test_norm_filter"
    AGGREGATORS.remove("test_norm_filter")


def test_adaptive_finds_the_magnitude_a_brute_force_scan_finds(norm_filter):
    # Prepare: 7 honest updates, 3 attackers pushing along -std (ALIE's direction)
    honest = SPREAD.clone()[:, :2] + torch.tensor([3.0, 2.0], dtype=torch.float64)
    honest = torch.cat([honest, honest[:1] + 0.2])
    updates, bad = round_of(honest, 3)
    rule = make_aggregator({"name": norm_filter}, f=3)
    calls = []

    def counted(u):
        calls.append(1)
        return rule(u, torch.ones(len(u)))

    # Execute
    out = tamper_of("adaptive", direction="std")(updates, bad, torch.Generator(), rule=counted)
    # Assert: the same magnitude as the best of 20,000 scanned, to the search's tolerance, in exactly 32 calls
    mean, push = honest.mean(0), -honest.std(0)
    scan = np.linspace(1e-3, 64.0, 20000)
    devs = [float((rule(torch.cat([honest, (mean + g * push).expand(3, -1)]), torch.ones(10)) - mean).norm())
            for g in scan]
    best = scan[int(np.argmax(devs))]
    gamma = float((out[-1] - mean).norm() / push.norm())
    assert len(calls) == 32 and 0.5 < best < 63
    assert gamma == pytest.approx(best, rel=2e-3)
    assert float((counted(out) - mean).norm()) == pytest.approx(max(devs), rel=1e-3)


def test_adaptive_beats_the_same_direction_at_a_fixed_magnitude_on_median():
    updates, bad = round_of(SPREAD, 3)
    median = make_aggregator({"name": "median"}, f=3)
    adaptive = tamper_of("adaptive", direction="unit")(updates, bad, torch.Generator(),
                                                       rule=lambda u: median(u, torch.ones(9)))
    agnostic = tamper_of("min_max", direction="unit")(updates, bad, torch.Generator())
    assert deviation({"name": "median"}, 3, adaptive, SPREAD) > 1.1 * deviation({"name": "median"}, 3, agnostic, SPREAD)


def test_adaptive_refuses_bad_options():
    with pytest.raises(ConfigError, match="direction must be one of unit, std, sign, ipm, sign_flip"):
        tamper_of("adaptive", direction="alie")
    with pytest.raises(ConfigError, match="calls must be a whole number >= 15"):
        tamper_of("adaptive", calls=10)
