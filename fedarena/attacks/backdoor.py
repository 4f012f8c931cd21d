"""Targeted poisoning: backdoors and a targeted label flip (attack success rate: ``Backdoor``).

Malicious devices keep their clean accuracy but teach the model to map inputs that carry a trigger (or,
for ``targeted_flip``, inputs of one source class) to the attacker's ``target`` label:

- ``badnets`` (Gu et al. 2017): a square patch (``size``, ``position``, ``value``) stamped on a fraction
  ``poison_fraction`` of each malicious device's training samples, relabelled to ``target``; BadNets' patch
  is white: ``value`` is a raw pixel value, a fraction of the raw range (null: 1, white), each pixel of the
  patch taking that raw value under the dataset's own normalisation (``datasets.pixels``);
- ``dba`` (Xie et al., ICLR 2020): the patch's pixels split into ``parts`` local triggers; malicious device
  i (in id order) stamps part i mod ``parts``; the test trigger is the whole patch;
- ``model_replacement`` (Bagdasaryan et al., AISTATS 2020): BadNets data, and the update boosted by
  ``boost`` so it survives averaging: null is n / k, the round's update count n over its k malicious updates
  (the paper's one attacker boosts by n / eta with the server rate eta = 1; k attackers each boosting by n
  would together replace the model k times over, so each takes its share); ``max_norm`` bounds the boosted
  update's norm (constrain-and-scale's norm bound);
- ``neurotoxin`` (Zhang et al., ICML 2022): BadNets data, the update masked to the coordinates outside the
  ``top_fraction`` largest in magnitude of the benign direction (full knowledge: the round's benign mean
  update, where the paper estimates it from the last global change);
- ``targeted_flip``: ``poison_fraction`` of the malicious devices' ``source``-class training samples
  relabelled ``target`` (no trigger: text and tabular data).

Every one takes ``stop_round``: from that round on, malicious devices train on clean data and send honest
updates (how long the backdoor lasts). Image attacks need image inputs ([C, H, W], or flat features with a
dataset's ``image_shape``, e.g. digits' 8 x 8).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import partial

import numpy as np
import torch

from fedarena.attacks.base import Backdoor, Effect, attack, with_rows
from fedarena.attacks.bounds import TriggerBound
from fedarena.attacks.checks import fraction, positive
from fedarena.attacks.optimized import reference_rows
from fedarena.datasets.base import FederatedDataset, Split
from fedarena.datasets.pixels import check_varying, image_shape, raw_to_input
from fedarena.errors import ConfigError

POSITIONS = ("bottom_right", "top_left", "top_right", "bottom_left")


@dataclasses.dataclass(frozen=True, eq=False)
class Patch:
    """A square trigger: its pixels (row, column) in an image of ``shape`` (H, W) and the values they take,
    ``fill`` [C, H, W] in the dataset's input units (one raw value mapped pixel by pixel)."""

    pixels: tuple[tuple[int, int], ...]
    shape: tuple[int, int]
    fill: torch.Tensor

    def stamp(self, x: torch.Tensor, pixels: tuple[tuple[int, int], ...] | None = None) -> torch.Tensor:
        """A copy of x [m, ...] with the patch (or the given part of it) set in every channel."""
        rows, cols = (list(axis) for axis in zip(*(pixels or self.pixels), strict=True))
        images = x.reshape(x.shape[0], -1, *self.shape).clone()
        images[:, :, rows, cols] = self.fill[:, rows, cols].to(images)
        return images.reshape(x.shape)

    def parts(self, count: int) -> list[tuple[tuple[int, int], ...]]:
        """The pixels split into ``count`` parts (row-major runs): DBA's local triggers, whose union is it."""
        return [tuple(map(tuple, part)) for part in np.array_split(np.array(self.pixels), count)]


