"""Tilted losses: TERM (Li, Beirami, Sanjabi, Smith, ICLR 2021) and FedTilt's two-level tilted loss.

The t-tilted mean of values x_i with weights p_i (normalised to sum 1; zero weight = left out) is

    T(t; x, p) = (1/t) log sum_i p_i exp(t x_i),

the weighted mean at t = 0 (its limit), the max as t -> +inf and the min as t -> -inf. It is computed
for either sign of t around the weighted mean m: T = m + (1/t) log sum_i p_i exp(t (x_i - m)); the log
term is a log-sum-exp when some |t (x_i - m)| is large and log1p(sum_i p_i expm1(t (x_i - m))) when all
are small, so that t -> 0 loses no precision (the plain formula cancels catastrophically there).

FedTilt (Section III-C, footnote 3): the client loss of a minibatch is two-level,
R(tau, lambda) = T(tau; (R^k)_k, (|D^k| / |D|)_k) over the classes k present, with R^k(lambda) =
T(lambda; losses of the class-k samples, uniform); tau = lambda gives one-level TERM over the samples and
tau = lambda = 0 the average loss.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from fedarena.models.functional import FlatModel

SMALL_SPREAD = 1.0  # |t (x - m)| below this for every entry: the expm1 branch is the accurate one


def tilted_mean(x: torch.Tensor, p: torch.Tensor, t: float) -> torch.Tensor:
    """T(t; x, p) over the last dimension (rows whose weights are all zero give 0)."""
    has = (p > 0).any(-1)
    p = torch.where(has[..., None], p, torch.ones_like(p))  # weightless rows: a dummy, masked out below
    valid = p > 0
    p = p / p.sum(-1, keepdim=True)
    x = torch.where(valid, x, torch.zeros_like(x))
    mean = (p * x).sum(-1)
    if t == 0:
        return torch.where(has, mean, torch.zeros_like(mean))
    d = torch.where(valid, t * (x - mean[..., None]), torch.zeros_like(x))
    small = d.abs().amax(-1) < SMALL_SPREAD
    near = torch.log1p((p * torch.expm1(d.clamp(-SMALL_SPREAD, SMALL_SPREAD))).sum(-1))
    far = torch.logsumexp(torch.where(valid, d + torch.log(p), torch.full_like(d, -torch.inf)), dim=-1)
    value = mean + torch.where(small, near, far) / t
    return torch.where(has, value, torch.zeros_like(value))


def tilted_weights(values: torch.Tensor, t: float) -> torch.Tensor:
    """Weights proportional to exp(t * values), normalised (a numerically stable softmax); uniform at t = 0.
    These are the gradient weights of T(t; values, uniform): TERM's client weighting, FedTilt's aggregation."""
    return torch.softmax(t * values, dim=0)


def two_level_tilted_loss(losses: torch.Tensor, classes: torch.Tensor, mask: torch.Tensor, num_classes: int,
                          tau: float, lam: float) -> torch.Tensor:
    """FedTilt's R(tau, lambda) of one minibatch: per-sample ``losses`` [B], class indices [B], ``mask`` [B]
    (1 for real samples). Class weights are the classes' shares of the real samples."""
    member = (classes[None, :] == torch.arange(num_classes, device=classes.device)[:, None]).to(losses.dtype)
    member = member * mask[None, :]  # [C, B]
    class_losses = tilted_mean(losses.expand(num_classes, -1), member, lam)  # [C]
    return tilted_mean(class_losses, member.sum(-1), tau)


def _num_classes(model: FlatModel, out: torch.Tensor) -> int:
    if model.task == "classification":
        return out.shape[-1]
    return 2 if model.task == "binary_pm1" else 1


def tilted_loss_fn(model: FlatModel, tau: float, lam: float) -> Callable[..., torch.Tensor]:
    """``loss(flat, x, y, mask)`` = R(tau, lambda) of the model's per-sample losses (plus the SVM's l2 term).
    The exact special cases are used where they hold: tau = lambda = 0 is the model's own mean loss, and
    tau = lambda is one-level TERM over the samples."""
    if tau == 0 and lam == 0:
        return model.loss

    def loss(flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        out = model.forward(flat, x)
        per_sample = model.per_sample_loss(out, y)
        if tau == lam:
            value = tilted_mean(per_sample, mask, tau)
        else:
            value = two_level_tilted_loss(per_sample, model.class_index(y), mask, _num_classes(model, out), tau, lam)
        if model.l2:
            value = value + model.l2 * (flat[: model.sizes[0]] ** 2).sum()
        return value

    return loss
