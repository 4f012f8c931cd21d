"""What a table row's server rule needs, read from its runs' params and today's registries: whether the method
aggregates at all (a method that does not shares nothing: epsilon 0) and whether its rule needs each device's
update, which secure aggregation hides (``AggregatorEntry.needs_each_update``), as the runs recorded it
(``privacy.compatibility``: a plugin's row is marked without the plugin) or else from today's registries. Unknown (a
plugin this process did not load on runs recorded without the tag, or runs without params): None.
"""

from __future__ import annotations

import pandas as pd

from fedarena.methods.aggregators.base import AGGREGATORS
from fedarena.methods.base import METHODS
from fedarena.privacy.compatibility import SECURE_TAG, read_tag
from fedarena.tracking.reading import config_of

RULE_FACTS = ("uses_aggregator", "needs_each_update")  # the columns rule_facts adds to a cell
MARK = "§"
EXPLAINED = (f"{MARK}: the row's server rule needs each device's update, which secure aggregation hides: it cannot "
             f"run under privacy.secure_aggregation.")


def rule_facts(group: pd.DataFrame) -> dict[str, bool | None]:
    """``uses_aggregator`` and ``needs_each_update`` of one cell's runs (its first run's config)."""
    first = group.iloc[0].to_dict()
    config = config_of(first)
    method = (config.get("method") or {}).get("name")
    recorded = read_tag(first.get(SECURE_TAG))
    if recorded is not None and method not in METHODS:  # a plugin's method: only the tag tells
        return {"uses_aggregator": None, "needs_each_update": not recorded}
    if method not in METHODS:
        return {"uses_aggregator": None, "needs_each_update": None}
    if not METHODS.get(method).uses_aggregator:
        return {"uses_aggregator": False, "needs_each_update": False}
    section = config.get("aggregator") or {}
    name = section.get("name", "mean")
    if name not in AGGREGATORS:
        return {"uses_aggregator": True, "needs_each_update": None if recorded is None else not recorded}
    params = {k: v for k, v in section.items() if k not in ("name", "pre", "f")}
    needs = bool(section.get("pre")) or AGGREGATORS.get(name).needs_each_update(**params)
    return {"uses_aggregator": True, "needs_each_update": needs}


def marked_rows(cells: pd.DataFrame) -> set[str]:
    """The method labels whose server rule needs each update."""
    if "needs_each_update" not in cells:
        return set()
    return set(cells.loc[cells["needs_each_update"] == True, "method_label"].astype(str))  # noqa: E712
