"""The aggregator builder and checks, the clip pre-aggregator, and properties shared by every rule."""

import pytest
import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators import (
    AGGREGATORS,
    base,
    check_aggregator,
    clip_to_median_norm,
    expected_malicious,
    make_aggregator,
)
from fedarena.perf.aggregators import time_aggregators
from fedarena.registry import UnknownNameError

SEVEN = [(1.0, 1.0), (1.3, 0.9), (0.9, 1.1), (1.1, 1.4), (0.8, 0.7), (9.0, 7.0), (-6.0, 12.0)]
# f per rule for the shared round of seven. Bulyan needs n >= 4f + 3, and with f = 1 here its last Krum
# steps (one neighbour) tie and break ties by index; its invariance is tested on a tie-free input elsewhere.
F_FOR = {"bulyan": 0}
# the rules a caller can run on bare updates: not those that read a round input only a trial makes (FLTrust's root
# update g0: tests/test_aggregators_foolsgold_fltrust.py; DeepSight's probe of the models:
# tests/test_aggregators_deepsight.py); called without it, such a rule raises ConfigError
DIRECT = [name for name in AGGREGATORS.names() if not {"root_update", "probe"} & set(AGGREGATORS.get(name).reads)]


def round_of_seven(dtype=torch.float64):
    updates = torch.tensor(SEVEN, dtype=dtype)
    weights = torch.tensor([10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0], dtype=dtype)
    losses = torch.tensor([0.5, 0.6, 0.55, 0.65, 0.45, 3.0, 2.0], dtype=dtype)
    return updates, weights, losses


