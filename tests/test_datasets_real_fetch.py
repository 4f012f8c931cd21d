"""`fedarena data fetch|info` behaviour, the data directory, and the partition cache. Never the network:
an autouse fixture makes any socket use fail, and downloads are replaced by fakes."""

import gzip
import socket
from urllib.error import URLError

import numpy as np
import pytest
import torchvision.datasets as tvd

from fedarena.datasets.files import cache, fetch, storage
from fedarena.datasets.files import torchvision as torchvision_files
from fedarena.datasets.files.sources import MISMATCH, MISSING, OK, PRESENT, check_file
from fedarena.datasets.files.storage import DataCorruptError, DataFetchError, DataNotFoundError
from fedarena.registry import UnknownNameError


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError("network access in a test")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)


def offline_download(*args, **kwargs):
    raise URLError("[Errno -3] Temporary failure in name resolution")


def test_fetch_offline_says_dataset_url_directory_and_manual_placement(tmp_path, monkeypatch):
    monkeypatch.setattr(tvd.mnist, "download_and_extract_archive", offline_download)

    with pytest.raises(DataFetchError) as err:
        fetch.fetch("fmnist", str(tmp_path))

    msg = str(err.value)
    assert "'fmnist'" in msg and "download failed" in msg and "name resolution" in msg
    assert "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/" in msg
    assert str(tmp_path) in msg and "FashionMNIST/raw/" in msg and "t10k-labels-idx1-ubyte.gz" in msg
    assert "place the files by hand" in msg


def test_fetch_cifar_offline_names_the_archive_url(tmp_path, monkeypatch):
    monkeypatch.setattr(tvd.cifar, "download_and_extract_archive", offline_download)

    with pytest.raises(
        DataFetchError, match="tried: https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
    ):
        fetch.fetch("cifar10", str(tmp_path))


def test_fetch_verifies_checksums_after_download(tmp_path, monkeypatch):
    def fake_download(
        url, download_root, filename, md5
    ):  # a file that is not the published one, unpacked too
        content = b"\x00\x00\x08\x01\x00\x00\x00\x00"
        (tmp_path / "MNIST" / "raw" / filename).write_bytes(gzip.compress(content))
        (tmp_path / "MNIST" / "raw" / filename.removesuffix(".gz")).write_bytes(content)

    monkeypatch.setattr(tvd.mnist, "download_and_extract_archive", fake_download)
    monkeypatch.setattr(tvd.MNIST, "_load_data", lambda self: (None, None))

    with pytest.raises(DataCorruptError, match="checksum mismatch") as err:
        fetch.fetch("mnist", str(tmp_path))

    assert "expected f68b3c2dcbeaaa9fbdd348bbdeb94873" in str(err.value)


def test_fetch_does_not_download_files_placed_by_hand_but_checks_them(tmp_path, monkeypatch):
    raw = tmp_path / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    for gz, _ in torchvision_files.FMNIST_FILES:
        (raw / gz).write_bytes(gzip.compress(b"a stand-in"))
    monkeypatch.setattr(tvd.mnist, "download_and_extract_archive", offline_download)

    with pytest.raises(DataCorruptError) as err:
        fetch.fetch("fmnist", str(tmp_path))

    msg = str(err.value)
    assert "checksum mismatch" in msg and "expected 8d4fb7e6c68d591d4c3dfef9ec88bf0d" in msg
    assert "FashionMNIST/raw/t10k-labels-idx1-ubyte.gz" in msg


def test_fetch_of_a_manual_dataset_explains_where_to_put_the_files(tmp_path):
    with pytest.raises(DataNotFoundError) as err:
        fetch.fetch("celeba", str(tmp_path))

    msg = str(err.value)
    assert (
        "cannot be downloaded automatically" in msg
        and "./preprocess.sh -s niid --sf 1.0 -k 5 -t sample" in msg
    )
    assert str(tmp_path / "celeba" / "img_align_celeba") in msg


def test_fetch_of_a_present_manual_dataset_reports_it_complete(tmp_path):
    (tmp_path / "vehicle").mkdir()
    (tmp_path / "vehicle" / "vehicle.mat").write_bytes(b"placeholder")

    text = fetch.fetch("vehicle", str(tmp_path))

    assert "vehicle/vehicle.mat  present" in text and "status: complete" in text


def test_fetch_of_generated_datasets(tmp_path):
    assert "none (generated or bundled)" in fetch.fetch("digits", str(tmp_path))
    assert fetch.info("digits", str(tmp_path))["complete"] is True
    with pytest.raises(UnknownNameError, match="unknown dataset 'fmnst'"):
        fetch.info("fmnst", str(tmp_path))


