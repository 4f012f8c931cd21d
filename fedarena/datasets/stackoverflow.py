"""StackOverflow (TFF): registered so that configs name it, but not supported yet.

Ditto's setting: 400 users sampled, bag of words over the 10,000 most frequent words, the 500 most
frequent tags, logistic regression. Reading it needs TFF's files, as
``tff.simulation.datasets.stackoverflow.load_data`` stores them: ``stackoverflow_train.h5``,
``stackoverflow_held_out.h5``, ``stackoverflow_test.h5`` (HDF5, ``examples/<client id>/{tokens, tags,
title, ...}`` byte strings; newer TFF releases ship one SQLite file of serialized tf.Examples instead)
and the vocabularies ``stackoverflow.word_count`` and ``stackoverflow.tag_count``. Two things are
missing: an HDF5 reader (h5py is not a dependency) and a multi-label target (a post has several
tags), which FederatedDataset's tasks (classification, binary_pm1, regression) do not express.
"""

from __future__ import annotations

import numpy as np

from fedarena.datasets.base import FederatedDataset
from fedarena.datasets.registry import register_dataset
from fedarena.datasets.sources import FileStatus, Source, check_file, register_source
from fedarena.params import ConfigError

FILES = (
    "stackoverflow/stackoverflow_train.h5",
    "stackoverflow/stackoverflow_held_out.h5",
    "stackoverflow/stackoverflow_test.h5",
    "stackoverflow/stackoverflow.word_count",
    "stackoverflow/stackoverflow.tag_count",
)
HOW = (
    "StackOverflow is not supported yet (no HDF5 reader, no multi-label task). It would read TFF's files "
    "as tff.simulation.datasets.stackoverflow.load_data, load_word_counts and load_tag_counts store them "
    f"(stackoverflow.tar.bz2 and the word/tag count archives, unpacked): {', '.join(FILES)} in the data "
    "directory"
)


def check(root, verify: bool) -> list[FileStatus]:
    return [check_file(root, rel, None, verify) for rel in FILES]


SOURCE = register_source(Source("StackOverflow (TFF)", HOW, check, supported=False), "stackoverflow")


@register_dataset("stackoverflow", model="logreg")
def stackoverflow(
    rng: np.random.Generator,
    *,
    data_dir: str | None = None,
    num_clients: int = 400,
    vocab_size: int = 10000,
    num_tags: int = 500,
) -> FederatedDataset:
    """Always raises ConfigError: see the module docstring for what support would need."""
    raise ConfigError(
        f"dataset 'stackoverflow' is not supported yet. {HOW}. Datasets available from files: fmnist, "
        "fmnist_fedtilt, mnist, cifar10, femnist, femnist_skewed, celeba, vehicle"
    )
