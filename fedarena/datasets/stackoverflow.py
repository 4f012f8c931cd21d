"""StackOverflow tag prediction (TFF's release; Ditto Table 1's fifth dataset).

Files, as ``tff.simulation.datasets.stackoverflow`` stores them once unpacked in the data directory's
``stackoverflow/`` folder:
- ``stackoverflow_train.h5``: HDF5, ``examples/<user id>/{tokens, title, tags, ...}``, one byte string per
  post (tokens and title space-separated, tags '|'-separated);
- ``stackoverflow.word_count``: one ``word count`` line per word, most frequent first;
- ``stackoverflow.tag_count``: a JSON object tag -> count.

Ditto's setting (Table 4, Appendix C): 400 users sampled uniformly from the dataset, each user's posts split
72/8/20; features: the bag of words over the 10,000 most frequent words (TFF's logistic-regression recipe:
the mean of the one-hot vectors of the post's token and title words, out-of-vocabulary words counting in
the mean); targets: the 500 most frequent tags as a 0/1 vector (task ``multilabel``); model: logistic
regression with one sigmoid per tag. Accuracy is the share of posts whose top-scoring tag is one of their
tags. ``max_samples`` caps each user's posts (a random subset), since the dense features take 40 kB a post.
"""

from __future__ import annotations

import json
import shutil
import tarfile
import tempfile
import urllib.request
from pathlib import Path

import numpy as np
import torch

from fedarena.datasets.base import FederatedDataset, from_partition
from fedarena.datasets.catalog import register_dataset
from fedarena.datasets.files.sources import FileStatus, Source, check_file, require
from fedarena.datasets.files.storage import corrupt_error, data_root, size_digest
from fedarena.errors import ConfigError

TRAIN, WORDS, TAGS = ("stackoverflow/stackoverflow_train.h5", "stackoverflow/stackoverflow.word_count",
                      "stackoverflow/stackoverflow.tag_count")
URL = "https://storage.googleapis.com/tff-datasets-public"
HOW = ("run `fedarena data fetch stackoverflow`, or download "
       f"{URL}/stackoverflow.tar.bz2, {URL}/stackoverflow.word_count and "
       f"{URL}/stackoverflow.tag_count.tar.bz2 (what tff.simulation.datasets.stackoverflow.load_data, "
       f"load_word_counts and load_tag_counts fetch), unpack them and place {TRAIN}, {WORDS} and {TAGS} in "
       "the data directory")


DOWNLOADS = (("stackoverflow.tar.bz2", True), ("stackoverflow.word_count", False),
             ("stackoverflow.tag_count.tar.bz2", True))  # (file under URL, is a tar archive to unpack)


def check(root, verify: bool) -> list[FileStatus]:
    return [check_file(root, rel, None, verify) for rel in (TRAIN, WORDS, TAGS)]


def download(root: Path) -> None:
    """Fetch TFF's three files from ``URL`` into ``root/stackoverflow`` and unpack the archives (several GB)."""
    base_url = URL  # read at call time (a mirror can be set here)
    folder = root / "stackoverflow"
    folder.mkdir(parents=True, exist_ok=True)
    for name, archive in DOWNLOADS:
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            part = Path(tmp) / name
            with urllib.request.urlopen(f"{base_url}/{name}", timeout=60) as response, open(part, "wb") as out:  # noqa: S310
                shutil.copyfileobj(response, out)
            if not archive:
                part.replace(folder / name)
                continue
            try:
                with tarfile.open(part, "r:bz2") as tar:
                    tar.extractall(folder, filter="data")
            except tarfile.TarError as err:
                raise RuntimeError(f"{name} is not a bzip2 tar archive: {err}") from None


SOURCE = Source("StackOverflow (TFF)", HOW, check, urls=tuple(f"{URL}/{n}" for n, _ in DOWNLOADS), download=download)


def most_frequent_words(path: Path, size: int) -> dict[str, int]:
    """word -> index for the first ``size`` words of the word-count file."""
    vocab = {}
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            if len(vocab) == size:
                break
            parts = line.split()
            if len(parts) != 2 or not parts[1].isdigit():
                raise corrupt_error("stackoverflow", path, f"line {len(vocab) + 1} is not 'word count'", HOW)
            vocab[parts[0]] = len(vocab)
    return vocab


