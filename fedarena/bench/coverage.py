"""Which published cells the shipped suites produce: per paper table, its cells and how many of them some
suite's paper scale runs (``fedarena bench list``).

A suite reproduces the tables its ``reproduces`` field lists ({ditto: [1, 7, 8, 9, 10, 11, 12]}, {fedtilt:
[2, 3]}): the same method label means what those tables mean by it (Table 1's "ditto" is dynamic
lambda, Table 6's is the best fixed lambda). Its paper-scale grid, as table cells (dataset label, method
row, attack, level, the dataset run), goes through the leaderboards' reproduction view
(``leaderboards.paper.reproduction``) against those tables: a published cell counts as produced where
that view would show our number beside the paper's once the suite's runs are in the store.
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from fedarena.errors import ConfigError
from fedarena.leaderboards.paper import KEYS, load_paper_tables, reproduction
from fedarena.suites import SUITES
from fedarena.suites.grid import combinations
from fedarena.suites.parse import load_suite
from fedarena.suites.spec import Suite

PLACEHOLDER_METRICS = ("acc_pooled", "acc_std", "class_std_mean", "class_std_std")
COLUMNS = ["paper", "table", "cells", "produced", "suites"]


def grid_cells(suite: Suite, scale: str = "paper") -> pd.DataFrame:
    """The table cells of a scale's grid, with the dataset each runs and placeholder metric values (the
    shape of the leaderboards' aggregated cells)."""
    rows = {(c.dataset.label, c.method.row, c.attack.label, round(c.level, 6), c.dataset.patch["dataset"]["name"])
            for c in combinations(suite, suite.scales[scale])}
    cells = pd.DataFrame(sorted(rows), columns=[*KEYS, "dataset_names"])
    seeds = len(suite.scales[scale].seeds)
    return cells.assign(n_seeds=seeds, mixed=False, note="", **dict.fromkeys(PLACEHOLDER_METRICS, 0.0))


def _by_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (paper, table, cell) from rows listing their tables ("6, 8"); FedTilt cells have no level."""
    out = frame.assign(table=frame["tables"].astype(str).str.split(", ")).explode("table")
    out["table"] = out["table"].astype(int)
    out.loc[out["paper"] != "ditto", "level"] = float("nan")
    return out[["paper", "table", *KEYS]].drop_duplicates()


def produced_cells(suite: Suite, paper: pd.DataFrame) -> pd.DataFrame:
    """(paper, table, cell) rows of the tables ``suite`` references that its paper scale produces."""
    wanted = suite.reproduces
    if not wanted:
        return pd.DataFrame(columns=["paper", "table", *KEYS])
    matched = _by_table(reproduction(grid_cells(suite), paper))
    keep = [table in wanted.get(name, ()) for name, table in zip(matched["paper"], matched["table"], strict=True)]
    return matched[keep]


def coverage(suites: Iterable[Suite], paper: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per paper table: its published cells, how many the suites produce, and which suites produce them."""
    paper = load_paper_tables() if paper is None else paper
    published = _by_table(paper)
    produced = [produced_cells(s, paper).assign(suite=s.name) for s in suites]
    found = pd.concat([published.iloc[0:0].assign(suite=""), *produced], ignore_index=True)
    keys = ["paper", "table", *KEYS]
    hits = published.merge(found, on=keys, how="left")
    rows = []
    for (name, table), part in hits.groupby(["paper", "table"], sort=True):
        cells = part.drop_duplicates(keys)
        done = part.dropna(subset=["suite"])
        rows.append([name, int(table), len(cells), len(done.drop_duplicates(keys)), ", ".join(sorted(set(done["suite"])))])
    return pd.DataFrame(rows, columns=COLUMNS)


def gaps(suites: Iterable[Suite], paper: pd.DataFrame | None = None) -> pd.DataFrame:
    """The published cells no suite produces, one row each (paper, table, cell)."""
    paper = load_paper_tables() if paper is None else paper
    published = _by_table(paper)
    found = pd.concat([published.iloc[0:0], *(produced_cells(s, paper) for s in suites)], ignore_index=True)
    merged = published.merge(found.drop_duplicates(), how="left", indicator=True)
    return merged[merged["_merge"] == "left_only"].drop(columns="_merge").reset_index(drop=True)


def shipped_suites() -> list[Suite]:
    """The shipped suites that load (``bench list`` reports the others)."""
    suites = []
    for name in SUITES.names():
        try:
            suites.append(load_suite(name, check_names=False))
        except ConfigError:
            continue
    return suites


def coverage_lines(table: pd.DataFrame) -> list[str]:
    """``coverage`` as the lines ``fedarena bench list`` prints."""
    lines = ["published cells per paper table, and how many the suites' paper scales produce:",
             f"{'table':<16}{'cells':>7}{'made':>7}  suites"]
    for row in table.itertuples(index=False):
        lines.append(f"{f'{row.paper} {row.table}':<16}{row.cells:>7}{row.produced:>7}  {row.suites or '-'}")
    lines.append(f"{'all':<16}{table['cells'].sum():>7}{table['produced'].sum():>7}")
    return lines
