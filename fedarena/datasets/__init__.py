"""Data sources, partitioners and the FederatedDataset container."""

from fedarena.datasets import offline  # noqa: F401  (registers the offline sources)
from fedarena.datasets import real  # noqa: F401  (registers the downloaded datasets)
from fedarena.datasets import fedtilt_toy  # noqa: F401  (registers FedTilt's toy problem)
from fedarena.datasets.base import ClientData, FederatedDataset, Split
from fedarena.datasets.registry import DATASETS, build_dataset, dataset_options, register_dataset

__all__ = ["ClientData", "DATASETS", "FederatedDataset", "Split", "build_dataset", "dataset_options",
           "register_dataset"]
