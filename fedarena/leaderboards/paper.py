"""The published numbers (``paper_tables/*.csv``, shipped with the package) and the reproduction view.

Ditto's tables give benign test accuracy "mean (std)" as fractions; their ``acc_mean`` is our
``acc_pooled`` and ``acc_std`` our ``acc_std``. FedTilt's give percentages: ``test_acc`` is our
``acc_pooled``, ``client_fairness_sigma`` our ``acc_std``, ``client_data_fairness_mu_sigma`` and
``..._sigma_sigma`` our ``class_std_mean`` and ``class_std_std``; FedTilt rows have no level (one
corruption level per table) and match our runs of that attack at any level.

The same cell printed in several tables is one row listing those tables; where tables disagree
(see ``paper_tables/README.md``) each printed value gets its own row.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pandas as pd

from fedarena.leaderboards.declared import METHOD_ALIASES
from fedarena.leaderboards.tables import Block, Cell, Table, setting_label, sort_key
from fedarena.suites.dataset_labels import runs_the_named_dataset
from fedarena.suites.published import paper_dir

PAPER_METRICS = {
    "ditto": {"acc_mean": "acc_pooled", "acc_std": "acc_std"},
    "fedtilt": {
        "test_acc": "acc_pooled",
        "client_fairness_sigma": "acc_std",
        "client_data_fairness_mu_sigma": "class_std_mean",
        "client_data_fairness_sigma_sigma": "class_std_std",
    },
}
UNIT_SCALE = {"ditto": 1.0, "fedtilt": 100.0}  # our fractions -> the paper's unit
DIGITS = {"ditto": 3, "fedtilt": 2}
KEYS = ("dataset_label", "method_label", "attack_label", "level")
COLUMNS = ["paper", "tables", *KEYS, "metric", "paper_value", "ours", "diff", "n_seeds", "mixed", "note"]


def load_paper_tables(directory: Path | None = None) -> pd.DataFrame:
    """Every published number, long: one row per (paper, cell, metric) with the tables printing it."""
    rows = []
    for path in sorted((directory or paper_dir()).glob("*.csv")):
        raw = pd.read_csv(path)
        paper = str(raw["paper"].iloc[0])
        frame = raw.rename(columns={"dataset": "dataset_label", "method": "method_label"})
        frame["attack_label"] = frame.pop("attack" if paper == "ditto" else "setting")
        frame["level"] = frame["level"].astype(float).round(6) if "level" in frame else np.nan
        frame["method_label"] = frame["method_label"].replace(METHOD_ALIASES)
        for column, metric in PAPER_METRICS[paper].items():
            part = frame[[*KEYS, "table", "paper"]].assign(metric=metric, paper_value=frame[column])
            rows.append(part.dropna(subset=["paper_value"]))
    long = pd.concat(rows, ignore_index=True)
    group = ["paper", *KEYS, "metric", "paper_value"]
    tables = long.groupby(group, dropna=False, sort=False)["table"].agg(
        lambda t: ", ".join(map(str, sorted(set(t))))
    )
    return tables.rename("tables").reset_index()


@functools.cache
def paper_datasets() -> frozenset[str]:
    """The dataset ids of the published tables that ship (their ``dataset`` column)."""
    return frozenset(load_paper_tables()["dataset_label"])


def is_paper_dataset(label: str, name: str) -> bool:
    """Whether a run on registered dataset ``name`` is the paper's experiment for dataset ``label``
    (fmnist and its FedTilt partition fmnist_fedtilt are; digits is not, whatever its label)."""
    return label in paper_datasets() and runs_the_named_dataset(label, name)


def on_paper_datasets(cells: pd.DataFrame) -> pd.Series:
    """Cells whose runs all used the paper's dataset (cells that do not say which dataset are kept)."""
    names = cells["dataset_names"] if "dataset_names" in cells else pd.Series("", index=cells.index)
    return pd.Series([not n or all(is_paper_dataset(label, x) for x in n.split(","))
                      for label, n in zip(cells["dataset_label"], names.fillna(""), strict=True)], index=cells.index)


def reproduction(cells: pd.DataFrame, paper: pd.DataFrame | None = None) -> pd.DataFrame:
    """Our aggregated cells beside the paper's, for every cell both have; diff = ours - paper. Only cells
    run on a paper's dataset are compared (never digits, whatever a store's label says)."""
    paper = load_paper_tables() if paper is None else paper
    cells = cells[on_paper_datasets(cells)]
    parts = []
    for name, published in paper.groupby("paper"):
        on = list(KEYS) if name == "ditto" else list(KEYS[:3])
        for metric, rows in published.groupby("metric"):
            if metric not in cells:
                continue
            ours = cells[[*KEYS, "n_seeds", "mixed", "note", metric]].rename(columns={metric: "ours"})
            ours = ours[ours["mixed"] | np.isfinite(ours["ours"])]
            rows = rows.drop(columns="level") if name != "ditto" else rows
            merged = rows.merge(ours, on=on, how="inner")
            merged["ours"] = merged["ours"] * UNIT_SCALE[name]
            parts.append(merged)
    if not parts:
        return pd.DataFrame(columns=COLUMNS)
    out = pd.concat(parts, ignore_index=True)
    out["diff"] = out["ours"] - out["paper_value"]
    order = sorted(range(len(out)), key=lambda i: _row_key(out.iloc[i]))
    return out.iloc[order][COLUMNS].reset_index(drop=True)


def _row_key(row: pd.Series) -> tuple:
    return (row["paper"], *(sort_key(k, row[k]) for k in KEYS), row["metric"], str(row["tables"]))


def _number(value: float, digits: int, signed: bool = False) -> str:
    if not np.isfinite(value):
        return "–"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def _view_row(row) -> list[Cell]:
    digits = DIGITS[row.paper]
    setting = setting_label(row.attack_label, row.level)
    ours = "mixed" if row.mixed else _number(row.ours, digits)
    texts = [row.dataset_label, row.method_label, setting, row.metric, row.tables,
             _number(row.paper_value, digits), ours, _number(row.diff, digits, signed=True), str(row.n_seeds)]  # fmt: skip
    return [Cell(str(t)) for t in texts]


def reproduction_table(cells: pd.DataFrame, footnotes: list[str] | None = None, paper=None) -> Table | None:
    """The reproduction view as a table (one block per paper), or None when no cell matches."""
    view = reproduction(cells, paper)
    if view.empty:
        return None
    header = ["dataset", "method", "setting", "metric", "paper tables", "paper", "ours", "diff", "seeds"]
    blocks = []
    for name, part in view.groupby("paper", sort=True):
        rows = [_view_row(r) for r in part.itertuples(index=False)]
        blocks.append(Block(header=header, rows=rows, stub=4, title=f"{name} (unit: {_unit(name)})"))
    notes = [
        "diff = ours - paper, in the paper's unit; ours is the mean over the seeds of a cell.",
        "A cell printed differently by two paper tables has one row per printed value.",
        "Paper method ids read as ours: " + ", ".join(f"{k} = {v}" for k, v in METHOD_ALIASES.items()) + ".",
    ]
    notes += [f"mixed: {n}" for n in sorted(set(view.loc[view["mixed"], "note"]))]
    title = "Reproduction: our numbers beside the papers'"
    return Table("reproduction", title, blocks, notes + list(footnotes or []), view)


def _unit(paper: str) -> str:
    return "fraction" if UNIT_SCALE[paper] == 1.0 else "percent"
