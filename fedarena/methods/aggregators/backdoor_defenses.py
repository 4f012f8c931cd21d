"""Defenses made for backdoors: norm bounding and weak differential privacy (Sun, Kairouz, Suresh, McMahan,
"Can you really backdoor federated learning?", 2019) and the robust learning rate (Ozdayi, Kantarcioglu,
Gel, AAAI 2021). FLAME (USENIX Security 2022) is in ``flame``.

Absolute thresholds (max_norm, sigma) are in the units of the updates; like ``centered_clipping``'s tau,
max_norm defaults to the round's median update norm, so the default acts at any scale; so does weak DP's
noise, whose default keeps the paper's ratio of noise to norm bound (sigma = 0.025 at M = 3 on EMNIST).
"""

from __future__ import annotations

import math

import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators.base import (
    RoundDraw,
    aggregator,
    ball_sensitivity,
    check_common,
    check_updates,
    columnwise,
    vector_median,
)
from fedarena.search_space import choice


def clip_factors(updates: torch.Tensor, bound: torch.Tensor | float) -> torch.Tensor:
    """[n] factors min(1, bound / ||u_i||): scaling row i by its factor clips it to L2 norm at most bound
    (a zero update keeps factor 1)."""
    norms = updates.norm(dim=1)
    bound = torch.as_tensor(bound, dtype=norms.dtype, device=norms.device)
    return torch.where(norms > bound, bound / norms, torch.ones_like(norms))


def norm_bound_radius(updates: torch.Tensor, max_norm: float | None) -> torch.Tensor | float:
    """The clipping radius: ``max_norm``, or the round's median update norm (np.median) where it is None."""
    return vector_median(updates.norm(dim=1)) if max_norm is None else max_norm


def clipped_mean(updates: torch.Tensor, bound: torch.Tensor | float) -> torch.Tensor:
    """Uniform mean of the updates each clipped to L2 norm at most ``bound``, as one matrix-vector product."""
    return (clip_factors(updates, bound) / updates.shape[0]) @ updates


def gaussian_noise(like: torch.Tensor, std: float, draw: RoundDraw | None) -> torch.Tensor:
    """N(0, std^2 I) shaped, typed and placed like ``like`` [d], drawn in float64 on the CPU from the round's
    generator (seed 0 where a rule is called without a round): the same noise in float32 and float64, on
    every device, and after a resume."""
    gen = (draw or RoundDraw.rows_in_order(1)).generator()
    noise = torch.randn(like.shape, generator=gen, dtype=torch.float64).mul_(std)
    return noise.to(device=like.device, dtype=like.dtype)


# Sun et al. 2019's weak DP on EMNIST: noise sigma = 0.025 with the norm bound M = 3; the default noise keeps
# this ratio to the clipping radius, so it acts at any scale of the updates
NOISE_PER_BOUND = 0.025 / 3


def check_norm_bound(n: int, f: int, *, max_norm: float | None = None, sigma: float | None = None) -> None:
    check_common(n, f)
    if max_norm is not None and not max_norm > 0:
        raise ConfigError(f"max_norm must be > 0 (or null: the round's median update norm), got {max_norm}")
    if sigma is not None and not 0 <= sigma < math.inf:
        raise ConfigError(f"weak_dp needs a finite noise standard deviation sigma >= 0 (or null: {NOISE_PER_BOUND:.5f} "
                          f"x the clipping radius), got {sigma}")


def fixed_bound(*, max_norm: float | None = None, **params) -> bool:
    """Whether the clipping radius is fixed (the client bounds its own norm, so the server needs only the sum of
    the bounded updates) rather than the round's median norm (which needs every norm)."""
    return max_norm is not None


def norm_bound_sensitivity(n: int, f: int, *, bound: float, max_norm: float | None = None) -> float:
    """Central DP's replace-one sensitivity in clip bounds: with a fixed ``max_norm`` M every row lies inside
    min(M, bound), so the uniform mean moves by at most 2 min(M, bound) / n (the mean's 2 / n where M >= bound);
    with the round's median norm (null) the radius moves with the rows, and the output stays in the ball of radius
    bound (``ball_sensitivity``'s 2)."""
    if max_norm is None:
        return ball_sensitivity(n, f)
    return 2.0 * min(max_norm / bound, 1.0) / n


