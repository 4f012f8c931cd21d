"""The published results tables that ship (``fedarena/leaderboards/paper_tables/<paper>_table<n>.csv``, the papers'
numbers the reproduction tables compare with): which tables a suite may say it ``reproduces``."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def paper_dir() -> Path:
    return Path(str(resources.files("fedarena.leaderboards") / "paper_tables"))


def published_tables(directory: Path | None = None) -> dict[str, set[int]]:
    """The tables that ship, per paper id: ``<paper>_table<n>.csv`` -> {paper: {n, ...}}."""
    tables: dict[str, set[int]] = {}
    for path in (directory or paper_dir()).glob("*_table*.csv"):
        paper, number = path.stem.rsplit("_table", 1)
        tables.setdefault(paper, set()).add(int(number))
    return tables
