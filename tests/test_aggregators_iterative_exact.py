"""fedarena/methods/aggregators/iterative.py checked exactly (its mutation score: docs/testing.md): Weiszfeld's
steps by hand from the weighted mean, the stop rule at its equality, the eps floor, the defaults on a slowly
converging input against a Weiszfeld written out here, centered clipping's 1e-30 floor, every setting's edges and
each refusal word for word, and the registry entries (make mutants MODULE=fedarena/methods/aggregators/iterative.py)."""

import inspect
import math

import pytest
import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators import make_aggregator
from fedarena.methods.aggregators.base import AGGREGATORS, ball_sensitivity
from fedarena.methods.aggregators.iterative import (
    centered_clipping,
    check_centered_clipping,
    check_geometric_median,
    geometric_median,
)

F64 = torch.float64
LINE = torch.tensor([[0.0], [1.0], [5.0]], dtype=F64)  # mean 2, distances 2, 1, 3: objective 2


def gm(updates, weights=None, **params):
    weights = torch.ones(len(updates), dtype=F64) if weights is None else torch.tensor(weights, dtype=F64)
    return geometric_median(updates, weights=weights, losses=None, f=0, **params)


def cc(updates, **params):
    return centered_clipping(updates, weights=torch.ones(len(updates), dtype=F64), losses=None, f=0, **params)


def weiszfeld(updates, weights, iters, eps, tol):
    """The smoothed Weiszfeld algorithm as the docstring states it, written out: (v, steps taken)."""
    alpha = weights / weights.sum()
    v = alpha @ updates
    objective = alpha @ ((updates - v) ** 2).sum(dim=1).sqrt()
    for step in range(1, iters + 1):
        beta = alpha / torch.clamp(((updates - v) ** 2).sum(dim=1).sqrt(), min=eps)
        v = (beta @ updates) / beta.sum()
        previous, objective = objective, alpha @ ((updates - v) ** 2).sum(dim=1).sqrt()
        if float(previous - objective) <= tol * float(objective):
            return v, step
    return v, iters


def test_one_step_from_the_mean_by_hand_with_iters_1_the_least_allowed():
    # beta = (1/2, 1, 1/3) / 3: v = (0 + 1 + 5/3) / (1/2 + 1 + 1/3) = 16/11
    assert gm(LINE, iters=1, tol=0.0).item() == pytest.approx(16 / 11, abs=1e-15)


def test_a_step_that_improves_by_at_most_tol_times_the_objective_ends_the_iterations():
    # the first step improves the objective from 2 to 20/11, by 2/11 = 0.1 * 20/11: tol 0.2 stops there (of 100)
    assert gm(LINE, tol=0.2).item() == pytest.approx(16 / 11, abs=1e-15)
    assert abs(gm(LINE, tol=0.05).item() - 16 / 11) > 0.1  # below 0.1 it goes on (towards the median 1)


def test_an_improvement_exactly_tol_times_the_objective_stops():
    alpha = torch.full((3,), 1 / 3, dtype=F64)
    start = alpha @ (LINE[:, 0] - 2.0).abs()  # the objective at the mean, as the rule sums it
    after = alpha @ (LINE[:, 0] - gm(LINE, iters=1, tol=0.0)).abs()
    gain, objective = float(start - after), float(after)
    tol = gain / objective  # 0.1 up to rounding
    assert tol * objective == gain and 0.0999 < tol < 0.1001  # the equality holds to the last bit
    assert gm(LINE, tol=tol).item() == pytest.approx(16 / 11, abs=1e-15)
    below = math.nextafter(tol, -math.inf)
    assert abs(gm(LINE, tol=below).item() - 16 / 11) > 0.1


def test_the_weights_normalised_are_alpha_by_hand():
    # alpha = (1/2, 1/4, 1/4): mean 3/2, distances 3/2, 1/2, 7/2, beta = (1/3, 1/2, 1/14): v = (6/7) / (38/42)
    assert gm(LINE, [2.0, 1.0, 1.0], iters=1, tol=0.0).item() == pytest.approx(18 / 19, abs=1e-15)


