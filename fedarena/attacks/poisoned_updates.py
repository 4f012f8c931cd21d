"""Model attacks: what the malicious devices of a round send in place of their honest updates.

Each tamper is ``tamper(updates[n, d], bad[n] bool, generator) -> updates[n, d]``: it returns a new
tensor in which only the rows of ``bad`` differ (benign rows are copied as they are). ``n`` is the
number of updates of the round, i.e. ``clients_per_round`` (the engine stacks every selected client).
Attacks that need statistics of the honest updates (ALIE, IPM) are *omniscient*, as in their papers:
they read the benign rows of the round; in a round where every selected device is malicious they use
the malicious devices' own honest updates instead.
"""

from __future__ import annotations

from functools import partial
from statistics import NormalDist

import numpy as np
import torch

from fedarena.attacks.base import Effect, attack, with_rows
from fedarena.attacks.checks import non_negative, optional, positive
from fedarena.attacks.label_flip import LABELLED_TASKS, poison_dataset
from fedarena.datasets.base import FederatedDataset
from fedarena.errors import ConfigError


def _honest_rows(updates: torch.Tensor, bad: torch.Tensor) -> torch.Tensor:
    """The benign rows of the round; all rows when the round has no benign device."""
    return updates[~bad] if bool((~bad).any()) else updates


def random_updates(updates: torch.Tensor, bad: torch.Tensor, gen: torch.Generator, *,
                   std: float | None = None) -> torch.Tensor:
    """A2 (Ditto): zero-mean Gaussian noise in place of the update. Reference code: the std of all entries
    of that device's own flattened update (``np.random.normal(0, np.std(update))``, population std);
    ``std`` fixes it instead."""
    own = updates[bad]
    scale = own.std(dim=1, correction=0, keepdim=True) if std is None else torch.full_like(own[:, :1], std)
    noise = torch.randn(own.shape, generator=gen, device=own.device, dtype=own.dtype)
    return with_rows(updates, bad, noise * scale)


def boosted_updates(updates: torch.Tensor, bad: torch.Tensor, gen: torch.Generator, *,
                    scale: float | None = None) -> torch.Tensor:
    """A3 model replacement / boosting (Ditto; Bhagoji et al. 2019): the update times ``scale``; None means
    times the number of updates in the round (= clients_per_round, the reference code's factor)."""
    factor = float(updates.shape[0]) if scale is None else scale
    return with_rows(updates, bad, updates[bad] * factor)


def sign_flipped_updates(updates: torch.Tensor, bad: torch.Tensor, gen: torch.Generator, *,
                         scale: float = 1.0) -> torch.Tensor:
    """Sign flipping (e.g. Allen-Zhu et al. 2021; Karimireddy et al. 2021): the update times -scale."""
    return with_rows(updates, bad, updates[bad] * -scale)