def test_info_lists_present_missing_and_checksum_status(tmp_path):
    raw = tmp_path / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    (raw / "train-images-idx3-ubyte.gz").write_bytes(b"not the published file")
    (raw / "t10k-images-idx3-ubyte").write_bytes(b"unpacked copy")

    report = fetch.info("fmnist_fedtilt", str(tmp_path))

    status = {f["path"]: f["status"] for f in report["files"]}
    assert status == {
        "FashionMNIST/raw/train-images-idx3-ubyte.gz": MISMATCH,
        "FashionMNIST/raw/train-labels-idx1-ubyte.gz": MISSING,
        "FashionMNIST/raw/t10k-images-idx3-ubyte": "present",
        "FashionMNIST/raw/t10k-labels-idx1-ubyte.gz": MISSING,
    }
    assert (
        report["complete"] is False
        and report["downloadable"] is True
        and report["directory"] == str(tmp_path)
    )
    assert "status: incomplete" in fetch.info_text("fmnist_fedtilt", str(tmp_path))


def test_check_file_verifies_a_matching_md5_only_when_asked(tmp_path):
    (tmp_path / "f.bin").write_bytes(b"abc")
    md5_abc = "900150983cd24fb0d6963f7d28e17f72"

    quick, verified = (
        check_file(tmp_path, "f.bin", md5_abc, False),
        check_file(tmp_path, "f.bin", md5_abc, True),
    )

    assert (quick.status, quick.detail) == (PRESENT, "3 bytes")
    assert (verified.status, verified.detail) == (OK, f"md5 {md5_abc}")


def test_torchvision_constants_match_torchvision():
    assert torchvision_files.FMNIST_FILES == tuple(map(tuple, tvd.FashionMNIST.resources))
    assert torchvision_files.FMNIST_MIRRORS == tuple(tvd.FashionMNIST.mirrors)
    assert torchvision_files.MNIST_FILES == tuple(map(tuple, tvd.MNIST.resources))
    assert torchvision_files.MNIST_MIRRORS == tuple(tvd.MNIST.mirrors)
    cifar = [
        *tvd.CIFAR10.train_list,
        *tvd.CIFAR10.test_list,
        [tvd.CIFAR10.meta["filename"], tvd.CIFAR10.meta["md5"]],
    ]
    assert torchvision_files.CIFAR_FILES == tuple(map(tuple, cifar))
    assert (torchvision_files.CIFAR_URL, torchvision_files.CIFAR_TGZ_MD5) == (
        tvd.CIFAR10.url,
        tvd.CIFAR10.tgz_md5,
    )
    assert torchvision_files.CIFAR_FOLDER == tvd.CIFAR10.base_folder


def test_data_root_precedence(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("FEDARENA_DATA_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert storage.data_root() == tmp_path / "home" / ".cache" / "fedarena"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert storage.data_root() == tmp_path / "xdg" / "fedarena"
    monkeypatch.setenv("FEDARENA_DATA_DIR", str(tmp_path / "env"))
    assert storage.data_root() == tmp_path / "env"
    assert storage.data_root(str(tmp_path / "opt")) == tmp_path / "opt"


def test_partition_cache_round_trip_and_key_sensitivity(tmp_path):
    keys = np.array([2, 0, 1, 1, 2])
    parts = [np.array([4, 0]), np.array([], dtype=np.int64), np.array([2, 3, 1])]
    calls = []

    def compute():
        calls.append(1)
        return parts

    first = cache.cached_partition(tmp_path, {"seed": 1}, keys, compute)
    second = cache.cached_partition(tmp_path, {"seed": 1}, keys, compute)

    assert len(calls) == 1 and [p.tolist() for p in second] == [[4, 0], [], [2, 3, 1]]
    assert [p.tolist() for p in first] == [p.tolist() for p in second]
    base = cache.partition_key({"seed": 1}, keys)
    assert base != cache.partition_key({"seed": 2}, keys) != cache.partition_key({"seed": 1}, keys[::-1])


def test_unreadable_cache_entry_is_ignored(tmp_path):
    path = tmp_path / "entry.npz"
    path.write_bytes(b"PK\x03\x04 truncated zip")

    assert cache.load_partition(path) is None


def test_read_only_cache_directory_only_warns(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise PermissionError("read-only file system")

    monkeypatch.setattr(cache.tempfile, "mkstemp", refuse)

    with pytest.warns(UserWarning, match="partition cache disabled"):
        parts = cache.cached_partition(tmp_path, {"seed": 1}, np.arange(3), lambda: [np.array([0, 1, 2])])

    assert [p.tolist() for p in parts] == [[0, 1, 2]]
