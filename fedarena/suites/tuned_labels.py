"""A tuned row's label: ``<label>+tuned<budget>`` (``krum+tuned8``), a row of its own beside the default one.

Written by ``suites.tuned`` (a suite run with ``--tuned``) and read by the tables and the cards; runs a release
before it recorded under the default row's label are relabelled on read (``with_tuned_labels``)."""

from __future__ import annotations

from typing import Any

import pandas as pd

TUNED = "+tuned"  # what a tuned row's label adds to its default row's, before the budget


def tuned_label(label: str, budget: Any) -> str:
    return f"{label}{TUNED}{budget}"


def tuned_under_default_label(label: Any, tuned_rows: Any) -> bool:
    """Whether a run labelled ``label`` with the ``tuned_rows`` tag is a tuned row's run that a release before tuned
    rows had labels of their own recorded under the default row's label."""
    return (isinstance(label, str) and isinstance(tuned_rows, str) and TUNED not in label
            and label in tuned_rows.split(","))


def with_tuned_labels(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs with a tuned row's label where they recorded the default row's (a run whose ``tuned_rows`` tag names
    its own label without ``+tuned``): so that they never replace the default row's cells."""
    if not {"method_label", "tuned_rows", "tuned_budget"} <= set(runs.columns):
        return runs
    old = pd.Series([tuned_under_default_label(label, rows) for label, rows in
                     zip(runs["method_label"], runs["tuned_rows"], strict=True)], index=runs.index, dtype=bool)
    if not old.any():
        return runs
    out = runs.copy()
    out.loc[old, "method_label"] = [tuned_label(label, budget) for label, budget in
                                    zip(out.loc[old, "method_label"], out.loc[old, "tuned_budget"], strict=True)]
    out.loc[old, "tuned_rows"] = [",".join(r if TUNED in r else tuned_label(r, budget) for r in rows.split(","))
                                  for rows, budget in zip(runs.loc[old, "tuned_rows"], out.loc[old, "tuned_budget"],
                                                          strict=True)]
    return out