def test_a_distance_below_eps_counts_as_eps_default_1e_6():
    # the mean 2 is the third point: beta = (1/2, 1, 1/eps, 1/3) / 4, v = (8/3 + 2/eps) / (11/6 + 1/eps); the
    # objective is flat on [1, 2] (the medians of four points), so the first step is the last
    points = torch.tensor([[0.0], [1.0], [2.0], [5.0]], dtype=F64)
    for params, eps in (({}, 1e-6), ({"eps": 0.5}, 0.5)):
        assert gm(points, **params).item() == pytest.approx((8 / 3 + 2 / eps) / (11 / 6 + 1 / eps), abs=1e-14)
    assert gm(points, eps=0.5).item() == pytest.approx(40 / 23, abs=1e-14)


def test_the_defaults_stop_by_tol_1e_6_or_after_100_steps_on_a_slow_vertex():
    # the median is the vertex (0, 0) of a 128-degree angle, which Weiszfeld nears at a rate of about 0.96 a step
    points = torch.tensor([[0.0, 0.0], [1.0, 0.55], [-1.0, 0.55]], dtype=F64)
    ones = torch.ones(3, dtype=F64)
    by_tol, steps = weiszfeld(points, ones, 100, 1e-6, 1e-6)
    assert steps == 78 and weiszfeld(points, ones, 100, 1e-6, 2e-6)[1] == 63
    torch.testing.assert_close(gm(points), by_tol, rtol=0, atol=1e-12)
    hundred, steps = weiszfeld(points, ones, 100, 1e-6, 0.0)
    assert steps == 100 and float((hundred - weiszfeld(points, ones, 101, 1e-6, 0.0)[0]).norm()) > 1e-5
    torch.testing.assert_close(gm(points, tol=0.0), hundred, rtol=0, atol=1e-12)


def test_the_defaults_and_the_checks_defaults_are_the_rules():
    median_defaults = {"iters": 100, "eps": 1e-6, "tol": 1e-6}
    assert make_aggregator({"name": "geometric_median"}, f=0).params == median_defaults
    signature = inspect.signature(check_geometric_median).parameters
    assert {name: signature[name].default for name in median_defaults} == median_defaults
    clipping_defaults = {"tau": None, "iters": 1, "center": "median"}
    assert make_aggregator({"name": "centered_clipping"}, f=0).params == clipping_defaults
    signature = inspect.signature(check_centered_clipping).parameters
    assert {name: signature[name].default for name in clipping_defaults} == clipping_defaults
    check_centered_clipping(3, 0)  # its own defaults pass


def test_the_least_geometric_median_settings_are_allowed():
    check_geometric_median(1, 0, iters=1, eps=5e-324, tol=0.0)


@pytest.mark.parametrize("iters, eps, tol", [(0, 1e-6, 1e-6), (1, 0.0, 1e-6), (1, -1.0, 1e-6), (1, 1e-6, -5e-324),
                                             (0, 0.0, -1.0)])
def test_geometric_median_settings_past_their_least_are_refused_in_words(iters, eps, tol):
    with pytest.raises(ConfigError) as err:
        check_geometric_median(3, 0, iters=iters, eps=eps, tol=tol)
    assert str(err.value) == f"geometric_median needs iters >= 1, eps > 0, tol >= 0; got {iters}, {eps}, {tol}"
    with pytest.raises(ConfigError) as err:
        gm(LINE, iters=iters, eps=eps, tol=tol)
    assert str(err.value).startswith("geometric_median needs iters >= 1")


def test_the_checks_start_with_the_common_one():
    for check in (check_geometric_median, check_centered_clipping):
        with pytest.raises(ConfigError) as err:
            check(0, 0)
        assert str(err.value) == "an aggregator needs at least one update, got n=0"
        with pytest.raises(ConfigError, match="f must be >= 0, got f=-1"):
            check(3, -1)


