"""The files torchvision downloads for Fashion-MNIST, MNIST and CIFAR-10, and where it puts them.

Names, mirrors and md5 checksums are torchvision's own (``torchvision.datasets.FashionMNIST.resources``
etc.; a test checks they still agree). torchvision is imported only to download, because importing
``torchvision.datasets`` costs seconds at every start of the CLI.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from fedarena.datasets.files import cifar
from fedarena.datasets.files.sources import MISSING, FileStatus, Source, check_file

FMNIST_MIRRORS = ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",)
FMNIST_FILES = (
    ("train-images-idx3-ubyte.gz", "8d4fb7e6c68d591d4c3dfef9ec88bf0d"),
    ("train-labels-idx1-ubyte.gz", "25c81989df183df01b3e8a0aad5dffbe"),
    ("t10k-images-idx3-ubyte.gz", "bef4ecab320f06d8554ea6380940ec79"),
    ("t10k-labels-idx1-ubyte.gz", "bb300cfdad3c16e7a12a480ee83cd310"),
)
MNIST_MIRRORS = ("https://ossci-datasets.s3.amazonaws.com/mnist/", "http://yann.lecun.com/exdb/mnist/")
MNIST_FILES = (
    ("train-images-idx3-ubyte.gz", "f68b3c2dcbeaaa9fbdd348bbdeb94873"),
    ("train-labels-idx1-ubyte.gz", "d53e105ee54ea40749a09fcbcd1e9432"),
    ("t10k-images-idx3-ubyte.gz", "9fb629c4189551a2d022fa330f9573f3"),
    ("t10k-labels-idx1-ubyte.gz", "ec29112dd5afa0611ce80d1b7f02629c"),
)
CIFAR_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR_TGZ_MD5 = "c58f30108f718f92721af3b95e74349a"
CIFAR_FOLDER = cifar.FOLDER  # one spelling of the folder torchvision unpacks
CIFAR_FILES = (
    ("data_batch_1", "c99cafc152244af753f735de768cd75f"),
    ("data_batch_2", "d4bba439e000b95fd0a9bffe97cbabec"),
    ("data_batch_3", "54ebc095f3ab1f0389bbae665268c751"),
    ("data_batch_4", "634d18415352ddfa80567beed471001a"),
    ("data_batch_5", "482c414d41f54cd18b22e5b47cb7c3cb"),
    ("test_batch", "40351d587109b95175f43aff81a1287e"),
    ("batches.meta", "5ff9c542aee3614f3951f8cda6e48888"),
)


def torchvision_download(class_name: str):
    """download(root): instantiate ``torchvision.datasets.<class_name>`` with download=True (md5-checked)."""

    def download(root: Path) -> None:
        cls = getattr(importlib.import_module("torchvision.datasets"), class_name)
        cls(str(root), train=True, download=True)

    return download


def idx_source(class_name: str, mirrors: tuple[str, ...], files: tuple) -> Source:
    """torchvision's MNIST-style layout ``<class_name>/raw/``: the .gz as published, or unpacked."""
    folder = f"{class_name}/raw"

    def check(root: Path, verify: bool) -> list[FileStatus]:
        rows = []
        for gz, md5 in files:
            plain = gz.removesuffix(".gz")
            if (root / folder / gz).is_file():
                rows.append(check_file(root, f"{folder}/{gz}", md5, verify))
            elif (root / folder / plain).is_file():
                rows.append(check_file(root, f"{folder}/{plain}", None, verify))
            else:
                rows.append(FileStatus(f"{folder}/{gz}", MISSING))
        return rows

    names = ", ".join(gz for gz, _ in files)
    how = (
        f"`fedarena data fetch` downloads them with torchvision.datasets.{class_name} from "
        f"{' or '.join(mirrors)} and verifies their md5 checksums; offline, download {names} from there "
        f"on another machine and copy them into {folder}/ of the data directory (gzipped as published, "
        "or unpacked)"
    )
    return Source(class_name, how, check, urls=mirrors, download=torchvision_download(class_name))


def cifar_source() -> Source:
    def check(root: Path, verify: bool) -> list[FileStatus]:
        return [check_file(root, f"{CIFAR_FOLDER}/{name}", md5, verify) for name, md5 in CIFAR_FILES]

    how = (
        f"`fedarena data fetch` downloads {CIFAR_URL} (md5 {CIFAR_TGZ_MD5}) with "
        "torchvision.datasets.CIFAR10 and unpacks it; offline, download that archive on another machine "
        f"and unpack it in the data directory (it creates {CIFAR_FOLDER}/)"
    )
    return Source("CIFAR-10", how, check, urls=(CIFAR_URL,), download=torchvision_download("CIFAR10"))


FMNIST_SOURCE = idx_source("FashionMNIST", FMNIST_MIRRORS, FMNIST_FILES)
MNIST_SOURCE = idx_source("MNIST", MNIST_MIRRORS, MNIST_FILES)
CIFAR_SOURCE = cifar_source()
