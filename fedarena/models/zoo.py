"""Model zoo: the papers' models, built by name from the dataset's input shape and class count.

Models have no running-state buffers (batch norm uses batch statistics only), so one module can be
evaluated functionally for many clients' parameters at once (``FlatModel.forward`` + ``vmap``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from fedarena.errors import ConfigError
from fedarena.models.dropout import KeyedDropout
from fedarena.params import SectionKind
from fedarena.registry import Registry

MODELS: Registry[Callable[..., nn.Module]] = Registry("model")


def model(name: str, *, version: int = 1):
    """Register ``build(input_shape, num_classes, *, **hyperparameters) -> nn.Module`` as model ``name``."""
    return MODELS.register(name, version=version)
MODEL_SECTION = SectionKind("model", MODELS, signature=lambda build: build)
AUTO = "auto"  # the model name that stands for the dataset's own model (the papers' pairing)


def _flat_dim(input_shape: tuple[int, ...]) -> int:
    return int(math.prod(input_shape))


def _image_channels(name: str, input_shape: tuple[int, ...]) -> int:
    if len(input_shape) != 3:
        raise ConfigError(f"model {name!r} needs image inputs (channels, height, width), got shape {input_shape}")
    return input_shape[0]


@MODELS.register("logreg")
def logreg(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """Multinomial logistic regression (StackOverflow, Synthetic)."""
    return nn.Sequential(nn.Flatten(), nn.Linear(_flat_dim(input_shape), num_classes))


class LinearSVM(nn.Module):
    """Linear SVM: score w.x + b for labels in {-1, +1}; the hinge loss adds ``l2 * ||w||^2`` (Ditto, Vehicle)."""

    def __init__(self, dim: int, l2: float):
        super().__init__()
        self.linear = nn.Linear(dim, 1)
        self.l2 = l2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x.flatten(1)).squeeze(-1)


@MODELS.register("svm")
def svm(input_shape: tuple[int, ...], num_classes: int, *, l2: float = 0.01, zero_init: bool = False) -> nn.Module:
    """``zero_init``: W = 0, b = 0 as Ditto's reference code (flearn/models/vehicle/svm.py); else PyTorch's
    default initialisation of a linear layer."""
    if num_classes != 2:
        raise ConfigError(f"model 'svm' is binary (labels -1/+1); the dataset has {num_classes} classes")
    model = LinearSVM(_flat_dim(input_shape), l2)
    if zero_init:
        nn.init.zeros_(model.linear.weight)
        nn.init.zeros_(model.linear.bias)
    return model


@MODELS.register("mlp")
def mlp(input_shape: tuple[int, ...], num_classes: int, *, hidden: tuple[int, ...] = (200, 200)) -> nn.Module:
    """MLP with ReLU; the default (200, 200) gives FedTilt's three linear layers."""
    if any(h < 1 for h in hidden):
        raise ConfigError(f"model 'mlp': hidden lists the widths of the hidden layers, each >= 1 (or [] for none), "
                          f"got {list(hidden)}")
    layers: list[nn.Module] = [nn.Flatten()]
    width = _flat_dim(input_shape)
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, num_classes))
    return nn.Sequential(*layers)


def _conv_pool(c_in: int, c_out: int, k: int) -> list[nn.Module]:
    return [nn.Conv2d(c_in, c_out, k, padding=k // 2), nn.ReLU(), nn.MaxPool2d(2)]


@MODELS.register("cnn_fmnist")
def cnn_fmnist(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """Ditto's Fashion-MNIST CNN: conv5x5x32 - maxpool2 - conv5x5x64 - maxpool2 - fc1024 - fc10."""
    _image_channels("cnn_fmnist", input_shape)
    c, h, w = input_shape[0], input_shape[-2], input_shape[-1]
    flat = 64 * (h // 4) * (w // 4)
    return nn.Sequential(*_conv_pool(c, 32, 5), *_conv_pool(32, 64, 5), nn.Flatten(),
                         nn.Linear(flat, 1024), nn.ReLU(), nn.Linear(1024, num_classes))


@MODELS.register("cnn_femnist")
def cnn_femnist(input_shape: tuple[int, ...], num_classes: int, *, conv_dropout: float = 0.0,
                dropout: float = 0.0, eval_dropout: bool = False) -> nn.Module:
    """Ditto's FEMNIST CNN: conv5x5x16 - pool - conv5x5x32 - pool - fc128 - fc62.

    The reference (litian96/ditto, flearn/models/femnist/cnn.py) drops with rate ``conv_dropout`` = 0.25
    after the second pool and ``dropout`` = 0.5 after the 128-unit layer (TF keep_prob 0.75 / 0.5), and,
    TF1's ``tf.nn.dropout`` having no training flag, also when it evaluates: ``eval_dropout``. Masks are
    seeded per (round, step, sample) (``models.dropout``), so runs stay reproducible and backends agree.
    Default: no dropout (the paper's text does not mention it)."""
    for key, rate in (("conv_dropout", conv_dropout), ("dropout", dropout)):
        if not 0.0 <= rate < 1.0:
            raise ConfigError(f"cnn_femnist: {key} is a drop rate in [0, 1), got {rate}")
    c, h, w = _image_channels("cnn_femnist", input_shape), input_shape[1], input_shape[2]
    flat = 32 * (h // 4) * (w // 4)
    net = nn.Sequential(*_conv_pool(c, 16, 5), *_conv_pool(16, 32, 5), KeyedDropout(conv_dropout, 0), nn.Flatten(),
                        nn.Linear(flat, 128), nn.ReLU(), KeyedDropout(dropout, 1), nn.Linear(128, num_classes))
    net.eval_dropout = bool(eval_dropout)
    return net


@MODELS.register("cnn_celeba")
def cnn_celeba(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """Ditto's CelebA CNN: 4 x [conv3x3x32, batchnorm, maxpool2, relu] - fc (batch statistics only)."""
    c, h, w = _image_channels("cnn_celeba", input_shape), input_shape[1], input_shape[2]
    blocks: list[nn.Module] = []
    for i in range(4):
        blocks += [nn.Conv2d(c if i == 0 else 32, 32, 3, padding=1),
                   nn.BatchNorm2d(32, track_running_stats=False), nn.MaxPool2d(2), nn.ReLU()]
        h, w = h // 2, w // 2
    return nn.Sequential(*blocks, nn.Flatten(), nn.Linear(32 * h * w, num_classes))


@MODELS.register("cnn_cifar")
def cnn_cifar(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """FedTilt's CIFAR-10 CNN: 3 conv blocks [conv3x3, relu, maxpool2] (32, 64, 64 channels) + FC 512 + FC."""
    c, h, w = _image_channels("cnn_cifar", input_shape), input_shape[1], input_shape[2]
    layers: list[nn.Module] = []
    for c_in, c_out in ((c, 32), (32, 64), (64, 64)):
        layers += _conv_pool(c_in, c_out, 3)
        h, w = h // 2, w // 2
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(64 * h * w, 512), nn.ReLU(), nn.Linear(512, num_classes))


class MeanEstimator(nn.Module):
    """A single scalar prediction (Ditto Section 3.3's point estimation): f(x) = w for every input."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w.expand(x.shape[0])


@MODELS.register("mean")
def mean(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    return MeanEstimator()