def alie_z(n: int, f: int) -> float:
    """Baruch et al. 2019, "A Little Is Enough": s = floor(n/2 + 1) - f devices must be won over;
    z_max = Phi^-1((n - s) / n). When the attackers are a majority (s <= 0), s is taken as 1 (the largest
    finite z); the ratio is kept >= 1/2 so that z >= 0 (n = 1)."""
    s = max(n // 2 + 1 - f, 1)
    return NormalDist().inv_cdf(max((n - s) / n, 0.5))


def alie_updates(updates: torch.Tensor, bad: torch.Tensor, gen: torch.Generator, *,
                 z: float | None = None) -> torch.Tensor:
    """ALIE (Baruch et al. 2019): every malicious device sends mean - z * std of the honest updates, per
    coordinate (sample std, ddof 1; ddof 0 when there is a single honest row). z defaults to
    ``alie_z(n, f)`` with n the round's updates and f its malicious ones."""
    honest = _honest_rows(updates, bad)
    z_used = alie_z(updates.shape[0], int(bad.sum())) if z is None else z
    std = honest.std(dim=0, correction=1 if honest.shape[0] > 1 else 0)
    return with_rows(updates, bad, honest.mean(dim=0) - z_used * std)


def ipm_updates(updates: torch.Tensor, bad: torch.Tensor, gen: torch.Generator, *,
                epsilon: float = 0.1) -> torch.Tensor:
    """Inner-product manipulation (Xie et al. 2020, "Fall of Empires"): every malicious device sends
    -epsilon times the mean of the honest updates (epsilon = 0.1 is the paper's small setting)."""
    return with_rows(updates, bad, -epsilon * _honest_rows(updates, bad).mean(dim=0))


def _maybe_poisoned(dataset: FederatedDataset, malicious: np.ndarray, rng: np.random.Generator,
                    poison_labels: bool) -> FederatedDataset:
    """Reference-code variant (``flearn/trainers_MTL/ditto.py``): A2/A3 devices also hold A1 labels."""
    return poison_dataset(dataset, malicious, rng) if poison_labels else dataset


@attack("a2", device_reads=())
def a2(dataset: FederatedDataset, malicious: np.ndarray, rng: np.random.Generator, *,
       std: float | None = None, poison_labels: bool = False) -> Effect:
    """A2 random updates (Ditto Section 4): zero-mean Gaussian noise in place of the update, adversarial
    whatever the device trained on. ``std`` None: the std of the device's own update; ``poison_labels``: the
    device trains on A1 labels first, so the noise takes the scale of a poisoned update (the reference
    code; the suites set it). The default is the paper's text, noise at the scale of an honest update."""
    tamper = partial(random_updates, std=optional(non_negative, "a2", "std", std))
    return Effect(_maybe_poisoned(dataset, malicious, rng, poison_labels), tamper=tamper)


@attack("a3", device_reads=())
def a3(dataset: FederatedDataset, malicious: np.ndarray, rng: np.random.Generator, *,
       scale: float | None = None, poison_labels: bool = True) -> Effect:
    """A3 model replacement (Ditto Section 4; Bagdasaryan et al. 2020): an *adversarial* update, scaled to
    dominate the average. By default the malicious devices train on A1-poisoned labels and boost that update
    (``poison_labels: true``, the reference code that produced the published numbers).
    ``poison_labels: false`` boosts an honest update instead (explicit variant: it helps the global model
    rather than harming it). ``scale`` None: x the round's number of updates (clients_per_round)."""
    if poison_labels and dataset.task not in LABELLED_TASKS:
        raise ConfigError(f"a3 boosts an update trained on poisoned labels, which needs a classification task; "
                          f"dataset {dataset.name!r} is a {dataset.task} task. Set poison_labels=false to boost "
                          "honest updates instead")
    tamper = partial(boosted_updates, scale=optional(positive, "a3", "scale", scale))
    return Effect(_maybe_poisoned(dataset, malicious, rng, poison_labels), tamper=tamper)


@attack("sign_flip", device_reads=())
def sign_flip(dataset: FederatedDataset, malicious: np.ndarray, rng: np.random.Generator, *,
              scale: float = 1.0) -> Effect:
    """Sign flipping: malicious devices send -scale x their honest update."""
    return Effect(dataset, tamper=partial(sign_flipped_updates, scale=positive("sign_flip", "scale", scale)))


@attack("alie", device_reads=("honest_updates",))
def alie(dataset: FederatedDataset, malicious: np.ndarray, rng: np.random.Generator, *,
         z: float | None = None) -> Effect:
    """ALIE; ``z`` None: the paper's z_max for the round's n and f (see ``alie_z``)."""
    return Effect(dataset, tamper=partial(alie_updates, z=optional(non_negative, "alie", "z", z)))


@attack("ipm", device_reads=("honest_updates",))
def ipm(dataset: FederatedDataset, malicious: np.ndarray, rng: np.random.Generator, *,
        epsilon: float = 0.1) -> Effect:
    return Effect(dataset, tamper=partial(ipm_updates, epsilon=positive("ipm", "epsilon", epsilon)))
