"""StackOverflow from tiny files in TFF's layout (HDF5 examples/<user>/{tokens, title, tags}, the word-count
lines, the tag-count JSON): features, targets, sampled users, errors, the download, and a federated run."""

import http.server
import io
import json
import tarfile
import threading
from functools import partial

import h5py
import numpy as np
import pytest
import torch

from fedarena.config import ExperimentConfig
from fedarena.datasets import DATASETS
from fedarena.datasets import stackoverflow as so
from fedarena.datasets.files.fetch import fetch
from fedarena.datasets.files.storage import DataCorruptError, DataFetchError, DataNotFoundError
from fedarena.errors import ConfigError
from fedarena.simulation.experiment import run_experiment

WORDS = ["the", "python", "list", "java", "how"]  # most frequent first
TAG_COUNTS = {"java": 50, "python": 90, "c++": 10, "lists": 30}  # ranked: python, java, lists, c++
# user -> posts (tokens, title, tags)
USERS = {
    f"{k:03d}": [(f"how to sort a list in python {k}", "python list", "python|lists"),
                 ("the java way", "java", "java"),
                 ("unknown words only", "nothing here", "c++"),
                 ("python python the", "the list", "python")] * 3
    for k in range(6)
}


def write_stackoverflow(root, users=USERS):
    folder = root / "stackoverflow"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "stackoverflow.word_count").write_text("".join(f"{w} {100 - i}\n" for i, w in enumerate(WORDS)))
    (folder / "stackoverflow.tag_count").write_text(json.dumps(TAG_COUNTS))
    with h5py.File(folder / "stackoverflow_train.h5", "w") as f:
        for user, posts in users.items():
            group = f.create_group(f"examples/{user}")
            for i, key in enumerate(("tokens", "title", "tags")):
                group.create_dataset(key, data=np.array([p[i].encode() for p in posts], dtype=object),
                                     dtype=h5py.string_dtype())
    return root


def build(root, seed=0, **options):
    return DATASETS.get("stackoverflow").build(np.random.default_rng(seed), data_dir=str(root), **options)


def test_bag_of_words_and_tag_vectors_follow_tffs_recipe(tmp_path):
    vocab = so.most_frequent_words(write_stackoverflow(tmp_path) / so.WORDS, 3)  # the, python, list
    tags = so.most_frequent_tags(tmp_path / so.TAGS, 2)  # python, java
    # "python python the" + "the list": 5 words; counts the 2, python 2, list 1
    assert so.bag_of_words(b"python python the", b"the list", vocab).tolist() == pytest.approx([0.4, 0.4, 0.2])
    assert so.tag_vector(b"java|lists", tags).tolist() == [0.0, 1.0]
    assert vocab == {"the": 0, "python": 1, "list": 2} and tags == {"python": 0, "java": 1}


def test_users_are_sampled_and_split_into_a_multilabel_dataset(tmp_path):
    ds = build(write_stackoverflow(tmp_path), num_clients=4, vocab_size=5, num_tags=3)
    assert ds.num_clients == 4 and ds.task == "multilabel" and ds.num_classes == 3 and ds.input_shape == (5,)
    assert sorted(len(c.train) + len(c.val) + len(c.test) for c in ds.clients) == [12] * 4
    y = torch.cat([c.train.y for c in ds.clients])
    assert y.shape[1] == 3 and set(y.sum(1).tolist()) <= {0.0, 1.0, 2.0}
    assert build(tmp_path, num_clients=4, vocab_size=5, num_tags=3).fingerprint == ds.fingerprint
    assert len(build(tmp_path, num_clients=4, vocab_size=5, num_tags=3, max_samples=5).clients[0].train) < 5


def test_missing_truncated_and_too_small_files_give_clear_errors(tmp_path):
    with pytest.raises(DataNotFoundError, match="(?s)stackoverflow_train.h5.*fedarena data fetch stackoverflow"):
        build(tmp_path)
    write_stackoverflow(tmp_path)
    with pytest.raises(ConfigError, match="holds 6 users, fewer than num_clients=400"):
        build(tmp_path)
    train = tmp_path / so.TRAIN
    train.write_bytes(train.read_bytes()[:200])
    with pytest.raises(DataCorruptError, match="stackoverflow_train.h5 is unusable"):
        build(tmp_path, num_clients=4)
    (tmp_path / so.TAGS).write_text("{not json")
    with pytest.raises(DataCorruptError, match="stackoverflow.tag_count is unusable"):
        build(tmp_path, num_clients=4)


def test_a_federated_run_learns_the_tags_and_a1_poisons_them(tmp_path):
    write_stackoverflow(tmp_path)
    data = {"dataset": {"name": "stackoverflow", "data_dir": str(tmp_path), "num_clients": 6, "vocab_size": 5,
                        "num_tags": 3}, "rounds": 15, "clients_per_round": 3, "local_steps": 3, "batch_size": 4,
            "lr": 1.0, "eval_every": 15}
    clean = run_experiment(ExperimentConfig.from_dict(data))
    assert clean["config"]["model"]["name"] == "logreg" and clean["final"]["acc_pooled"] > 0.7
    poisoned = run_experiment(ExperimentConfig.from_dict({**data, "attack": {"name": "a1", "level": 0.5}}))
    assert 0.0 <= poisoned["final"]["acc_pooled"] <= 1.0


def archive(name, payload):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:bz2") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    return buffer.getvalue()


def test_fetch_downloads_and_unpacks_the_three_files_and_fails_clearly_offline(tmp_path, monkeypatch):
    # Prepare: the three files, served by a local HTTP server in TFF's packaging
    source = write_stackoverflow(tmp_path / "source") / "stackoverflow"
    served = tmp_path / "served"
    served.mkdir()
    (served / "stackoverflow.tar.bz2").write_bytes(archive("stackoverflow_train.h5",
                                                           (source / "stackoverflow_train.h5").read_bytes()))
    (served / "stackoverflow.word_count").write_bytes((source / "stackoverflow.word_count").read_bytes())
    (served / "stackoverflow.tag_count.tar.bz2").write_bytes(
        archive("stackoverflow.tag_count", (source / "stackoverflow.tag_count").read_bytes()))
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setattr(so, "URL", f"http://127.0.0.1:{server.server_port}")
        # Execute
        text = fetch("stackoverflow", str(tmp_path / "data"))
    finally:
        server.shutdown()
    # Assert
    assert "status: complete" in text
    assert build(tmp_path / "data", num_clients=2, vocab_size=5, num_tags=3).num_clients == 2
    monkeypatch.setattr(so, "URL", "http://127.0.0.1:9")  # nothing listens there: as offline
    with pytest.raises(DataFetchError, match="(?s)download failed.*place the files by hand"):
        fetch("stackoverflow", str(tmp_path / "offline"))
