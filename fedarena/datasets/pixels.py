"""Raw pixel space: how an image dataset's inputs map back to the pixels they were made from.

Image datasets standardise their raw pixels either one by one (``pixel``: each pixel's own mean and std over the
pooled images, Ditto's Fashion-MNIST) or per colour channel (``channel``: one mean and std per channel, the
backdoor papers' convention). Once pixels are standardised one by one, "the pixel range" has no single meaning
in input units: an edge pixel of digits that is nearly always dark spans [-0.09, 51.98], and one never lit spans
[0, 1.6e9] (``check_varying`` refuses raw-pixel work there). So every dataset keeps
its normalisation (``PixelScale`` in ``meta[PIXELS]``), and triggers, clamps and bounds are defined on raw pixel
values as fractions of the raw range (0 black, 1 white) and mapped through it: the valid box of an input is
``to_input(0)`` .. ``to_input(1)`` pixel by pixel, so a clamp to it never moves a valid image.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fedarena.errors import ConfigError

PIXELS = "pixels"  # a dataset's meta key: its PixelScale
NORMALIZATIONS = ("pixel", "channel")
STD_FLOOR = 1e-8  # a constant pixel's std (it then spans a huge box: the cost of standardising it alone)


@dataclass(frozen=True)
class PixelScale:
    """input = (raw - mean) / std, with mean and std broadcastable to one input (per pixel: the input's shape;
    per channel: [C, 1, 1], or [1] for flat one-channel images) and raw in [0, ``white``] (digits 16, MNIST
    255, CIFAR-10 1 after its scaling); float32, the arithmetic the images were standardised with, so a box's
    bounds are exactly the values a black and a white pixel take in the data."""

    mean: np.ndarray
    std: np.ndarray
    white: float
    mode: str

    def to_input(self, raw_fraction, shape: tuple[int, ...]) -> torch.Tensor:
        """Raw pixel values given as fractions of the raw range (a number or an array broadcastable to
        ``shape``) in the model's input units, as a float32 tensor of ``shape``."""
        raw = (np.asarray(raw_fraction, dtype=np.float64) * self.white).astype(np.float32)
        values = (raw - self.mean.astype(np.float32)) / self.std.astype(np.float32)
        return torch.as_tensor(np.broadcast_to(values, shape).copy(), dtype=torch.float32)

    def box(self, shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        """(low, high) [shape]: a black and a white pixel's value, pixel by pixel: the valid box of an input."""
        return self.to_input(0.0, shape), self.to_input(1.0, shape)


def check_normalization(dataset: str, mode: str) -> str:
    if mode not in NORMALIZATIONS:
        raise ConfigError(f"dataset {dataset!r}: normalize must be one of {', '.join(NORMALIZATIONS)} (pixels "
                          f"standardised one by one, or per colour channel); got {mode!r}")
    return mode


def standardize_images(raw: np.ndarray, mode: str, channel_axis: int | None) -> tuple[np.ndarray, PixelScale]:
    """(float32 images standardised as ``mode`` says, their PixelScale) of raw images [n, ...] whose values run
    from 0 to the data's maximum (white); ``channel_axis`` is the channel axis of one image (None: one channel,
    as flat digits). The float32 arithmetic of the loaders before this module (per pixel as the
    version 1 ``standardize``, per channel as CIFAR-10's), so their numbers stay."""
    x = raw.astype(np.float32)
    if mode == "pixel":
        flat = x.reshape(len(x), -1)
        mean, std = flat.mean(0), np.maximum(flat.std(0), STD_FLOOR)
        out = ((flat - mean) / std).reshape(x.shape)
        mean, std = mean.reshape(x.shape[1:]), std.reshape(x.shape[1:])
    else:
        axes = tuple(a for a in range(x.ndim) if channel_axis is None or a != channel_axis + 1)
        mean = x.mean(axis=axes, keepdims=True)
        std = np.maximum(x.std(axis=axes, keepdims=True), STD_FLOOR)
        out = (x - mean) / std
        mean, std = mean[0], std[0]
    scale = PixelScale(mean, std, float(x.max()), mode)
    return out.astype(np.float32, copy=False), scale


def scale_of(dataset) -> PixelScale:
    """The dataset's PixelScale; for images kept in raw units (no normalisation: LEAF's FEMNIST), black the
    smallest and white the largest value of any split."""
    scale = dataset.meta.get(PIXELS)
    if scale is not None:
        return scale
    splits = [split.x for c in dataset.clients for split in (c.train, c.val, c.test) if len(split)]
    low, high = min(float(x.min()) for x in splits), max(float(x.max()) for x in splits)
    return PixelScale(np.array([-low], dtype=np.float32), np.ones(1, dtype=np.float32), max(high - low, STD_FLOOR), "raw")


def check_varying(dataset, who: str, positions: tuple[tuple[int, int], ...] | None = None,
                  image_hw: tuple[int, int] | None = None) -> None:
    """ConfigError where ``who`` works in raw pixels on pixels (every one, or the (row, column) ``positions`` of
    images ``image_hw``) that never vary in a dataset standardised one by one: their std is the floor, so a raw
    change there is ~1e9 input units (a white patch on MNIST's dark border: 2.6e10)."""
    scale = dataset.meta.get(PIXELS)
    if scale is None or scale.mode != "pixel":
        return
    constant = np.broadcast_to(scale.std, tuple(dataset.input_shape)) <= 2 * STD_FLOOR
    if positions is not None:
        constant = constant.reshape(-1, *image_hw)
        rows, cols = zip(*positions, strict=True)
        constant = constant[:, list(rows), list(cols)]
    if constant.any():
        raise ConfigError(f"{who} changes raw pixels, but {int(constant.sum())} of the values it touches never vary "
                          f"in dataset {dataset.name!r}, standardised pixel by pixel (normalize: pixel): a raw change "
                          f"there is ~{scale.white / STD_FLOOR:.0e} input units. Use normalize: channel, or a "
                          "trigger elsewhere")


def valid_box(dataset) -> tuple[torch.Tensor, torch.Tensor]:
    """(low, high) [input shape]: a black and a white pixel's value in the dataset's inputs, pixel by pixel."""
    return scale_of(dataset).box(tuple(dataset.input_shape))


def raw_to_input(dataset, raw_fraction) -> torch.Tensor:
    """[input shape]: raw pixel values (fractions of the raw range, 0 black, 1 white) in the dataset's inputs."""
    return scale_of(dataset).to_input(raw_fraction, tuple(dataset.input_shape))


def image_shape(dataset, attack: str) -> tuple[int, int]:
    """(H, W) of the dataset's images; ConfigError for non-image inputs."""
    if "image_shape" in dataset.meta:
        return tuple(dataset.meta["image_shape"])
    if len(dataset.input_shape) in (2, 3):
        return tuple(dataset.input_shape[-2:])
    raise ConfigError(f"attack {attack!r} stamps a pixel trigger, but dataset {dataset.name!r} has inputs of shape "
                      f"{list(dataset.input_shape)}, not images; use targeted_flip on such data")