def most_frequent_tags(path: Path, size: int) -> dict[str, int]:
    """tag -> index for the ``size`` tags with the highest counts (ties: file order, as TFF's sort)."""
    try:
        counts = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise corrupt_error("stackoverflow", path, f"not a JSON object of tag counts ({err})", HOW) from None
    ranked = sorted(counts.items(), key=lambda item: item[1], reverse=True)[:size]
    return {tag: i for i, (tag, _) in enumerate(ranked)}


def bag_of_words(tokens: bytes, title: bytes, vocab: dict[str, int]) -> np.ndarray:
    words = (tokens.decode("utf-8", "replace") + " " + title.decode("utf-8", "replace")).split()
    x = np.zeros(len(vocab), dtype=np.float32)
    for word in words:
        if word in vocab:
            x[vocab[word]] += 1.0
    return x / max(len(words), 1)


def tag_vector(tags: bytes, tag_index: dict[str, int]) -> np.ndarray:
    y = np.zeros(len(tag_index), dtype=np.float32)
    for tag in tags.decode("utf-8", "replace").split("|"):
        if tag in tag_index:
            y[tag_index[tag]] = 1.0
    return y


def read_users(path: Path, num_clients: int, max_samples: int | None, rng: np.random.Generator,
               vocab: dict[str, int], tag_index: dict[str, int]) -> tuple[list, list]:
    """(features per user, targets per user) of ``num_clients`` users drawn uniformly from the file."""
    import h5py  # only this dataset reads HDF5

    try:
        with h5py.File(path, "r") as f:
            users = sorted(f["examples"].keys())
            if len(users) < num_clients:
                raise ConfigError(f"dataset 'stackoverflow': the file holds {len(users)} users, fewer than "
                                  f"num_clients={num_clients}")
            chosen = [users[i] for i in np.sort(rng.choice(len(users), size=num_clients, replace=False))]
            return _features(f["examples"], chosen, max_samples, rng, vocab, tag_index)
    except (OSError, KeyError) as err:
        raise corrupt_error("stackoverflow", path, f"not TFF's HDF5 layout examples/<user>/{{tokens, title, "
                            f"tags}} ({err})", HOW) from None


def _features(examples, users: list[str], max_samples: int | None, rng: np.random.Generator,
              vocab: dict[str, int], tag_index: dict[str, int]) -> tuple[list, list]:
    xs, ys = [], []
    for user in users:
        group = examples[user]
        tokens, titles, tags = group["tokens"][()], group["title"][()], group["tags"][()]
        keep = np.arange(len(tokens))
        if max_samples is not None and len(keep) > max_samples:
            keep = np.sort(rng.choice(len(keep), size=max_samples, replace=False))
        xs.append(np.stack([bag_of_words(tokens[i], titles[i], vocab) for i in keep]))
        ys.append(np.stack([tag_vector(tags[i], tag_index) for i in keep]))
    return xs, ys


@register_dataset("stackoverflow", model="logreg", source=SOURCE)
def stackoverflow(
    rng: np.random.Generator,
    *,
    data_dir: str | None = None,
    num_clients: int = 400,
    vocab_size: int = 10000,
    num_tags: int = 500,
    max_samples: int | None = 100,
) -> FederatedDataset:
    """TFF StackOverflow tag prediction with Ditto's 400 sampled users (see the module docstring)."""
    if num_clients < 1 or vocab_size < 1 or num_tags < 2 or (max_samples is not None and max_samples < 1):
        raise ConfigError("stackoverflow needs num_clients >= 1, vocab_size >= 1, num_tags >= 2 and max_samples "
                          f">= 1 (or null); got {num_clients}, {vocab_size}, {num_tags}, {max_samples}")
    root = data_root(data_dir)
    require("stackoverflow", SOURCE, root)
    vocab = most_frequent_words(root / WORDS, vocab_size)
    tag_index = most_frequent_tags(root / TAGS, num_tags)
    xs, ys = read_users(root / TRAIN, num_clients, max_samples, rng, vocab, tag_index)
    sizes = np.array([len(x) for x in xs])
    parts = np.split(np.arange(sizes.sum()), np.cumsum(sizes)[:-1])
    source = (f"stackoverflow|files={size_digest([root / TRAIN, root / WORDS, root / TAGS], root)}|"
              f"K={num_clients}|V={vocab_size}|T={num_tags}|max={max_samples}")
    return from_partition("stackoverflow", torch.from_numpy(np.concatenate(xs)),
                          torch.from_numpy(np.concatenate(ys)), parts, rng, num_classes=len(tag_index),
                          source=source, task="multilabel",
                          meta={"users_sampled": num_clients, "vocab_size": len(vocab), "num_tags": len(tag_index)})