# central DP's noise with a fixed max_norm follows its true sensitivity 2 min(max_norm, clip) / n (it had the ball's
# 2: n times too much noise); the runs it moves are central DP's, stale since privacy/central's version 2 (issue 53),
# and without DP no number changes, so the rule stays version 1
@aggregator("norm_bound", check=check_norm_bound, sensitivity=norm_bound_sensitivity, sum_only=fixed_bound)
def norm_bound(
    updates: torch.Tensor, *, weights: torch.Tensor, losses: torch.Tensor | None, f: int,
    max_norm: float | None = None,
) -> torch.Tensor:
    """Norm bounding (Sun et al. 2019, 'norm thresholding of updates'): scale every update to L2 norm at most
    M = ``max_norm`` (u * min(1, M / ||u||)), then take the uniform mean (uniform as the other robust rules
    here: under size-proportional sampling the weights are all ones). Sun et al. fix M in the units of their
    model's updates; max_norm None (default, scale-free) takes the round's median update norm (np.median),
    which makes this rule the ``clipping`` rule (but for that rule's 1e-10 guard in the divisor)."""
    check_updates(updates, f)
    check_norm_bound(updates.shape[0], f, max_norm=max_norm)
    return clipped_mean(updates, norm_bound_radius(updates, max_norm))


@aggregator("weak_dp", check=check_norm_bound, reads=("round",), version=2, sum_only=fixed_bound)
def weak_dp(
    updates: torch.Tensor, *, weights: torch.Tensor, losses: torch.Tensor | None, f: int,
    max_norm: float | None = None, sigma: float | None = None, round: RoundDraw | None = None,
) -> torch.Tensor:
    """Weak differential privacy (Sun et al. 2019): ``norm_bound`` (clip every update to L2 norm at most
    ``max_norm``, default the round's median norm; uniform mean), then add Gaussian noise N(0, sigma^2 I) to
    the aggregate (equivalently to the new global model, as in the paper). 'Weak': sigma is far below what a
    formal DP guarantee needs. The noise is drawn from the round's seed stream (``round``: trial seed and
    round), so a run is reproducible and a resumed run draws the same noise. sigma is in the units of the
    updates; null (default) is the paper's ratio of noise to norm bound (0.025 / 3, ``NOISE_PER_BOUND``)
    times the round's clipping radius; sigma 0 is ``norm_bound``. Not DP-FedAvg (McMahan et al. 2018): no
    privacy accounting, and no noise calibrated to the number of clients."""
    check_updates(updates, f)
    check_norm_bound(updates.shape[0], f, max_norm=max_norm, sigma=sigma)
    radius = norm_bound_radius(updates, max_norm)
    mean = clipped_mean(updates, radius)
    std = NOISE_PER_BOUND * float(radius) if sigma is None else sigma
    return mean + gaussian_noise(mean, std, round) if std > 0 else mean


def rlr_threshold(n: int, theta: int | None) -> int:
    """theta, or where it is None ceil(0.4 n): the reference's theta = 4 for 10 agents, as a share of n."""
    return (2 * n + 4) // 5 if theta is None else theta


def check_rlr(n: int, f: int, *, theta: int | None = None) -> None:
    check_common(n, f)
    if theta is not None and (isinstance(theta, bool) or not isinstance(theta, int) or not 0 < theta <= n):
        raise ConfigError(
            f"rlr needs a whole number theta with 0 < theta <= n = {n} (how many clients' update signs must "
            f"agree in a coordinate for the server to keep its learning rate there; null: ceil(0.4 n)), got "
            f"theta={theta!r}"
        )


@aggregator("rlr", check=check_rlr, search={"theta": choice(2, 3, 4, 5, 6)})
def rlr(
    updates: torch.Tensor, *, weights: torch.Tensor, losses: torch.Tensor | None, f: int,
    theta: int | None = None,
) -> torch.Tensor:
    """Robust learning rate (Ozdayi, Kantarcioglu, Gel, AAAI 2021; reference ``compute_robustLR`` with server
    lr 1): per coordinate, the server learning rate is -1 where |sum_i sign(u_i)| < ``theta`` and +1
    elsewhere (a zero coordinate votes 0); return lr * the uniform mean of the updates (the reference
    weights by sample counts, which under size-proportional sampling are ones). theta must satisfy
    0 < theta <= n; None (default) takes ceil(0.4 n), which is the reference's theta = 4 for 10 agents
    (its README, Fashion-MNIST) and stays feasible for every n. Where at least theta signs agree in every
    coordinate, the rule is the mean."""
    n = check_updates(updates, f)
    check_rlr(n, f, theta=theta)
    votes = columnwise(lambda block: block.sign().sum(dim=1).abs(), updates)  # whole numbers, exact
    lr = torch.where(votes < rlr_threshold(n, theta), -1.0, 1.0).to(updates.dtype)
    return lr * updates.mean(dim=0)