def random_round(n, d, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    updates = torch.randn(n, d, generator=gen, dtype=dtype)
    return updates, torch.rand(n, generator=gen, dtype=dtype) + 0.1, torch.rand(n, generator=gen, dtype=dtype)


def test_make_aggregator_resolves_hyperparameters_and_runs():
    updates, weights, losses = round_of_seven()
    agg = make_aggregator({"name": "multi_krum", "pre": [], "f": None, "m": 2}, f=2)
    assert (agg.name, agg.f, agg.params) == ("multi_krum", 2, {"m": 2, "reference_mode": False})
    assert torch.allclose(agg(updates, weights, losses), torch.tensor([0.95, 1.05], dtype=torch.float64))


def test_section_f_overrides_the_engine_f():
    updates, weights, losses = round_of_seven()
    agg = make_aggregator({"name": "k_norm", "f": 1}, f=2)
    assert agg.f == 1
    assert torch.allclose(
        agg(updates, weights, losses), torch.tensor([14.1 / 6, 12.1 / 6], dtype=torch.float64)
    )


def test_unknown_names_and_parameters_list_what_is_allowed():
    with pytest.raises(UnknownNameError, match="available: .*krum"):
        make_aggregator({"name": "krumm"}, f=0)
    with pytest.raises(ConfigError, match="allowed: beta"):
        make_aggregator({"name": "trimmed_mean", "trim": 0.1}, f=0)
    with pytest.raises(UnknownNameError, match="unknown pre-aggregator 'clipp'"):
        make_aggregator({"name": "mean", "pre": ["clipp"]}, f=0)
    with pytest.raises(ConfigError, match="needs a 'name'"):
        make_aggregator({"pre": ["clip"]}, f=0)
    with pytest.raises(ConfigError, match="integer >= 0"):
        make_aggregator({"name": "krum", "f": 1.5}, f=0)


def test_clip_pre_aggregator_changes_krums_choice():
    # norms 1, 2, 10, 12, 30 (median 10); f = 1, k = 2 neighbours.
    updates = torch.tensor(
        [[1.0, 0.0], [2.0, 0.0], [10.0, 0.0], [12.0, 0.0], [30.0, 0.0]], dtype=torch.float64
    )
    weights = torch.ones(5, dtype=torch.float64)
    plain = make_aggregator({"name": "krum"}, f=1)(updates, weights)  # scores 82, 65, 68, 104, 724
    clipped = make_aggregator({"name": "krum", "pre": ["clip"]}, f=1)(updates, weights)  # 12, 30 -> 10
    assert plain.tolist() == [2.0, 0.0]
    # 12 and 30 clipped to norm 10 lie within 1e-10 of row 2 and of each other: Krum keeps one of the three
    assert clipped.tolist() == pytest.approx([10.0, 0.0], abs=1e-9)
    direct = AGGREGATORS.get("krum").rule(clip_to_median_norm(updates), weights=weights, losses=None, f=1)
    assert torch.equal(clipped, direct)


def test_check_aggregator_rejects_infeasible_settings_before_training():
    check_aggregator({"name": "krum"}, n=10, f=5)  # Ditto's 50% corruption: k = 3 neighbours
    check_aggregator({"name": "bulyan"}, n=11, f=2)
    cases = [
        ({"name": "krum"}, 10, 8, "n - f - 2 >= 1"),
        ({"name": "multi_krum", "m": 11}, 10, 1, "1 <= m <= n"),
        ({"name": "bulyan"}, 10, 2, "n >= 4f \\+ 3"),
        ({"name": "trimmed_mean"}, 10, 5, "2 \\* 5 < n = 10"),
        ({"name": "trimmed_mean", "beta": 0.6}, 10, 0, "beta"),
        ({"name": "k_loss"}, 10, 10, "f < n"),
        ({"name": "mean"}, 10, -1, "integer >= 0"),
        ({"name": "median"}, 0, 0, "at least one update"),
        ({"name": "krum", "f": 8}, 10, 1, "n - f - 2 >= 1"),
    ]
    for section, n, f, message in cases:
        with pytest.raises(ConfigError, match=message):
            check_aggregator(section, n=n, f=f)


def test_expected_malicious_follows_the_reference_formula():
    assert expected_malicious(10, 250, 500) == 5
    assert expected_malicious(10, 100, 500) == 2
    assert expected_malicious(10, 499, 500) == 9
    assert expected_malicious(20, 1, 3) == 6
    assert expected_malicious(10, 0, 500) == 0
    with pytest.raises(ConfigError):
        expected_malicious(10, 600, 500)


def test_needs_losses_lists_exactly_the_loss_based_rules():
    assert {name for name in AGGREGATORS if AGGREGATORS.get(name).needs_losses} == {"k_loss"}
    assert make_aggregator({"name": "k_loss"}, f=1).needs_losses
    assert not make_aggregator({"name": "krum"}, f=1).needs_losses


@pytest.mark.parametrize("name", DIRECT)
def test_every_rule_is_permutation_invariant(name):
    updates, weights, losses = round_of_seven()
    agg = make_aggregator({"name": name}, f=F_FOR.get(name, 2))
    expected = agg(updates, weights, losses)
    for perm in ([6, 5, 4, 3, 2, 1, 0], [3, 6, 0, 5, 1, 4, 2]):
        assert torch.allclose(agg(updates[perm], weights[perm], losses[perm]), expected, atol=1e-7), perm


@pytest.mark.parametrize("name", DIRECT)
def test_every_rule_is_vectorised_over_float64_and_float32(name):
    updates, weights, losses = random_round(10, 1000, torch.float64)
    agg = make_aggregator({"name": name}, f=1)
    result = agg(updates, weights, losses)
    assert result.shape == (1000,) and result.dtype == torch.float64 and torch.isfinite(result).all()
    single = agg(updates.float(), weights.float(), losses.float())
    assert single.dtype == torch.float32
    assert torch.allclose(single.double(), result, atol=1e-4)


@pytest.mark.parametrize("name", DIRECT)
def test_column_blocks_do_not_change_results(name, monkeypatch):
    updates, weights, losses = random_round(9, 300, torch.float64)
    agg = make_aggregator({"name": name}, f=1)
    whole = agg(updates, weights, losses)
    monkeypatch.setattr(base, "CHUNK_ELEMENTS", 50)  # 5 columns per block, 60 blocks
    assert len(base.column_blocks(updates)) == 60
    assert torch.allclose(agg(updates, weights, losses), whole, atol=1e-10)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", DIRECT)
def test_every_rule_gives_the_same_result_on_cuda(name):
    updates, weights, losses = random_round(10, 1000, torch.float64)
    agg = make_aggregator({"name": name}, f=1)
    on_gpu = agg(updates.cuda(), weights.cuda(), losses.cuda())
    assert on_gpu.device.type == "cuda"
    assert torch.allclose(on_gpu.cpu(), agg(updates, weights, losses), atol=1e-8)


def test_every_rule_has_a_docstring_naming_its_source():
    for name in AGGREGATORS.names():
        doc = AGGREGATORS.get(name).rule.__doc__ or ""
        assert any(word in doc for word in ("et al", "Ditto", "20")), name


def test_time_aggregators_reports_every_rule():
    rows = time_aggregators(d=50, ns=(2, 10), repeats=1)
    assert {row["rule"] for row in rows} == set(AGGREGATORS.names())
    by_key = {(row["rule"], row["n"]): row for row in rows}
    assert by_key[("bulyan", 10)]["f"] == 1 and by_key[("bulyan", 10)]["seconds"] is not None
    assert by_key[("krum", 2)]["seconds"] is None and "skipped" in by_key[("krum", 2)]["note"]
    assert by_key[("median", 2)]["f"] == 0 and by_key[("median", 2)]["seconds"] is not None


def outlier_round(scale: float = 1e-3):
    """Nine honest updates near (scale, ..., scale) and two far outliers, at the small scale of real model
    updates (a default in absolute units, such as a clipping radius of 1.0, would never act here)."""
    gen = torch.Generator().manual_seed(7)
    honest = scale * (1 + 0.1 * torch.randn(9, 20, generator=gen, dtype=torch.float64))
    outliers = -20 * scale * torch.ones(2, 20, dtype=torch.float64)
    losses = torch.tensor([0.5] * 9 + [3.0, 2.5], dtype=torch.float64)
    return torch.cat([honest, outliers]), torch.ones(11, dtype=torch.float64), losses


# rlr flips the server rate only where the clients' signs disagree: here every coordinate has 9 positive and 2
# negative updates, so it rightly returns the mean (tests/test_aggregators_backdoor.py gives it split signs); crfl
# certifies rather than filters: it averages every update and adds its noise (tests/test_aggregators_crfl.py);
# fldetector judges a client by its history, which one round does not have (tests/test_aggregators_fldetector.py)
DEFENSES = [name for name in DIRECT if name not in ("mean", "weighted_mean", "rlr", "crfl", "fldetector")]


@pytest.mark.parametrize("name", DEFENSES)
def test_every_defense_acts_at_its_defaults_on_a_round_with_outliers(name):
    # Prepare: f = 2 outliers among 11 updates of norm ~4e-3, every rule at its default hyperparameters
    updates, weights, losses = outlier_round()
    honest_mean, plain_mean = updates[:9].mean(0), updates.mean(0)
    # Execute
    out = make_aggregator({"name": name}, f=2)(updates, weights, losses)
    # Assert: the defense changes the aggregate, and (except FedMGDA+, which returns a unit-scale
    # direction) moves it towards the honest cluster
    assert (out - plain_mean).norm() > 0.1 * plain_mean.norm(), name
    if name != "fedmgda_plus":
        assert (out - honest_mean).norm() < (plain_mean - honest_mean).norm(), name
