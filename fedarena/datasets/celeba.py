"""CelebA from LEAF (Caldas et al. 2018): devices are celebrities, the label is 'Smiling' (0/1).

LEAF's JSON lists, per celebrity, image file names (x) and the attribute as 0/1 (y). The images are
the aligned CelebA JPEGs, read from ``celeba/img_align_celeba/`` of the data directory (or LEAF's
own ``celeba/raw/img_align_celeba/``). As in LEAF's CelebA model, each image is resized to 84x84
(bilinear, stated explicitly so Pillow versions agree) and converted to RGB; values are scaled to
[0, 1], shape [3, 84, 84]. Ditto samples ``num_clients`` celebrities (paper: 515); only their
images are opened.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

from fedarena.datasets.base import FederatedDataset
from fedarena.datasets.catalog import register_dataset
from fedarena.datasets.files import leaf
from fedarena.datasets.files.sources import MISSING, FileStatus, Source, check_glob, require
from fedarena.datasets.files.storage import corrupt_error, data_root, missing_error, size_digest
from fedarena.datasets.pipeline import assemble, partition_pool, seed_streams

IMAGE_SIZE = 84
IMAGE_DIRS = ("celeba/img_align_celeba", "celeba/raw/img_align_celeba")
LEAF_CMD = "./preprocess.sh -s niid --sf 1.0 -k 5 -t sample"
HOW = (
    "CelebA cannot be downloaded automatically. Get identity_CelebA.txt, list_attr_celeba.txt and "
    "img_align_celeba/ from http://mmlab.ie.cuhk.edu.hk/projects/CelebA.html into leaf/data/celeba/data/raw "
    "of a clone of https://github.com/TalwalkarLab/leaf, run `cd leaf/data/celeba && "
    f"{LEAF_CMD}`, then copy data/train and data/test (or data/all_data) into celeba/ and the "
    "img_align_celeba folder into celeba/img_align_celeba of the data directory. Ditto's exact train/test "
    "lists are linked from data/celeba/README.md of https://github.com/litian96/ditto"
)


def image_dir(root: Path) -> Path | None:
    return next((root / d for d in IMAGE_DIRS if (root / d).is_dir()), None)


def check(root: Path, verify: bool) -> list[FileStatus]:
    folder = image_dir(root)
    images = (
        check_glob(root, str(folder.relative_to(root)), "*.jpg")
        if folder
        else FileStatus(f"{IMAGE_DIRS[0]}/*.jpg", MISSING)
    )
    return [*leaf.check_layout(root, "celeba"), images]


SOURCE = Source("CelebA (LEAF JSON + images)", HOW, check, urls=("http://mmlab.ie.cuhk.edu.hk/projects/CelebA.html",))


def file_names(dataset: str):
    """A LEAF ``convert``: each user's x must be a list of image file names."""

    def convert(x: list, path: Path, user: str) -> list:
        if not all(isinstance(name, str) and name for name in x):
            raise corrupt_error(dataset, path, f"user {user!r}: x must list image file names", HOW)
        return list(x)

    return convert


def read_image(dataset: str, path: Path) -> np.ndarray:
    """One image as float32 [3, 84, 84] in [0, 1]; DataCorruptError if it cannot be decoded."""
    try:
        with Image.open(path) as img:
            rgb = img.convert("RGB").resize((IMAGE_SIZE, IMAGE_SIZE), Image.Resampling.BILINEAR)
    except (UnidentifiedImageError, OSError, ValueError) as err:
        raise corrupt_error(dataset, path, f"cannot decode the image ({err})", HOW) from None
    return np.asarray(rgb, dtype=np.float32).transpose(2, 0, 1) / 255.0


def image_loader(dataset: str, root: Path):
    """``stack`` for LeafPool.take: checks every file exists first (one error listing the missing)."""
    folder = image_dir(root)

    def stack(names: list[str]) -> np.ndarray:
        missing = [n for n in names if not (folder / n).is_file()]
        if missing:
            shown = [str((folder / n).relative_to(root)) for n in missing[:5]]
            more = [f"... and {len(missing) - 5} more"] if len(missing) > 5 else []
            raise missing_error(dataset, root, shown + more, HOW)
        return np.stack([read_image(dataset, folder / n) for n in names])

    return stack


@register_dataset("celeba", model="cnn_celeba", source=SOURCE)
def celeba(
    rng: np.random.Generator, *, data_dir: str | None = None, num_clients: int = 515
) -> FederatedDataset:
    """CelebA 'Smiling', natural partition: ``num_clients`` celebrities sampled uniformly (Ditto: 515)."""
    root = data_root(data_dir)
    require("celeba", SOURCE, root)
    files = leaf.leaf_files(root, "celeba")
    pool = leaf.load_pool("celeba", files, HOW, file_names("celeba"), leaf.int_labels("celeba", HOW, 2))
    token, part_rng, split_rng = seed_streams(rng)
    parts = partition_pool(
        "celeba", pool.ids, num_clients, "natural", {}, token=token, rng=part_rng, root=root, files=files
    )
    stack = image_loader("celeba", root)
    source = f"celeba|files={size_digest(files, root)}|natural|size={IMAGE_SIZE}"
    meta = {"partition": "natural", "celebrities_in_files": len(pool.users)}
    return assemble(
        "celeba",
        parts,
        lambda order: torch.from_numpy(pool.take(order, stack)),
        pool.labels,
        split_rng,
        num_classes=2,
        source=source,
        meta=meta,
    )