def test_the_least_centered_clipping_settings_are_allowed():
    check_centered_clipping(1, 0, tau=5e-324, iters=1, center="zero")
    check_centered_clipping(1, 0, tau=None, iters=1, center="median")


@pytest.mark.parametrize("tau, iters", [(0.0, 1), (-1.0, 1), (None, 0), (1.0, 0), (0.0, 0)])
def test_centered_clipping_settings_past_their_least_are_refused_in_words(tau, iters):
    with pytest.raises(ConfigError) as err:
        check_centered_clipping(3, 0, tau=tau, iters=iters)
    assert str(err.value) == (f"centered_clipping needs tau > 0 (or null: the round's median distance) and "
                              f"iters >= 1; got tau={tau}, iters={iters}")


@pytest.mark.parametrize("center", ["mean", "Median", ""])
def test_an_unknown_center_is_refused_in_words(center):
    with pytest.raises(ConfigError) as err:
        check_centered_clipping(3, 0, center=center)
    assert str(err.value) == f"centered_clipping: unknown center {center!r}; allowed: median, zero"


def test_a_distance_just_above_the_1e_30_floor_is_not_floored():
    # one row at distance 1.2e-30 from zero, tau 1.5e-30: inside the radius, kept whole (a floor of 2e-30 would
    # scale it by 0.75)
    row = torch.tensor([[1.2e-30, 0.0]], dtype=F64)
    assert cc(row, tau=1.5e-30, center="zero").tolist() == [1.2e-30, 0.0]
    # at distance 0.9e-30 the floor counts it 1e-30 away: tau 0.45e-30 scales it by 0.45, not 0.5
    row = torch.tensor([[0.9e-30, 0.0]], dtype=F64)
    assert cc(row, tau=0.45e-30, center="zero")[0].item() == pytest.approx(0.45 * 0.9e-30, rel=1e-12)


def test_equal_rows_stay_where_they_are_with_the_median_distance_zero():
    rows = torch.tensor([[1.0, -2.0]] * 3, dtype=F64)
    assert cc(rows).tolist() == [1.0, -2.0]  # radius 0 / the 1e-30 floor: scale 0, no NaN


def test_centered_clipping_by_hand_from_the_median_with_the_median_distance():
    # median (1, 0); distances 1, 1, 4: tau = 1, the far row (5, 0) clipped to (2, 0); v = (1, 0) + (0, 0 + 1, 0) / 3
    rows = torch.tensor([[1.0, 1.0], [0.0, 0.0], [5.0, 0.0]], dtype=F64)
    expected = [1.0 + (0.0 - 1.0 + 1.0) / 3, (1.0 + 0.0 + 0.0) / 3]
    torch.testing.assert_close(cc(rows), torch.tensor(expected, dtype=F64), rtol=0, atol=1e-15)
    # a second iteration moves on from there with the same radius
    once = torch.tensor(expected, dtype=F64)
    dist = ((rows - once) ** 2).sum(dim=1).sqrt()
    scale = torch.clamp(1.0 / dist, max=1.0)
    twice = once + (scale[:, None] * (rows - once)).sum(dim=0) / 3
    torch.testing.assert_close(cc(rows, iters=2), twice, rtol=0, atol=1e-15)


def test_both_rules_are_registered_with_what_they_read():
    median = AGGREGATORS.get("geometric_median")
    assert median.rule is geometric_median and median.check is check_geometric_median
    assert median.reads == ("weights",) and median.sensitivity is ball_sensitivity
    assert AGGREGATORS.version("geometric_median") == 1
    clipping = AGGREGATORS.get("centered_clipping")
    assert clipping.rule is centered_clipping and clipping.check is check_centered_clipping
    assert clipping.reads == () and clipping.sensitivity is None and AGGREGATORS.version("centered_clipping") == 1
