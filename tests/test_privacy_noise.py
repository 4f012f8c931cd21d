"""The tensor side of differential privacy, exactly (``privacy.noise``): each function against the formula its
docstring states, on the same draws (the mutation score of the module: docs/testing.md)."""

import math

import pytest
import torch

from fedarena.privacy.noise import (
    clip_rows,
    gaussian,
    local_privatize,
    next_clip,
    unclipped_count,
    zero_non_finite,
)


def test_a_row_at_the_bound_or_below_is_kept_as_it_is_and_one_above_is_scaled_onto_it():
    updates = torch.tensor([[3.0, 4.0], [6.0, 8.0], [0.0, 0.0], [0.3, 0.4]])  # norms 5, 10, 0, 0.5
    clipped = clip_rows(updates, 5.0)
    assert torch.equal(clipped[[0, 2, 3]], updates[[0, 2, 3]])
    assert torch.allclose(clipped[1], torch.tensor([3.0, 4.0]))


def test_a_row_with_a_non_finite_entry_is_zeroed_the_others_kept_without_a_copy_when_all_are_finite():
    finite = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert zero_non_finite(finite) is finite
    mixed = torch.tensor([[1.0, float("nan")], [3.0, 4.0], [float("inf"), 0.0]])
    assert torch.equal(zero_non_finite(mixed), torch.tensor([[0.0, 0.0], [3.0, 4.0], [0.0, 0.0]]))
    assert torch.equal(clip_rows(mixed, 1.0)[0], torch.zeros(2))


def test_gaussian_noise_is_std_times_the_generators_normal_draw_and_std_zero_draws_nothing():
    like = torch.zeros(3, 4)
    noise = gaussian(like, 0.7, torch.Generator().manual_seed(5))
    assert torch.equal(noise, torch.randn(3, 4, generator=torch.Generator().manual_seed(5)) * 0.7)
    gen = torch.Generator().manual_seed(5)
    assert torch.equal(gaussian(like, 0.0, gen), like)
    assert torch.equal(torch.randn(2, generator=gen), torch.randn(2, generator=torch.Generator().manual_seed(5)))


def test_local_dp_adds_z_clip_noise_to_the_clipped_rows():
    updates = torch.tensor([[3.0, 4.0], [0.1, 0.2]])
    sent = local_privatize(updates, 1.0, 2.0, torch.Generator().manual_seed(3))
    expected = clip_rows(updates, 1.0) + torch.randn(2, 2, generator=torch.Generator().manual_seed(3)) * 2.0
    assert torch.equal(sent, expected)


def test_the_unclipped_count_includes_a_row_exactly_at_the_bound_and_a_non_finite_row_as_zero():
    updates = torch.tensor([[3.0, 4.0], [6.0, 8.0], [float("nan"), 1.0]])  # norms 5, 10, (zeroed) 0
    assert unclipped_count(updates, 5.0) == 2
    assert unclipped_count(updates, 4.9) == 1


def test_the_next_bound_is_andrew_et_als_geometric_step_on_the_noisy_fraction():
    gen = torch.Generator().manual_seed(11)
    bound = next_clip(2.0, 30, 100, 0.5, 0.2, 4.0, gen)
    draw = float(torch.randn((), generator=torch.Generator().manual_seed(11), dtype=torch.float64))
    fraction = (30 + 4.0 * draw) / 100
    assert bound == pytest.approx(2.0 * math.exp(-0.2 * (fraction - 0.5)), rel=1e-12)
    assert next_clip(2.0, 50, 100, 0.5, 0.2, 0.0, torch.Generator()) == pytest.approx(2.0)  # at the quantile: stays
