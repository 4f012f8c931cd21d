"""docs/fidelity.md says, per suite, which reading each component runs: its "What each suite runs" table is
checked here against the expanded suite files, so the docs cannot drift from the suites."""

import functools
from pathlib import Path

import pytest
import yaml

from fedarena.suites.grid import expand
from fedarena.suites.parse import load_suite

DOCS = Path(__file__).resolve().parents[1] / "docs"


def suite_table() -> list[tuple[str, str, str, str]]:
    """(suite, scale, trials, setting) of every row of the section's table."""
    text = (DOCS / "fidelity.md").read_text().split("## What each suite runs", 1)[1]
    rows = []
    for line in text.splitlines():
        cells = [c.strip().replace("\0", "|") for c in line.replace("\\|", "\0").split("|")[1:-1]]
        if len(cells) == 4 and cells[0] not in ("suite", "---"):
            rows.append(tuple(cells))
    return rows


@functools.cache
def flat_trials(suite: str, scale: str) -> list[dict]:
    return [t.config.flat() for t in expand(load_suite(suite), scale)]


def parse_filter(text: str) -> dict[str, list]:
    """'a.b=x|y, c=z' -> {'a.b': [x, y], 'c': [z]} (values read as YAML)."""
    pairs = (part.split("=", 1) for part in text.split(", "))
    return {key.strip(): [yaml.safe_load(v) for v in values.split("|")] for key, values in pairs}


ROWS = suite_table()


def test_the_table_is_there():
    assert len(ROWS) >= 20


@pytest.mark.parametrize("suite,scale,trials,setting", ROWS, ids=[" ".join(r) for r in ROWS])
def test_each_line_of_the_docs_table_holds_for_the_suite(suite, scale, trials, setting):
    # Prepare
    wanted = parse_filter(trials)
    [(key, [value])] = parse_filter(setting).items()
    # Execute
    chosen = [cfg for cfg in flat_trials(suite, scale) if all(cfg.get(k) in vs for k, vs in wanted.items())]
    # Assert
    assert chosen, f"{suite}/{scale}: no trial has {trials}"
    wrong = {str(cfg.get(key)) for cfg in chosen if cfg.get(key) != value}
    assert not wrong, f"{suite}/{scale} {trials}: {key} is {sorted(wrong)}, the docs say {value!r}"

