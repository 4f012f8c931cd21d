"""What a trigger attack promises of every sample it stamps, checked where the samples are made.

An attack that stamps a trigger declares its bound (``TriggerBound``) on its ``Effect``: an L-infinity bound on
each pixel's change (IBA's eps, and its smaller one for the success rate's samples) and/or the pixel positions it
may change (a patch's), in raw pixel units (fractions of the raw range, ``datasets.pixels``); every value it
changes stays inside the valid box and is a finite number (a NaN compares false with every limit; a value that
was not finite has an unbounded change). The engine checks each stamped sample against it (``check_stamped``, through
``simulation.stamps``) wherever the attack stamps: the poisoned training data at set-up, each round's corrupted
rows, the test samples its success rate reads, so a change that breaks a bound fails every run it touches with one
line naming the attack.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

RAW_TOLERANCE = 1e-5  # float32 rounding of a raw value mapped to input units and back (a change of ~1e-7)


class BoundExceeded(ValueError):
    """An attack's stamped sample oversteps its declared bound: the attack is broken, not the run's luck (a
    permanent failure, never retried)."""


@dataclass(frozen=True)
class TriggerBound:
    """The most a stamped sample may differ from its clean self, in raw pixel units: ``linf``, each pixel's change
    as a fraction of the raw range (None: unbounded), ``test_linf`` the same for the success rate's samples (None:
    ``linf``), and ``positions``, the (row, column) pixel positions it may change, every channel (None: any; (): none)."""

    linf: float | None = None
    test_linf: float | None = None
    positions: tuple[tuple[int, int], ...] | None = None

    def at_test(self) -> TriggerBound:
        return TriggerBound(self.linf if self.test_linf is None else self.test_linf, None, self.positions)


def check_stamped(attack: str, bound: TriggerBound, clean: torch.Tensor, stamped: torch.Tensor,
                  box: tuple[torch.Tensor, torch.Tensor], image_hw: tuple[int, int]) -> None:
    """Raise BoundExceeded where a row of ``stamped`` [m, ...] oversteps ``bound`` against the same row of
    ``clean``, changes the samples' number or shape, or moves a value outside the valid ``box`` (low, high)
    [input shape]; values left as they were pass."""
    if stamped.shape != clean.shape:
        raise BoundExceeded(f"attack {attack!r} changed the stamped samples' shape from {list(clean.shape)} to "
                            f"{list(stamped.shape)}: a trigger stamps samples, it does not add or reshape them")
    if len(clean) == 0:
        return
    before, after = clean.reshape(len(clean), -1), stamped.reshape(len(stamped), -1)
    changed = (after != before) & ~(after.isnan() & before.isnan())  # a NaN left as it was is not a change
    if not bool(changed.any()):
        return
    if not bool(after[changed].isfinite().all()):  # a NaN would pass every comparison below
        raise BoundExceeded(f"attack {attack!r} stamped a sample with a value that is not a finite number: its "
                            "trigger is broken (see fedarena.attacks.bounds)")
    low, high = (b.to(after.device, after.dtype).reshape(-1).expand_as(after) for b in box)
    span = (high - low).clamp_min(1e-30)
    outside = torch.maximum(low - after, after - high).clamp_min(0) / span
    worst_outside = float(outside[changed].max())
    if worst_outside > RAW_TOLERANCE:
        raise BoundExceeded(f"attack {attack!r} stamped a sample outside the valid pixel box by {worst_outside:.3g} "
                            "of the raw range: its trigger is broken (see fedarena.attacks.bounds)")
    if bound.linf is not None:
        # a value that was not a finite number has no bounded change: counted as infinite, never as NaN
        worst = float((torch.nan_to_num((after - before).abs(), nan=math.inf) / span)[changed].max())
        if worst > bound.linf + RAW_TOLERANCE:
            raise BoundExceeded(f"attack {attack!r} changed a pixel by {worst:.4g} of the raw range, beyond its "
                                f"declared L-infinity bound {bound.linf:.4g}: its trigger is broken")
    if bound.positions is not None:
        moved = changed.reshape(len(changed), -1, *image_hw).any(dim=1).any(dim=0)  # [H, W]
        allowed = torch.zeros(image_hw, dtype=torch.bool, device=moved.device)
        if bound.positions:  # none declared: no pixel may move
            rows, cols = zip(*bound.positions, strict=True)
            allowed[list(rows), list(cols)] = True
        stray = (moved & ~allowed).nonzero().tolist()
        if stray:
            raise BoundExceeded(f"attack {attack!r} changed pixel positions {stray[:3]} outside the "
                                f"{len(bound.positions)} it declares: its trigger is broken")


# check(clean [m, ...], stamped [m, ...]): raises BoundExceeded (``check_stamped`` with the trial's attack and data)
StampCheck = Callable[[torch.Tensor, torch.Tensor], None]


def checked_corrupt(corrupt: Callable, check: StampCheck) -> Callable:
    """A round's ``corrupt`` (x, y, ...) -> (x, y) whose stamped rows are checked before training sees them."""

    def corrupt_checked(x: torch.Tensor, y: torch.Tensor, *args, **kwargs):
        stamped, labels = corrupt(x, y, *args, **kwargs)
        check(x, stamped)
        return stamped, labels

    return corrupt_checked