def make_patch(dataset: FederatedDataset, attack: str, size: int, position, value: float | None) -> Patch:
    """The ``size`` x ``size`` patch at ``position`` (a corner's name or [row, col] of its top-left pixel)."""
    height, width = image_shape(dataset, attack)
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= min(height, width):
        raise ConfigError(f"attack {attack!r}: size must be a whole number of pixels in [1, {min(height, width)}] "
                          f"for the {height}x{width} images of dataset {dataset.name!r}, got {size!r}")
    top, left = corner(attack, position, size, height, width)
    if not (0 <= top and top + size <= height and 0 <= left and left + size <= width):
        raise ConfigError(f"attack {attack!r}: a {size}x{size} trigger at [{top}, {left}] leaves the {height}x{width} "
                          f"image; rows and columns must lie in [0, {height - size}] and [0, {width - size}]")
    if value is None:
        value = 1.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ConfigError(f"attack {attack!r}: value is a raw pixel value as a fraction of the raw range, in [0, 1] "
                          f"(0 black, 1 white; null: white), got {value!r}")
    pixels = tuple((top + r, left + c) for r in range(size) for c in range(size))
    check_varying(dataset, f"attack {attack!r}", pixels, (height, width))
    fill = raw_to_input(dataset, float(value)).reshape(-1, height, width)
    return Patch(pixels, (height, width), fill)


def corner(attack: str, position, size: int, height: int, width: int) -> tuple[int, int]:
    named = {"top_left": (0, 0), "top_right": (0, width - size), "bottom_left": (height - size, 0),
             "bottom_right": (height - size, width - size)}
    if isinstance(position, str):
        if position not in named:
            raise ConfigError(f"attack {attack!r}: position must be one of {', '.join(POSITIONS)} or [row, col], "
                              f"got {position!r}")
        return named[position]
    if not (isinstance(position, (list, tuple)) and len(position) == 2 and all(isinstance(p, int) for p in position)):
        raise ConfigError(f"attack {attack!r}: position must be one of {', '.join(POSITIONS)} or [row, col], "
                          f"got {position!r}")
    return int(position[0]), int(position[1])


def check_target(dataset: FederatedDataset, attack: str, label: int, key: str = "target") -> int:
    if dataset.task != "classification":
        raise ConfigError(f"attack {attack!r} needs a classification dataset; {dataset.name!r} is a {dataset.task} task")
    if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < dataset.num_classes:
        raise ConfigError(f"attack {attack!r}: {key} must be a label in [0, {dataset.num_classes - 1}] of dataset "
                          f"{dataset.name!r}, got {label!r}")
    return label


def stop(attack: str, value: int | None) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ConfigError(f"attack {attack!r}: stop_round must be a round number >= 0 or null, got {value!r}")
    return value


# poison(x, y, rng) -> (x, y) of one malicious device's training samples
Poison = Callable[[torch.Tensor, torch.Tensor, np.random.Generator], tuple[torch.Tensor, torch.Tensor]]


def poisoned_dataset(dataset: FederatedDataset, malicious: np.ndarray, rng: np.random.Generator,
                     poisons: Callable[[int], Poison]) -> FederatedDataset:
    """A copy whose malicious devices' training data went through ``poisons(i)`` (i: its rank among them)."""
    clients, rank = [], 0
    for k, client in enumerate(dataset.clients):
        if malicious[k]:
            x, y = poisons(rank)(client.train.x, client.train.y, rng)
            client, rank = dataclasses.replace(client, train=Split(x, y)), rank + 1
        clients.append(client)
    return dataclasses.replace(dataset, clients=clients)


