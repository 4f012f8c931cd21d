"""Methods whose hyperparameter is chosen per table column: a method entry's ``select``.

    - label: fedmgda_plus
      method: {name: global}
      aggregator: {name: fedmgda_plus}
      select: {by: val_acc_pooled, over: {aggregator.eps: [0.0, 0.1, 0.5, 1.0]}, scales: [paper]}

At the listed ``scales`` (default: every scale) the entry runs one variant per combination of the ``over``
values: labels ``fedmgda_plus_eps0``, ``fedmgda_plus_eps0.1``... (the run names), each tagged with its
group (``fedmgda_plus``), ``by`` and its values (``eps=0.1``). The leaderboards show one row
``fedmgda_plus`` holding, in each column (dataset, attack, level), the variant with the best mean ``by``
metric (``leaderboards.selection``). At other scales the entry runs once, as written (the component's
defaults). Rules (``exclude``, ``overrides``) and scale subsets name the entry's label: every variant.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

from fedarena.config import SCALES, SECTIONS
from fedarena.suites.spec import LABEL, PATCH_KEYS, SELECT_KEYS, Entry, Selection


def parse_select(r, value: Any, where: str) -> Selection:
    """``select: {by, over, scales}`` read strictly (``r`` is the parser's reader)."""
    data = r.mapping(value, where, SELECT_KEYS, required=("by", "over"))
    if not isinstance(data["by"], str) or not data["by"]:
        r.fail(f"{where}.by", f"expected a metric name such as val_acc_pooled, got {data['by']!r}")
    over = r.mapping(data["over"], f"{where}.over")
    if not over:
        r.fail(f"{where}.over", "empty: give at least one setting, e.g. {aggregator.eps: [0.0, 0.1]}")
    axes = tuple((_setting(r, key, f"{where}.over.{key}"), _values(r, values, f"{where}.over.{key}"))
                 for key, values in over.items())
    scales = data.get("scales", list(SCALES))
    for i, scale in enumerate(r.items(scales, f"{where}.scales")):
        if scale not in SCALES:
            r.fail(f"{where}.scales[{i}]", f"unknown scale {scale!r}; choose from {', '.join(SCALES)}")
    return Selection(data["by"], axes, tuple(scales))


def _setting(r, key: Any, where: str) -> str:
    """A dotted ``section.option`` (``aggregator.eps``) or a top-level setting (``lr``)."""
    parts = str(key).split(".")
    if len(parts) == 2 and parts[0] in SECTIONS and parts[1] and parts[1] != "name":
        return str(key)
    if len(parts) == 1 and key in PATCH_KEYS and key not in SECTIONS:
        return str(key)
    allowed = ", ".join(k for k in PATCH_KEYS if k not in SECTIONS)
    r.fail(where, f"a setting to select is section.option ({', '.join(SECTIONS)}) or one of {allowed}")


def _values(r, value: Any, where: str) -> tuple:
    items = r.items(value, where)
    for i, item in enumerate(items):
        if isinstance(item, (dict, list)) or item is None:
            r.fail(f"{where}[{i}]", f"a value to select among is a number, text or boolean, got {item!r}")
    if len({repr(v) for v in items}) != len(items):
        r.fail(where, f"duplicate values in {items}")
    return tuple(items)


def _text(value: Any) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


def with_setting(patch: dict, key: str, value: Any) -> dict:
    """A copy of ``patch`` with ``key`` (``section.option`` or a top-level setting) set to ``value``."""
    out = copy.deepcopy(patch)
    if "." in key:
        section, option = key.split(".")
        out.setdefault(section, {})[option] = value
    else:
        out[key] = value
    return out


def all_variants(entry: Entry) -> tuple[Entry, ...]:
    """Every variant of an entry with a ``select`` (the entry itself otherwise)."""
    if entry.select is None:
        return (entry,)
    keys = [key for key, _ in entry.select.over]
    variants = []
    for values in itertools.product(*(values for _, values in entry.select.over)):
        patch, names, texts = entry.patch, [], []
        for key, value in zip(keys, values, strict=True):
            patch = with_setting(patch, key, value)
            names.append(f"{key.split('.')[-1]}{_text(value)}")
            texts.append(f"{key.split('.')[-1]}={_text(value)}")
        variants.append(Entry("_".join([entry.label, *names]), patch, f"{entry.where}.select", select=entry.select,
                              group=entry.label, variant=", ".join(texts)))
    return tuple(variants)


def variants(entry: Entry, scale: str) -> tuple[Entry, ...]:
    """The entries a method entry runs at ``scale``: its variants where it selects, else itself."""
    if entry.select is None or scale not in entry.select.scales:
        return (entry,)
    return all_variants(entry)


def check_variant_labels(r, methods: tuple[Entry, ...]) -> None:
    """Variant labels are labels (letters, digits, _.+-) and clash with no other method label."""
    seen = {e.label for e in methods}
    for entry in methods:
        for variant in all_variants(entry) if entry.select else ():
            if not LABEL.match(variant.label):
                r.fail(f"{entry.where}.select.over", f"the variant label {variant.label!r} is not a label; "
                                                     "select among numbers or words")
            if variant.label in seen:
                r.fail(f"{entry.where}.select", f"the variant label {variant.label!r} is also another method's")
            seen.add(variant.label)
