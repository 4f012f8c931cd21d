"""FEMNIST and CelebA from LEAF's JSON format (and CelebA's JPEG folder), written tiny to tmp_path.

Every sample carries its identity in its pixels (FEMNIST: writer and sample number; CelebA: the image
colour), so the tests check that x and y stay aligned and that each client is exactly one writer.
"""

import json

import numpy as np
import pytest
import torch
from PIL import Image

from fedarena.datasets.catalog import DATASETS
from fedarena.datasets.files import leaf  # noqa: F401  (register the builders)
from fedarena.datasets.files.storage import DataCorruptError, DataNotFoundError

# writer -> (number of samples in train/, in test/); labels of sample i of writer w: (7 * w + i) % 62
WRITERS = {"f_0007": (5, 2), "f_0003": (4, 2), "f_0012": (6, 3), "f_0001": (3, 2)}


def femnist_user(w: int, start: int, n: int) -> dict:
    """n samples of writer w: pixel 0 = w / 100, pixel 1 = sample number / 100, the rest constant."""
    xs, ys = [], []
    for i in range(start, start + n):
        row = [0.5] * 784
        row[0], row[1] = w / 100, i / 100
        xs.append(row)
        ys.append((7 * w + i) % 62)
    return {"x": xs, "y": ys}


def leaf_doc(user_data: dict) -> dict:
    users = list(user_data)
    return {"users": users, "num_samples": [len(user_data[u]["y"]) for u in users], "user_data": user_data}


def write_femnist(root, layout="split"):
    """LEAF's -t sample layout (train/ and test/, each writer's samples split) or all_data/."""
    base = root / "femnist"
    train = {u: femnist_user(int(u[2:]), 0, a) for u, (a, b) in WRITERS.items()}
    test = {u: femnist_user(int(u[2:]), a, b) for u, (a, b) in WRITERS.items()}
    if layout == "all":
        both = {u: {k: train[u][k] + test[u][k] for k in ("x", "y")} for u in WRITERS}
        (base / "all_data").mkdir(parents=True)
        (base / "all_data" / "all_data_0.json").write_text(json.dumps(leaf_doc(both)))
        return base
    for folder, data in (("train", train), ("test", test)):
        (base / folder).mkdir(parents=True)
        names = list(data)
        (base / folder / f"all_data_0_niid_1_keep_0_{folder}_9.json").write_text(
            json.dumps(leaf_doc({u: data[u] for u in names[:2]}))
        )
        (base / folder / f"all_data_1_niid_1_keep_0_{folder}_9.json").write_text(
            json.dumps(leaf_doc({u: data[u] for u in names[2:]}))
        )
    return base


def build(name, root, seed=0, **options):
    return DATASETS.get(name).build(np.random.default_rng(seed), data_dir=str(root), **options)


def pooled(client):
    return (
        torch.cat([client.train.x, client.val.x, client.test.x]),
        torch.cat([client.train.y, client.val.y, client.test.y]),
    )


