"""Dataset labels that say what ran (the rule the bench and the tables share).

A suite's dataset label is the block title of the tables, a part of run names, progress lines and figure
file names, and the ``dataset_label`` tag of every run. A label that is a dataset's name (among the names
the caller knows: the registered datasets for the bench, the datasets of the published tables for the
leaderboards) must therefore be the dataset really run: ``digits`` runs are
labelled ``digits``, never ``fmnist``. The one exception is a paper's own partition of the same data
(``fmnist_fedtilt``, FedTilt's partition of Fashion-MNIST, is labelled ``fmnist``). Labels that name no
dataset (``my_mix``) are free.

The bench refuses a suite whose labels break this rule; the leaderboards show runs recorded under such a
label (by older versions) under the dataset they really ran.
"""

from __future__ import annotations

from collections.abc import Iterable

# Suffixes of registered datasets that are a paper's own partition of the dataset named by the rest.
PAPER_PARTITIONS = ("_fedtilt",)


def runs_the_named_dataset(label: str, dataset_name: str) -> bool:
    """Whether runs on ``dataset_name`` are runs of the dataset ``label`` names (itself or a paper's
    partition of it: ``fmnist_fedtilt`` for ``fmnist``)."""
    return dataset_name == label or dataset_name in {label + suffix for suffix in PAPER_PARTITIONS}


def names_a_dataset(label: str, dataset_names: Iterable[str]) -> bool:
    """Whether ``label`` is one of ``dataset_names`` (the registered datasets, or the published tables')."""
    return label in set(dataset_names)


def misnamed(label: str, dataset_name: str, dataset_names: Iterable[str]) -> bool:
    """True when ``label`` names another dataset than the one run (``fmnist`` on ``digits``)."""
    return names_a_dataset(label, dataset_names) and not runs_the_named_dataset(label, dataset_name)


def shown_label(label: str, dataset_name: str, dataset_names: Iterable[str]) -> str:
    """The label to show: ``label``, or the dataset really run when ``label`` names another one."""
    return dataset_name if misnamed(label, dataset_name, dataset_names) else label
