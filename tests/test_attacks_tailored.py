"""AGR-tailored attacks (NDSS 2021 Section 4) and the generic adaptive attack: on tiny hand-made updates, each
tailored attack moves its rule's output farther from the honest mean than Min-Max with the same direction,
its search matches a float64 transcription of the authors' notebooks, and the adaptive attack finds the
magnitude a brute-force scan finds, for a rule registered inside the test."""

import numpy as np
import pytest
import torch

from fedarena.attacks import ATTACKS
from fedarena.datasets.base import ClientData, FederatedDataset, Split
from fedarena.errors import ConfigError
from fedarena.methods.aggregators import AGGREGATORS, make_aggregator
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
    out = make_aggregator(rule, f=f)(updates, torch.ones(len(updates)))
    return float((out - honest.mean(0)).norm())


@pytest.mark.parametrize("rule,attack,honest,bad_count", [
    ({"name": "krum"}, {"name": "tailored_krum", "target": "krum"}, spiky(8), 2),
    ({"name": "multi_krum"}, {"name": "tailored_krum"}, spiky(8), 2),
    ({"name": "median"}, {"name": "tailored_median"}, SPREAD, 3),
    ({"name": "trimmed_mean"}, {"name": "tailored_median", "rule": "trimmed_mean"}, SPREAD, 3),
])
def test_the_tailored_attack_moves_its_rule_farther_than_min_max(rule, attack, honest, bad_count):
    # Prepare
    updates, bad = round_of(honest, bad_count)
    # Execute
    agnostic = tamper_of("min_max", direction="unit")(updates, bad, torch.Generator())
    tailored = tamper_of(attack["name"], **{k: v for k, v in attack.items() if k != "name"})(
        updates, bad, torch.Generator())
    # Assert
    assert torch.equal(tailored[~bad], updates[~bad])
    assert deviation(rule, bad_count, tailored, honest) > 1.1 * deviation(rule, bad_count, agnostic, honest)


def test_tailored_krum_on_krum_goes_as_far_as_krum_still_picks_it():
    # Prepare: 8 equidistant honest updates (squared distances 2), 2 attackers, n = 10: Krum scores k = 6
    # neighbours. m = mean + gamma p, p orthogonal to every mean - h_j, is at 7/8 + gamma^2 from each
    # honest update: m scores 0 (its twin) + 5 (7/8 + gamma^2); past gamma^2 = 9/8 an honest one scores 6 x 2
    updates, bad = round_of(spiky(8), 2)
    out = tamper_of("tailored_krum", target="krum")(updates, bad, torch.Generator())
    gamma = float((out[-1] - spiky(8).mean(0)).norm())
    # Assert: 5 (7/8 + gamma^2) < 12 up to gamma^2 = 12/5 - 7/8
    assert gamma == pytest.approx((12 / 5 - 7 / 8) ** 0.5, abs=1e-4)
    picked = make_aggregator({"name": "krum"}, f=2)(out, torch.ones(10))
    assert torch.equal(picked, out[-1])


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
    updates, bad = round_of(honest, bad_count)
    return float((honest.mean(0) - tamper_of(name, **params)(updates, bad, torch.Generator())[-1]).norm())


@pytest.mark.parametrize("name", ["tailored_krum", "tailored_bulyan"])
def test_reference_mode_is_the_notebooks_our_attack_mkrum(name):
    gen = np.random.default_rng(3)
    benign = gen.normal(size=(9, 4)) + np.array([1.0, -0.5, 2.0, 0.0])
    expected = notebook_mkrum_gamma(benign, 2)
    assert expected > 0
    assert sent_gamma(name, torch.tensor(benign), 2, mode="reference") == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("rule", ["median", "trimmed_mean"])
def test_tailored_median_reference_mode_is_the_notebooks_search(rule):
    expected = notebook_median_gamma(SPREAD.numpy(), 3, trimmed=rule == "trimmed_mean")
    got = sent_gamma("tailored_median", SPREAD, 3, rule=rule, mode="reference")
    assert expected > 0 and got == pytest.approx(expected, abs=1e-6)


def test_merging_m_into_the_sorted_honest_rows_gives_the_sorted_rounds_rows():
    # Prepare: 3 honest values per column, m sent by 2 attackers (one column ties m with an honest value)
    from fedarena.attacks.tailored import merged_rows
    ordered = torch.tensor([[1.0, -3.0], [2.0, 0.5], [4.0, 0.5]], dtype=torch.float64)
    m = torch.tensor([3.0, 0.5], dtype=torch.float64)
    # Execute: every position of the 5 sorted values
    rows = merged_rows(ordered, m, 2, range(5))
    # Assert: column 0 sorts to 1, 2, 3, 3, 4; column 1 to -3, 0.5, 0.5, 0.5, 0.5
    assert rows.T.tolist() == [[1.0, 2.0, 3.0, 3.0, 4.0], [-3.0, 0.5, 0.5, 0.5, 0.5]]


@pytest.mark.parametrize("rule", ["median", "trimmed_mean"])
def test_the_searchs_rule_output_is_the_rule_on_the_whole_round(rule):
    # Prepare: rounds of 1-13 updates with ties, infinities and NaN, any number of attackers
    from fedarena.attacks.base import with_rows
    from fedarena.attacks.tailored import spread, spread_of
    gen = torch.Generator().manual_seed(0)
    for case in range(150):
        n, d = int(torch.randint(1, 14, (1,), generator=gen)), int(torch.randint(1, 40, (1,), generator=gen))
        bad = torch.randperm(n, generator=gen) < int(torch.randint(1, n + 1, (1,), generator=gen))
        x = torch.round(2 * torch.randn(n, d, generator=gen, dtype=torch.float64)) / 2
        x[torch.rand(n, d, generator=gen) < (0.05 if case % 5 == 0 else 0.0)] = float("nan")
        x[torch.rand(n, d, generator=gen) < (0.05 if case % 7 == 0 else 0.0)] = float("inf")
        output = spread_of(rule, x, bad)
        for m in (torch.round(2 * torch.randn(d, generator=gen, dtype=torch.float64)) / 2, x[0].clone()):
            # Execute: the merged output and the rule on the whole round with m in the attackers' rows
            got, expected = output(m), spread(rule, with_rows(x, bad, m), int(bad.sum()))
            # Assert: the same values, NaN where a NaN is
            assert torch.equal(got.isnan(), expected.isnan())
            assert torch.equal(got.nan_to_num(7.0), expected.nan_to_num(7.0))


def test_tailored_bulyan_paper_mode_keeps_every_attacker_in_bulyans_selection():
    # Prepare: 8 honest, 1 attacker: Bulyan (n = 9 >= 4f + 3) picks n - 2f = 7 by iterated Krum
    updates, bad = round_of(spiky(8), 1)
    out = tamper_of("tailored_bulyan")(updates, bad, torch.Generator())
    gamma = float((out[-1] - spiky(8).mean(0)).norm())
    # Assert: a brute-force scan of gamma agrees on where the selection stops holding the attacker
    from fedarena.attacks.tailored import bulyan_chosen, selection_fits
    push = out[-1] - spiky(8).mean(0)
    fits = [selection_fits(bulyan_chosen, updates, bad, spiky(8).mean(0) + g * push / gamma)
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
