"""LEAF's JSON format (Caldas et al. 2018), shared by FEMNIST and CelebA.

Each file is ``{"users": [u, ...], "num_samples": [n_u, ...], "user_data": {u: {"x": [...], "y": [...]}}}``.
LEAF's ``preprocess.sh`` writes ``data/all_data/*.json`` (every user), and, with ``-t sample``,
``data/train/*.json`` and ``data/test/*.json`` (each user's samples split in two). Layout read here,
under ``<data dir>/<name>/``: ``all_data/*.json`` when that folder holds JSON files, otherwise every
file of ``train/`` and ``test/`` together (a user's samples from both are pooled, train first; the
benchmark makes its own 72/8/20 split per device).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedarena.datasets.files.sources import PRESENT, FileStatus, check_glob
from fedarena.datasets.files.storage import corrupt_error

ALL, TRAIN, TEST = "all_data", "train", "test"


def leaf_files(root: Path, name: str) -> list[Path]:
    """The JSON files to read (see the module docstring), or [] if the layout is incomplete."""
    base = root / name
    every = sorted((base / ALL).glob("*.json")) if (base / ALL).is_dir() else []
    if every:
        return every
    train, test = (sorted((base / d).glob("*.json")) if (base / d).is_dir() else [] for d in (TRAIN, TEST))
    return [*train, *test] if train and test else []


def check_layout(root: Path, name: str) -> list[FileStatus]:
    """One row for all_data/ when it is used, else one row each for train/ and test/."""
    rows = [check_glob(root, f"{name}/{ALL}", "*.json")]
    if rows[0].status == PRESENT:
        return rows
    return [check_glob(root, f"{name}/{d}", "*.json") for d in (TRAIN, TEST)]


def read_json(dataset: str, path: Path, how: str) -> dict:
    """One LEAF file, checked: the three keys, every listed user present, x and y of equal length."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise corrupt_error(dataset, path, f"invalid JSON ({err})", how) from None
    if (
        not isinstance(doc, dict)
        or not isinstance(doc.get("users"), list)
        or not isinstance(doc.get("user_data"), dict)
    ):
        raise corrupt_error(
            dataset, path, "not a LEAF file: needs 'users' (list) and 'user_data' (object)", how
        )
    counts = doc.get("num_samples", [None] * len(doc["users"]))
    for user, count in zip(doc["users"], counts, strict=False):
        data = doc["user_data"].get(user)
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("x"), list)
            or not isinstance(data.get("y"), list)
        ):
            raise corrupt_error(dataset, path, f"user {user!r} lacks x and y lists in user_data", how)
        if len(data["x"]) != len(data["y"]) or count not in (None, len(data["y"])):
            raise corrupt_error(
                dataset,
                path,
                f"user {user!r}: {len(data['x'])} x, {len(data['y'])} y, num_samples says {count}",
                how,
            )
    return doc


@dataclass(frozen=True)
class LeafPool:
    """Every user's samples, kept per user (no giant copy): ``ids[i]`` is sample i's user index."""

    users: list[str]
    x: list  # per user: whatever ``convert`` returned (an array, or a list of file names)
    labels: np.ndarray  # int64, all samples, users in order
    ids: np.ndarray  # int64 user index of each sample
    files: list[Path]

    def take(self, order: np.ndarray, stack: Callable[[list], np.ndarray]) -> np.ndarray:
        """Samples ``order`` (pool indices) in that order; ``stack`` joins per-user selections."""
        starts = np.concatenate([[0], np.cumsum(np.bincount(self.ids, minlength=len(self.users)))])
        by_user = np.argsort(self.ids[order], kind="stable")  # positions in ``order``, grouped by user
        users, counts = np.unique(self.ids[order][by_user], return_counts=True)
        pieces = []
        for u, at in zip(users, np.split(by_user, np.cumsum(counts)[:-1]), strict=True):
            local = order[at] - starts[u]
            x = self.x[u]
            pieces.append(stack([x[i] for i in local]) if isinstance(x, list) else x[local])
        inverse = np.empty_like(by_user)
        inverse[by_user] = np.arange(len(by_user))
        return np.concatenate(pieces)[inverse]


def load_pool(dataset: str, files: list[Path], how: str, convert: Callable, labels: Callable) -> LeafPool:
    """Read the files, merge each user's samples across files (in file order) and sort users by name.

    ``convert(x_list, path, user)`` and ``labels(y_list, path, user)`` check and convert one user's data.
    """
    merged: dict[str, list[tuple]] = {}
    for path in files:
        doc = read_json(dataset, path, how)
        for user in doc["users"]:
            data = doc["user_data"][user]
            merged.setdefault(user, []).append(
                (convert(data["x"], path, user), labels(data["y"], path, user))
            )
    users = sorted(merged)
    xs = [_join([x for x, _ in merged[u]]) for u in users]
    ys = [np.concatenate([y for _, y in merged[u]]) for u in users]
    ids = np.repeat(np.arange(len(users)), [len(y) for y in ys])
    return LeafPool(
        users, xs, np.concatenate(ys).astype(np.int64) if ys else np.zeros(0, np.int64), ids, files
    )


def _join(chunks: list):
    return sum(chunks, []) if isinstance(chunks[0], list) else np.concatenate(chunks)


def int_labels(dataset: str, how: str, num_classes: int) -> Callable:
    """A ``labels`` checker: integral numbers in [0, num_classes) (LEAF may write 1.0 for 1)."""

    def check(y: list, path: Path, user: str) -> np.ndarray:
        try:
            arr = np.asarray(y, dtype=np.float64)
        except (TypeError, ValueError):
            raise corrupt_error(dataset, path, f"user {user!r}: labels are not numbers", how) from None
        if arr.ndim != 1 or np.any(arr != np.round(arr)) or np.any((arr < 0) | (arr >= num_classes)):
            raise corrupt_error(
                dataset, path, f"user {user!r}: labels must be integers in [0, {num_classes})", how
            )
        return arr.astype(np.int64)

    return check
