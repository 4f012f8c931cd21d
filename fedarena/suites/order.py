"""The order labels are shown in: the order the registered suites list them.

Each suite lists its methods, its attacks, its privacy levels and deployments (if any) and, per scale, its datasets; a table's rows, columns and blocks
follow those lists, so a component added through a suite is shown where its suite puts it, with no list to
edit elsewhere. The suites' lists are merged into one order per axis (``merged_order``; suites in
registration order: the shipped ones by name, then added ones): every suite's order is kept where the
suites agree, which the shipped suites do (a test checks it). Datasets are read paper scale first, then
quick and smoke.
"""

from __future__ import annotations

import functools
from pathlib import Path

from fedarena.suites import SUITES, suite_data

AXES = {"method_label": "methods", "attack_label": "attacks", "dataset_label": "datasets", "privacy_label": "privacy",
        "deployment_label": "deployment"}
SCALE_ORDER = ("paper", "quick", "smoke")


def listed_labels(data: dict, axis: str) -> list[str]:
    """The labels one suite's YAML lists on an axis (``methods``, ``attacks``, ``privacy``, ``deployment`` or
    ``datasets``), in order."""
    if axis == "datasets":
        scales = _mapping(data.get("scales"))
        entries = [e for s in sorted(scales, key=_scale_rank) for e in _listed(_mapping(scales[s]).get("datasets"))]
    else:
        entries = _listed(data.get(axis))
    # a malformed entry names no label here: the bench's parser reports it (fedarena.suites.parse)
    labels = [e["label"] for e in entries if isinstance(e, dict) and isinstance(e.get("label"), str)]
    return list(dict.fromkeys(labels))  # a dataset of several scales: its first place


def _mapping(value) -> dict:
    return value if isinstance(value, dict) else {}


def _listed(value) -> list:
    return value if isinstance(value, list) else []


def _scale_rank(name: str) -> int:
    return SCALE_ORDER.index(name) if name in SCALE_ORDER else len(SCALE_ORDER)


def merged_order(lists: list[list[str]]) -> tuple[str, ...]:
    """One order of the labels of several lists that keeps every list's order where the lists agree (a
    topological order of "listed right before"). Labels the lists leave unordered follow ``_preference``;
    where the lists disagree (a cycle), the preferred label goes first."""
    preference = _preference(lists)
    later: dict[str, set[str]] = {name: set() for name in preference}
    for labels in lists:
        for first, second in zip(labels[:-1], labels[1:], strict=True):
            later[first].add(second)
    waiting = {name: 0 for name in preference}
    for name in preference:
        for other in later[name] - {name}:
            waiting[other] += 1
    order: list[str] = []
    left = list(preference)
    while left:
        pick = next((name for name in left if waiting[name] == 0), left[0])
        order.append(pick)
        left.remove(pick)
        for other in later[pick] - {pick}:
            waiting[other] -= 1
    return tuple(order)


def _preference(lists: list[list[str]]) -> list[str]:
    """The lists read in turn: a new label goes right after the nearest label its list names before it, or,
    where there is none, right before the nearest its list names after it; a list sharing no label with the
    earlier ones goes at the end."""
    order: list[str] = []
    for labels in lists:
        for i, name in enumerate(labels):
            if name not in order:
                order.insert(_place(order, labels[:i][::-1], labels[i + 1:]), name)
    return order


def _place(order: list[str], earlier: list[str], later: list[str]) -> int:
    before = next((label for label in earlier if label in order), None)
    if before is not None:
        return order.index(before) + 1
    after = next((label for label in later if label in order), None)
    return order.index(after) if after is not None else len(order)


@functools.cache
def _order_of(files: tuple[tuple[Path, int], ...]) -> dict[str, tuple[str, ...]]:
    suites = [_mapping(suite_data(path)) for path, _ in files]
    return {key: merged_order([listed_labels(data, axis) for data in suites]) for key, axis in AXES.items()}


def label_order(key: str) -> tuple[str, ...]:
    """The labels of a position column (``method_label``, ``attack_label``, ``dataset_label``, ``privacy_label``,
    ``deployment_label``) in the order the registered suites list them (empty for other keys)."""
    if key not in AXES:
        return ()
    paths = [SUITES.get(name) for name in SUITES.registered()]
    files = tuple((path, path.stat().st_mtime_ns) for path in paths)  # an edited file is read again
    return _order_of(files)[key]
