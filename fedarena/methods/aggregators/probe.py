"""The server's probe of the clients' models (DeepSight): the models' class probabilities on fixed random inputs,
and the output layer's part of an update.

The inputs are ``seeds`` sets of uniform noise between a black and a white pixel's value in the model's input units,
pixel by pixel (the valid box of an image under the dataset's own normalisation, ``datasets.pixels``), drawn once per trial from the stream AGGREGATE under
the key ``NOISE_INPUTS`` + the set's index, and kept: every round probes the same inputs, as DeepSight's server does.
What a rule derives from one global model (its outputs, a client model's) can be kept in ``memo`` until the model
changes: a searching attack calls the rule many times a round on the same global model and mostly the same rows.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
import torch

from fedarena.datasets import FederatedDataset
from fedarena.datasets.pixels import check_varying, valid_box
from fedarena.errors import ConfigError
from fedarena.models import FlatModel
from fedarena.streams import AGGREGATE, torch_stream

NOISE_INPUTS = 2**31 - 16  # key of the first noise set in the stream AGGREGATE (whose low keys are rounds)
BATCH = 4096  # inputs per forward pass


@dataclass
class Probe:
    model: FlatModel
    shape: tuple
    low: torch.Tensor  # [D]: a black pixel's value, pixel by pixel
    high: torch.Tensor  # [D]: a white pixel's
    seed: int
    device: torch.device
    _inputs: dict = field(default_factory=dict)
    _memo: dict = field(default_factory=dict)  # what was computed from the global model of ``_memo_of``
    _memo_of: bytes = b""

    @classmethod
    def of(cls, model: FlatModel, dataset: FederatedDataset, seed: int, device: torch.device, rule: str) -> Probe:
        if model.task != "classification" or dataset.num_classes < 2:
            raise ConfigError(f"aggregator {rule!r} compares the models' class probabilities: it needs a "
                              f"classification task of 2 or more classes; got a {model.task} task of "
                              f"{dataset.num_classes} classes")
        weight, bias = model.shapes[-2:] if len(model.shapes) >= 2 else (None, None)
        classes = dataset.num_classes
        if weight is None or len(weight) != 2 or len(bias) != 1 or not weight[0] == bias[0] == classes:
            raise ConfigError(f"aggregator {rule!r} reads the output layer's weight [{classes}, inputs] and bias "
                              f"[{classes}], the model's last two parameters; this model's end in "
                              f"{[tuple(s) for s in model.shapes[-2:]]}")
        check_varying(dataset, f"aggregator {rule!r}'s probe of uniform noise images")
        low, high = (bound.reshape(-1) for bound in valid_box(dataset))
        return cls(model, tuple(dataset.input_shape), low, high, seed, device)

    def inputs(self, index: int, samples: int) -> torch.Tensor:
        """The ``index``-th noise set [samples, *shape] (drawn once, then kept)."""
        key = (index, samples)
        if key not in self._inputs:
            gen = torch_stream(self.seed, AGGREGATE, NOISE_INPUTS + index)
            noise = torch.rand(samples, int(np.prod(self.shape)), generator=gen)
            self._inputs[key] = (self.low + (self.high - self.low) * noise).reshape(samples, *self.shape).to(self.device)
        return self._inputs[key]

    def probabilities(self, params: torch.Tensor, index: int, samples: int) -> torch.Tensor:
        """[samples, classes] softmax of the model with flat ``params`` [d] on the ``index``-th noise set."""
        x = self.inputs(index, samples)
        with torch.no_grad():
            return torch.cat([self.model.forward(params, part.to(params.dtype)).softmax(-1) for part in x.split(BATCH)])

    def memo(self, model: torch.Tensor) -> dict:
        """The results kept for the global model ``model`` (flat parameters): a dict the rule fills, emptied when
        the model changes (a new round), so it holds one round's outputs at most."""
        key = digest(model)
        if key != self._memo_of:
            self._memo, self._memo_of = {}, key
        return self._memo

    def output_layer(self, updates: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(weight [n, classes, inputs], bias [n, classes]): the output layer's part of each row of ``updates``."""
        *_, weight, bias = torch.split(updates, self.model.sizes, dim=1)
        return weight.reshape(-1, *self.model.shapes[-2]), bias


def digest(values: torch.Tensor) -> bytes:
    """A 20-byte BLAKE2b digest of a tensor's dtype, shape and bytes: a memo's key for it (equal tensors, equal
    digests; a collision needs about 2**80 tensors)."""
    h = hashlib.blake2b(f"{values.dtype}{tuple(values.shape)}".encode(), digest_size=20)
    h.update(values.detach().contiguous().reshape(-1).view(torch.uint8).cpu().numpy())
    return h.digest()