def writer_and_sample(x: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    flat = x.flatten(1).numpy()
    return np.round(flat[:, 0] * 100).astype(int), np.round(flat[:, 1] * 100).astype(int)


def test_femnist_natural_partition_one_client_per_writer_with_train_and_test_pooled(tmp_path):
    write_femnist(tmp_path)

    ds = build("femnist", tmp_path, num_clients=3)

    assert ds.num_clients == 3 and ds.num_classes == 62 and ds.input_shape == (1, 28, 28)
    seen = set()
    for client in ds.clients:
        x, y = pooled(client)
        writers, samples = writer_and_sample(x)
        (w,) = set(writers.tolist())  # exactly one writer per client
        assert sorted(samples.tolist()) == list(range(sum(WRITERS[f"f_{w:04d}"])))  # all of it, once
        assert y.tolist() == [(7 * w + i) % 62 for i in samples]  # labels stay with their images
        seen.add(w)
    assert len(seen) == 3 and seen <= {7, 3, 12, 1}
    assert DATASETS.get("femnist").model == "cnn_femnist"


def test_femnist_all_data_layout_gives_the_same_dataset_as_train_plus_test(tmp_path):
    write_femnist(tmp_path / "a", layout="split")
    write_femnist(tmp_path / "b", layout="all")

    a, b = (
        build("femnist", tmp_path / "a", 5, num_clients=2),
        build("femnist", tmp_path / "b", 5, num_clients=2),
    )

    assert all(torch.equal(pooled(p)[0], pooled(q)[0]) for p, q in zip(a.clients, b.clients, strict=True))


def test_femnist_fingerprint_is_stable_for_a_seed_and_differs_across_seeds(tmp_path):
    write_femnist(tmp_path)

    fps = [build("femnist", tmp_path, seed, num_clients=2).fingerprint for seed in (1, 1, 2, 3)]

    assert fps[0] == fps[1] and len(set(fps)) == 3


def test_femnist_asking_for_more_writers_than_the_files_hold_is_an_error(tmp_path):
    write_femnist(tmp_path)

    with pytest.raises(ValueError, match="num_clients=5 but the data has only 4"):
        build("femnist", tmp_path, num_clients=5)


def test_femnist_skewed_gives_each_device_five_consecutive_classes(tmp_path):
    base = tmp_path / "femnist" / "all_data"
    base.mkdir(parents=True)
    # 4 writers x 20 samples; sample i (numbered across writers) has label i % 10 and pixel 0 = i / 100
    data = {
        f"w{w}": {
            "x": [[i / 100] + [0.0] * 783 for i in range(20 * w, 20 * w + 20)],
            "y": [i % 10 for i in range(20 * w, 20 * w + 20)],
        }
        for w in range(4)
    }
    (base / "all.json").write_text(json.dumps(leaf_doc(data)))

    ds = build("femnist_skewed", tmp_path, num_clients=3)

    for u, client in enumerate(ds.clients):
        x, y = pooled(client)
        number = np.round(x.flatten(1)[:, 0].numpy() * 100).astype(int)
        assert y.tolist() == (number % 10).tolist()  # labels stay with their images across writers
        assert set(y.tolist()) <= {(u + j) % 10 for j in range(5)}
        assert len(set((number // 20).tolist())) > 1  # a skewed device mixes writers
    rows = torch.cat([pooled(c)[0].flatten(1) for c in ds.clients])
    assert len(torch.unique(rows, dim=0)) == len(rows)  # no sample twice
    assert ds.num_classes == 62


def test_leaf_pool_take_returns_samples_in_the_requested_order_across_users():
    ids = np.array([0, 0, 0, 1, 1])
    arrays = leaf.LeafPool(["a", "b"], [np.array([10, 11, 12]), np.array([20, 21])], ids, ids, [])
    names = leaf.LeafPool(["a", "b"], [["a0", "a1"], ["b0"]], ids[[0, 1, 3]], ids[[0, 1, 3]], [])

    assert arrays.take(np.array([4, 0, 3, 2]), np.stack).tolist() == [21, 10, 20, 12]
    assert names.take(np.array([2, 0, 1]), lambda xs: np.array([n.upper() for n in xs])).tolist() == [
        "B0",
        "A0",
        "A1",
    ]


@pytest.mark.parametrize(
    "text, problem",
    [
        ('{"users": ["a"], "num_samples": [1], "user_data": {"a": {"x": [[0.1, ', "invalid JSON"),
        (json.dumps({"users": ["a"], "user_data": {}}), "user 'a' lacks x and y"),
        (json.dumps(leaf_doc({"a": {"x": [[0.1] * 783], "y": [3]}})), "784 finite numbers"),
        (json.dumps(leaf_doc({"a": {"x": [[0.1] * 784], "y": [62]}})), r"integers in \[0, 62\)"),
        (
            json.dumps(
                {"users": ["a"], "num_samples": [2], "user_data": {"a": {"x": [[0.1] * 784], "y": [1]}}}
            ),
            "num_samples says 2",
        ),
    ],
)
def test_corrupt_leaf_json_is_reported_with_the_file(tmp_path, text, problem):
    base = write_femnist(tmp_path)
    bad = base / "test" / "all_data_1_niid_1_keep_0_test_9.json"
    bad.write_text(text)

    with pytest.raises(DataCorruptError, match=problem) as err:
        build("femnist", tmp_path, num_clients=2)

    assert str(bad) in str(err.value) and "preprocess.sh" in str(err.value)


def test_missing_femnist_files_name_the_folders_and_the_leaf_command(tmp_path):
    (tmp_path / "femnist" / "train").mkdir(parents=True)
    (tmp_path / "femnist" / "train" / "a.json").write_text(json.dumps(leaf_doc({})))

    with pytest.raises(DataNotFoundError) as err:
        build("femnist", tmp_path)

    msg = str(err.value)
    assert "femnist/test/*.json" in msg and str(tmp_path) in msg
    assert "./preprocess.sh -s niid --sf 1.0 -k 0 -t sample" in msg and "fedarena data fetch femnist" in msg


# --- CelebA: image i of the files is a solid colour (20 + 10 i, 200 - 10 i, 60); 'Smiling' = i % 2 ---
CELEBS = {"4001": 3, "1002": 4, "2750": 3}


def write_celeba(root, image_folder="celeba/img_align_celeba"):
    images = root / image_folder
    images.mkdir(parents=True)
    data, i = {}, 0
    for celeb, n in CELEBS.items():
        names = []
        for _ in range(n):
            name = f"{i + 1:06d}.jpg"
            Image.new("RGB", (18, 22), (20 + 10 * i, 200 - 10 * i, 60)).save(images / name, quality=95)
            names.append(name)
            i += 1
        data[celeb] = {"x": names, "y": [float(int(n[:6]) - 1) % 2 for n in names]}  # LEAF writes 0.0/1.0
    for folder in ("train", "test"):
        (root / "celeba" / folder).mkdir(parents=True)
        split = {c: {k: v[:2] if folder == "train" else v[2:] for k, v in d.items()} for c, d in data.items()}
        (root / "celeba" / folder / f"{folder}.json").write_text(json.dumps(leaf_doc(split)))
    return images


def test_celeba_images_are_84x84_rgb_in_unit_range_with_aligned_labels(tmp_path):
    write_celeba(tmp_path)

    ds = build("celeba", tmp_path, num_clients=2)

    assert ds.num_clients == 2 and ds.num_classes == 2 and ds.input_shape == (3, 84, 84)
    for client in ds.clients:
        x, y = pooled(client)
        assert x.min() >= 0 and x.max() <= 1
        index = torch.round((x[:, 0].mean((1, 2)) * 255 - 20) / 10).long()  # image number from its red level
        assert y.tolist() == (index % 2).tolist()
        assert len(set(index.tolist())) == len(index) and len(index) in CELEBS.values()
    assert DATASETS.get("celeba").model == "cnn_celeba"


def test_celeba_reads_leaf_own_raw_image_folder(tmp_path):
    write_celeba(tmp_path, image_folder="celeba/raw/img_align_celeba")

    ds = build("celeba", tmp_path, num_clients=3)

    assert sum(len(pooled(c)[1]) for c in ds.clients) == sum(CELEBS.values())


def test_celeba_missing_image_is_named(tmp_path):
    images = write_celeba(tmp_path)
    (images / "000005.jpg").unlink()

    with pytest.raises(DataNotFoundError, match="img_align_celeba/000005.jpg") as err:
        build("celeba", tmp_path, num_clients=3)

    assert "fedarena data fetch celeba" in str(err.value)


def test_celeba_undecodable_image_is_corrupt(tmp_path):
    images = write_celeba(tmp_path)
    (images / "000002.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")

    with pytest.raises(DataCorruptError, match="000002.jpg is unusable: cannot decode the image"):
        build("celeba", tmp_path, num_clients=3)


def test_celeba_without_image_folder_lists_it_as_missing(tmp_path):
    images = write_celeba(tmp_path)
    for f in images.iterdir():
        f.unlink()
    images.rmdir()

    with pytest.raises(DataNotFoundError, match="celeba/img_align_celeba/\\*.jpg"):
        build("celeba", tmp_path, num_clients=3)