def stamp_some(patch: Patch, pixels, target: int, share: float, x: torch.Tensor, y: torch.Tensor,
               rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``share`` of the samples (at least one), drawn once, stamped with ``pixels`` and relabelled ``target``."""
    chosen = torch.as_tensor(rng.permutation(len(y))[: max(1, int(share * len(y)))], dtype=torch.long)
    x, y = x.clone(), y.clone()
    x[chosen] = patch.stamp(x[chosen], pixels)
    y[chosen] = target
    return x, y


def backdoor_of(patch: Patch, target: int) -> Backdoor:
    return Backdoor(target, patch.stamp)


def badnets_parts(dataset: FederatedDataset, attack: str, target: int, size: int, position, value,
                  poison_fraction: float) -> tuple[Patch, int, float]:
    return (make_patch(dataset, attack, size, position, value), check_target(dataset, attack, target),
            fraction(attack, "poison_fraction", poison_fraction))


def _badnets_effect(dataset, malicious, rng, attack: str, target, size, position, value, poison_fraction,
                    stop_round, tamper=None) -> Effect:
    patch, target, share = badnets_parts(dataset, attack, target, size, position, value, poison_fraction)
    poisoned = poisoned_dataset(dataset, malicious, rng, lambda _: partial(stamp_some, patch, None, target, share))
    return Effect(poisoned, tamper=tamper, backdoor=backdoor_of(patch, target), stop_round=stop(attack, stop_round),
                  bound=patch_bound(patch))


def patch_bound(patch: Patch) -> TriggerBound:
    """A patch's promise: it changes its own pixel positions and no other (any value inside the valid box)."""
    return TriggerBound(positions=patch.pixels)


@attack("badnets", version=3, device_reads=())
def badnets(dataset: FederatedDataset, malicious: np.ndarray, rng: np.random.Generator, *, target: int = 0,
            size: int = 3, position: str | list = "bottom_right", value: float | None = None,
            poison_fraction: float = 0.5, stop_round: int | None = None) -> Effect:
    """BadNets (see the module): ``value`` a raw pixel value in [0, 1] of the raw range (null: 1, white)."""
    return _badnets_effect(dataset, malicious, rng, "badnets", target, size, position, value, poison_fraction,
                           stop_round)


@attack("dba", version=3, device_reads=())
def dba(dataset: FederatedDataset, malicious: np.ndarray, rng: np.random.Generator, *, target: int = 0,
        size: int = 4, position: str | list = "bottom_right", value: float | None = None, parts: int = 4,
        poison_fraction: float = 0.5, stop_round: int | None = None) -> Effect:
    """DBA (see the module): the patch's ``size`` x ``size`` pixels in ``parts`` local triggers."""
    patch, target, share = badnets_parts(dataset, "dba", target, size, position, value, poison_fraction)
    if isinstance(parts, bool) or not isinstance(parts, int) or not 1 <= parts <= len(patch.pixels):
        raise ConfigError(f"attack 'dba': parts must be a whole number in [1, {len(patch.pixels)}] (the trigger's "
                          f"pixels), got {parts!r}")
    local = patch.parts(parts)
    poisoned = poisoned_dataset(dataset, malicious, rng,
                                lambda i: partial(stamp_some, patch, local[i % parts], target, share))
    return Effect(poisoned, backdoor=backdoor_of(patch, target), stop_round=stop("dba", stop_round),
                  bound=patch_bound(patch))


def boosted_updates(updates: torch.Tensor, bad: torch.Tensor, gen: torch.Generator, *, boost: float | None,
                    max_norm: float | None) -> torch.Tensor:
    """Malicious rows x ``boost`` (n / k, the update count over the malicious rows, where None), then scaled to
    norm <= ``max_norm``."""
    rows = updates[bad] * (updates.shape[0] / int(bad.sum()) if boost is None else boost)
    if max_norm is not None:
        rows = rows * (max_norm / rows.norm(dim=1).clamp_min(1e-12)).clamp(max=1.0)[:, None]
    return with_rows(updates, bad, rows)


@attack("model_replacement", version=3, device_reads=())
def model_replacement(dataset: FederatedDataset, malicious: np.ndarray, rng: np.random.Generator, *,
                      target: int = 0, size: int = 3, position: str | list = "bottom_right",
                      value: float | None = None, poison_fraction: float = 0.5, boost: float | None = None,
                      max_norm: float | None = None, stop_round: int | None = None) -> Effect:
    """Model replacement / constrain-and-scale (see the module) on BadNets data."""
    tamper = partial(boosted_updates, boost=None if boost is None else positive("model_replacement", "boost", boost),
                     max_norm=None if max_norm is None else positive("model_replacement", "max_norm", max_norm))
    return _badnets_effect(dataset, malicious, rng, "model_replacement", target, size, position, value,
                           poison_fraction, stop_round, tamper)


def largest_mask(values: torch.Tensor, count: int) -> torch.Tensor:
    """True at the ``count`` largest of 1-D ``values``, NaN largest, of equal values the lowest indices: the set a
    stable descending sort's first ``count`` hold. Top-k finds the ``count``-th largest value, the threshold (4-5x
    faster than sorting all d at d = 1e6); every value above it is taken, and of the values equal to it the lowest
    indices fill the rest (top-k's own pick among them is its kernel's)."""
    threshold = values.topk(count).values[-1]
    nan, nan_threshold = values.isnan(), threshold.isnan()  # NaN == NaN is false: NaNs compared by isnan
    above = (values > threshold) | (nan & ~nan_threshold)
    equal = (values == threshold) | (nan & nan_threshold)
    room = count - above.sum()
    return above | (equal & (equal.cumsum(0) <= room))  # cumsum: each tied value's rank among the ties, by index


def masked_updates(updates: torch.Tensor, bad: torch.Tensor, gen: torch.Generator, *,
                   top_fraction: float) -> torch.Tensor:
    """Malicious rows with the coordinates of the benign mean's ``top_fraction`` largest magnitudes zeroed (ties:
    the lower coordinate masked). Ranked by the benign rows' float64 sum, the mean's order: a float64 sum of a
    few float32 values is exact (unless their exponents span more than ~2^25), so no kernel's order of summing
    them, and no CPU, changes the ranking."""
    benign = reference_rows(updates, bad, "benign").sum(0, dtype=torch.float64)
    count = max(1, int(top_fraction * updates.shape[1]))
    keep = (~largest_mask(benign.abs(), count)).to(updates.dtype)
    return with_rows(updates, bad, updates[bad] * keep)


@attack("neurotoxin", version=4, device_reads=("honest_updates",))  # the benign mean
def neurotoxin(dataset: FederatedDataset, malicious: np.ndarray, rng: np.random.Generator, *, target: int = 0,
               size: int = 3, position: str | list = "bottom_right", value: float | None = None,
               poison_fraction: float = 0.5, top_fraction: float = 0.1, stop_round: int | None = None) -> Effect:
    """Neurotoxin (see the module) on BadNets data; ``top_fraction`` in (0, 1) of the coordinates masked."""
    if isinstance(top_fraction, bool) or not isinstance(top_fraction, (int, float)) or not 0 < top_fraction < 1:
        raise ConfigError(f"attack 'neurotoxin': top_fraction must be in (0, 1), got {top_fraction!r}")
    tamper = partial(masked_updates, top_fraction=float(top_fraction))
    return _badnets_effect(dataset, malicious, rng, "neurotoxin", target, size, position, value, poison_fraction,
                           stop_round, tamper)


def flip_some(source: int, target: int, share: float, x: torch.Tensor, y: torch.Tensor,
              rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``share`` of the ``source``-class samples (drawn once) relabelled ``target``."""
    sources = np.nonzero((y == source).cpu().numpy())[0]
    chosen = rng.permutation(sources)[: int(round(share * len(sources)))]
    y = y.clone()
    y[torch.as_tensor(chosen, dtype=torch.long)] = target
    return x, y


@attack("targeted_flip", device_reads=())
def targeted_flip(dataset: FederatedDataset, malicious: np.ndarray, rng: np.random.Generator, *, source: int = 1,
                  target: int = 0, poison_fraction: float = 1.0, stop_round: int | None = None) -> Effect:
    """Targeted label flip (see the module); its success rate: benign devices' ``source`` test samples
    predicted ``target``."""
    source, target = check_target(dataset, "targeted_flip", source, "source"), check_target(dataset, "targeted_flip", target)
    if source == target:
        raise ConfigError(f"attack 'targeted_flip': source and target must differ, both are {source}")
    share = fraction("targeted_flip", "poison_fraction", poison_fraction)
    poisoned = poisoned_dataset(dataset, malicious, rng, lambda _: partial(flip_some, source, target, share))
    return Effect(poisoned, backdoor=Backdoor(target, None, source), stop_round=stop("targeted_flip", stop_round))
