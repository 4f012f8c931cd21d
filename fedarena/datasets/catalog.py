"""The dataset registry: name -> builder(rng, **options) -> FederatedDataset, plus its default model."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fedarena.datasets.files.sources import Source
from fedarena.errors import ConfigError
from fedarena.params import SectionKind
from fedarena.registry import Registry


@dataclass(frozen=True)
class DatasetSpec:
    build: Callable  # build(rng, **options) -> FederatedDataset
    model: str  # the model the papers use with this dataset
    source: Source | None = None  # the files it reads (None: generated or bundled)


DATASETS: Registry[DatasetSpec] = Registry("dataset")


DATASET_SECTION = SectionKind("dataset", DATASETS, signature=lambda spec: spec.build)


def register_dataset(name: str, *, model: str, source: Source | None = None, version: int = 1) -> Callable:
    """Register a dataset builder with the model the papers use, the files it reads and its version (bump it
    with any change of the data or partition it builds)."""

    def decorator(fn: Callable) -> Callable:
        DATASETS.add(name, DatasetSpec(fn, model, source), version=version)
        return fn

    return decorator


def dataset_options(name: str, options: dict) -> dict:
    """The dataset's options with defaults filled in; unknown keys raise ConfigError."""
    resolved = DATASET_SECTION.resolve({"name": name, **options})
    check_shared_options(name, resolved)
    return {k: v for k, v in resolved.items() if k != "name"}


def check_shared_options(name: str, options: dict) -> None:
    """``num_clients`` must be positive, checked before any data is read (its type, and that of
    ``partition_options``, were checked against the builder's signature by ``resolve``)."""
    clients = options.get("num_clients")
    if clients is not None and clients < 1:
        raise ConfigError(f"dataset {name!r}: num_clients must be a positive integer, got {clients!r}")


def build_dataset(name: str, options: dict, rng: np.random.Generator):
    """The dataset of options as written (resolved here); trial set-up takes ``dataset_from``."""
    return DATASETS.get(name).build(rng, **dataset_options(name, options))


def dataset_from(resolved: dict, rng: np.random.Generator):
    """The dataset of a resolved section (``sections.resolve_config``)."""
    check_shared_options(resolved["name"], resolved)
    return DATASETS.get(resolved["name"]).build(rng, **{k: v for k, v in resolved.items() if k != "name"})


dataset = register_dataset  # the public decorator's name: ``from fedarena import dataset``
