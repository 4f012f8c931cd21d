"""Data sources, partitioners and the FederatedDataset container."""

from fedarena.datasets import (  # noqa: F401  (importing registers: offline sources, FedTilt's toy, downloads)
    fedtilt_toy,
    offline,
    real,
)
from fedarena.datasets.base import ClientData, FederatedDataset, Split
from fedarena.datasets.registry import DATASETS, build_dataset, dataset_options, register_dataset

__all__ = ["ClientData", "DATASETS", "FederatedDataset", "Split", "build_dataset", "dataset_options",
           "register_dataset"]
