"""FedTilt's persistent outliers (Zhang et al., Section IV-B2 and Appendix G): injected into the
training data of the round's participating clients in *every* round, drawn anew each round.

- ``persistent_random_corruption``: "30% pixels of 30% training samples are corrupted": in each client,
  round(sample_fraction * n_k) of its training samples, and in each of them round(pixel_fraction * P) of
  its P pixels, get a random value drawn uniformly from that pixel's range in the (clean) training data.
  A pixel of an image [C, H, W] is a spatial position (all its channels are replaced); for flat inputs
  every feature is a pixel.
- ``persistent_gaussian_noise``: "noises from the standard Gaussian distributions": the same choice of
  samples (fraction not stated in the paper; 0.3 as for the corruption), each feature + N(0, std^2).

Who gets outliers (``scope``): FedTilt injects them into *all* participating clients, with no
adversaries (``scope="all"``, the default; it needs level 0, and metrics cover every client). As an
extension, ``scope="malicious"`` restricts them to the participating malicious clients (needs level > 0;
metrics then cover the benign ones). Labels, validation and test data are never changed.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch

from fedarena.attacks.base import Effect, attack
from fedarena.attacks.checks import fraction, positive
from fedarena.datasets.base import FederatedDataset
from fedarena.errors import ConfigError

SCOPES = ("all", "malicious")


def pick_samples(owner: torch.Tensor, fraction_: float, gen: torch.Generator) -> torch.Tensor:
    """Bool [m]: in each client (``owner`` = client id per sample), round(fraction * n_k) of its samples,
    uniformly without replacement (one sort over random keys, no loop over clients)."""
    keys = torch.rand(owner.shape, generator=gen, device=owner.device, dtype=torch.float64)
    order = torch.argsort(owner.to(torch.float64) + keys)  # grouped by client, random order within
    _, counts = torch.unique_consecutive(owner[order], return_counts=True)
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.arange(len(owner), device=owner.device) - torch.repeat_interleave(starts, counts)
    quota = torch.repeat_interleave(torch.round(counts * fraction_).long(), counts)
    chosen = torch.zeros_like(owner, dtype=torch.bool)
    chosen[order] = rank < quota
    return chosen


def pixel_mask(x: torch.Tensor, fraction_: float, gen: torch.Generator) -> torch.Tensor:
    """Bool mask broadcastable to ``x`` [s, ...]: round(fraction * P) random pixels per sample."""
    shape = (1, *x.shape[2:]) if x.dim() == 4 else tuple(x.shape[1:])  # [C, H, W]: a pixel spans channels
    pixels = int(np.prod(shape))
    count = int(round(fraction_ * pixels))
    keys = torch.rand(x.shape[0], pixels, generator=gen, device=x.device)
    mask = torch.zeros(x.shape[0], pixels, dtype=torch.bool, device=x.device)
    mask.scatter_(1, keys.argsort(dim=1)[:, :count], True)
    return mask.reshape(x.shape[0], *shape)


def feature_range(dataset: FederatedDataset) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-feature minimum and maximum over every client's clean training data."""
    low = torch.stack([c.train.x.amin(0) for c in dataset.clients if len(c.train)]).amin(0)
    high = torch.stack([c.train.x.amax(0) for c in dataset.clients if len(c.train)]).amax(0)
    return low, high


def random_corruption(x, y, owner, bad, gen, *, sample_fraction: float, pixel_fraction: float,
                      low: torch.Tensor, high: torch.Tensor, malicious_only: bool):
    """The ``corrupt`` hook of ``persistent_random_corruption`` (see the module docstring)."""
    chosen = pick_samples(owner, sample_fraction, gen) & (bad if malicious_only else True)
    picked = x[chosen]
    low, high = low.to(x.device, x.dtype), high.to(x.device, x.dtype)
    values = low + (high - low) * torch.rand(picked.shape, generator=gen, device=x.device, dtype=x.dtype)
    out = x.clone()
    out[chosen] = torch.where(pixel_mask(picked, pixel_fraction, gen), values, picked)
    return out, y


def gaussian_noise(x, y, owner, bad, gen, *, sample_fraction: float, std: float, malicious_only: bool):
    """The ``corrupt`` hook of ``persistent_gaussian_noise``: chosen samples + N(0, std^2) per feature."""
    chosen = pick_samples(owner, sample_fraction, gen) & (bad if malicious_only else True)
    noise = torch.randn((int(chosen.sum()), *x.shape[1:]), generator=gen, device=x.device, dtype=x.dtype)
    out = x.clone()
    out[chosen] = x[chosen] + std * noise
    return out, y


def _malicious_only(attack: str, scope: str, malicious: np.ndarray) -> bool:
    """Check ``scope`` against the level (see the module docstring)."""
    if scope not in SCOPES:
        raise ConfigError(f"attack {attack!r}: scope must be one of {', '.join(SCOPES)}; got {scope!r}")
    if scope == "all" and malicious.any():
        raise ConfigError(f"attack {attack!r} with scope='all' puts outliers into every participating client "
                          "(FedTilt), so it takes level 0; set scope='malicious' to restrict the outliers "
                          "to a malicious fraction of the clients")
    if scope == "malicious" and not malicious.any():
        raise ConfigError(f"attack {attack!r} with scope='malicious' needs a level > 0 (no malicious client)")
    return scope == "malicious"


@attack("persistent_random_corruption", device_reads=())
def persistent_random_corruption(dataset: FederatedDataset, malicious: np.ndarray,
                                 rng: np.random.Generator, *, sample_fraction: float = 0.3, pixel_fraction: float = 0.3,
                                 scope: str = "all") -> Effect:
    """FedTilt persistent random corruption (30% of the pixels of 30% of the samples, every round)."""
    name = "persistent_random_corruption"
    low, high = feature_range(dataset)
    corrupt = partial(random_corruption, sample_fraction=fraction(name, "sample_fraction", sample_fraction),
                      pixel_fraction=fraction(name, "pixel_fraction", pixel_fraction), low=low, high=high,
                      malicious_only=_malicious_only(name, scope, malicious))
    return Effect(dataset, corrupt=corrupt)


@attack("persistent_gaussian_noise", device_reads=())
def persistent_gaussian_noise(dataset: FederatedDataset, malicious: np.ndarray, rng: np.random.Generator, *,
                              sample_fraction: float = 0.3, std: float = 1.0, scope: str = "all") -> Effect:
    """FedTilt persistent Gaussian noise (standard normal, added to a fraction of the samples every round)."""
    name = "persistent_gaussian_noise"
    corrupt = partial(gaussian_noise, sample_fraction=fraction(name, "sample_fraction", sample_fraction),
                      std=positive(name, "std", std), malicious_only=_malicious_only(name, scope, malicious))
    return Effect(dataset, corrupt=corrupt)
