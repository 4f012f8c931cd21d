"""Data sources, partitioners and the FederatedDataset container.

Importing this package imports every module in it, which registers every dataset (offline sources,
FedTilt's toy, the papers' downloaded datasets)."""

from fedarena.datasets.base import ClientData, FederatedDataset, Split
from fedarena.datasets.catalog import DATASETS, build_dataset, dataset_options, register_dataset
from fedarena.registry import import_submodules

import_submodules(__name__, __path__)

__all__ = ["ClientData", "DATASETS", "FederatedDataset", "Split", "build_dataset", "dataset_options",
           "register_dataset"]
