"""The tables' declarations, data beside the published numbers (``paper_tables/tables.yaml``): which rows and
columns each table shows, how labels are printed, and which of the papers' method ids name one of our rows."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import yaml


def declarations_file() -> Path:
    return Path(str(resources.files("fedarena.leaderboards") / "paper_tables" / "tables.yaml"))


DECLARED: dict = yaml.safe_load(declarations_file().read_text(encoding="utf-8"))
TABLES: list[dict] = DECLARED["tables"]
DISPLAY: dict[str, dict[str, str]] = DECLARED["display"]  # key -> label -> printed text (a1 -> A1)
METHOD_ALIASES: dict[str, str] = DECLARED["method_aliases"]  # a paper's method id -> our row's label
