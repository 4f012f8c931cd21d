"""A format-neutral table model and the one generic pivot every paper table is built with.

A :class:`Table` is a list of blocks (the papers stack one block per dataset, each with its own
header: FEMNIST's A3 levels differ from Fashion-MNIST's). A block has an optional group header row
(e.g. "A1" spanning 20% / 50% / 80%), a header row, and rows of text cells, some in bold. Renderers
(``render.py``) turn it into LaTeX, Markdown or HTML; the tidy numbers behind it go to CSV. Where the
frame gives each score's spread over seeds, every column's bold entry is tested against its runner-up
(``significance``) and marked when the ordering is not significant.

A privacy label (``eps10``) names a budget, which means nothing without its delta: wherever a block shows one
(a column or its title), the label carries the delta its runs' epsilon is at, ``eps10 (δ = 1e-05)``
(``privacy_deltas``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from fedarena.leaderboards.declared import DISPLAY
from fedarena.leaderboards.significance import NOT_SIGNIFICANT, Scored, Verdict, column_verdict
from fedarena.suites.order import AXES as ORDERED
from fedarena.suites.order import label_order

MISSING = "–"

# The attack label of worst-case cells (``worst.py``): no suite label contains a space; its columns come last.
WORST = "worst case"


@dataclass(frozen=True)
class Cell:
    text: str
    bold: bool = False


@dataclass
class Block:
    """``header`` names every column (``stub`` label columns first); ``groups`` spans the value columns.

    ``title`` (e.g. the dataset) sits in the top-left corner, as in the papers' tables. ``verdicts``: the
    significance of each column's bold entry, by column label (e.g. "A1 50%").
    """

    header: list[str]
    rows: list[list[Cell]]
    groups: list[tuple[str, int]] = field(default_factory=list)
    stub: int = 1
    title: str = ""
    verdicts: list[tuple[str, Verdict]] = field(default_factory=list)


@dataclass
class Table:
    name: str
    title: str
    blocks: list[Block]
    footnotes: list[str]
    tidy: pd.DataFrame


def sort_key(key: str, value) -> tuple:
    """Sort key of one value of a position column: labels in the order the suites list them
    (``fedarena.suites.order``), then the others alphabetically; numbers (levels) by value."""
    if key == "attack_label" and value == WORST:
        return (len(label_order(key)) + 1, 0.0, "")
    if key in ORDERED:
        order = label_order(key)
        name = str(value)
        return (order.index(name), 0.0, name) if name in order else (len(order), 0.0, name)
    if isinstance(value, (int, float, np.number)):
        return (0, float(value), "")
    return (1, 0.0, str(value))


def label(key: str, value) -> str:
    """Display text of one value: as ``paper_tables/tables.yaml`` prints it (Ditto's threats as A1..A3), levels as
    percentages."""
    if key in DISPLAY:
        return DISPLAY[key].get(str(value), str(value))
    if key == "level":
        return f"{100 * float(value):g}%"
    return str(value)


def setting_label(attack: str, level: float) -> str:
    """'clean', the attack with its level ('A1 50%'), or the worst case at a level ('worst@20%')."""
    if attack == WORST:
        return f"worst@{label('level', level)}"
    text = label("attack_label", attack)
    return text if attack == "clean" else f"{text} {label('level', level)}"


def delta_text(deltas) -> str:
    """'δ = 1e-05' for the deltas of some runs (two significant digits; 'δ = 1e-06–1e-05' where they differ),
    '' where none is finite."""
    values = sorted({float(f"{d:.2g}") for d in pd.to_numeric(pd.Series(list(deltas), dtype=object),
                                                              errors="coerce") if np.isfinite(d)})
    if not values:
        return ""
    return f"δ = {values[0]:.2g}" if len(values) == 1 else f"δ = {values[0]:.2g}–{values[-1]:.2g}"


def privacy_deltas(part: pd.DataFrame) -> dict[str, str]:
    """privacy label -> the delta text of its cells in ``part`` (labels whose runs report no delta, e.g. none,
    have none)."""
    if "privacy_label" not in part or "delta" not in part:
        return {}
    out = {}
    for privacy, rows in part.groupby("privacy_label", sort=False):
        text = delta_text(rows["delta"])
        if text:
            out[str(privacy)] = text
    return out


def privacy_text(privacy, deltas: dict[str, str]) -> str:
    """A privacy label as shown: with its delta where its runs report one (``eps10 (δ = 1e-05)``)."""
    text = label("privacy_label", privacy)
    return f"{text} ({deltas[str(privacy)]})" if str(privacy) in deltas else text


def column_labels(keys: tuple[str, ...], values: tuple, deltas: dict[str, str] | None = None) -> tuple[str, str]:
    """(group, sub) header labels of one column; a clean column has no level, a worst-case column's group
    is 'worst@20%' (no sub label); a privacy label carries its delta (``deltas``, ``privacy_deltas``)."""
    raw = dict(zip(keys, values, strict=True))
    texts = {k: label(k, v) for k, v in raw.items()}
    if "privacy_label" in raw:
        texts["privacy_label"] = privacy_text(raw["privacy_label"], deltas or {})
    if texts.get("attack_label") == "clean" and "level" in texts:
        texts["level"] = ""
    if raw.get("attack_label") == WORST and "level" in raw:
        texts["attack_label"], texts["level"] = setting_label(WORST, raw["level"]), ""
    parts = [texts[k] for k in keys]
    return " ".join(p for p in parts[:-1] if p), parts[-1]


def pivot(
    frame: pd.DataFrame,
    *,
    row_key: str,
    column_by: tuple[str, ...],
    block_by: tuple[str, ...] = (),
    row_order: tuple[str, ...] | None = None,
    stub_label: str = "method",
    column_order: dict | None = None,
) -> list[tuple[tuple, Block]]:
    """Blocks of a table from a frame with the key columns plus ``text`` and ``score``.

    In every column of a block, the cells with the highest finite ``score`` are bold (ties: all of
    them). With ``score_sd`` and ``n_seeds`` columns (the score's std over seeds, the seed count) the
    bold entry is tested against the runner-up; a tested ordering that is not significant appends
    ``NOT_SIGNIFICANT`` to the bold text. Rows are ``row_order`` (or every row key, sorted) restricted to rows with a cell in the
    block; absent cells read ``MISSING``. ``column_order`` maps a value to its rank for keys whose
    order is the spec's (e.g. metric columns).
    """
    blocks = []
    groups = frame.groupby(list(block_by), sort=False) if block_by else [((), frame)]
    for key, part in groups:
        key = key if isinstance(key, tuple) else (key,)
        blocks.append((key, _block(part, row_key, column_by, row_order, stub_label, column_order or {})))
    return sorted(blocks, key=lambda kb: tuple(sort_key(k, v) for k, v in zip(block_by, kb[0], strict=True)))


def _block(part, row_key, column_by, row_order, stub_label, column_order) -> Block:
    def col_key(col):
        return tuple(
            (column_order[v], 0.0, "") if v in column_order else sort_key(k, v)
            for k, v in zip(column_by, col, strict=True)
        )

    columns = sorted({tuple(c) for c in part[list(column_by)].itertuples(index=False)}, key=col_key)
    present = set(part[row_key])
    if row_order is None:
        rows = sorted(present, key=lambda r: sort_key(row_key, r))
    else:
        rows = [r for r in row_order if r in present]
    by_pos = {(getattr(r, row_key), tuple(getattr(r, k) for k in column_by)): r for r in part.itertuples()}
    bold = _bold(by_pos)
    verdicts = _verdicts(by_pos, rows, columns) if "score_sd" in part else {}
    body = []
    for row in rows:
        cells = [Cell(label(row_key, row))]
        for col in columns:
            hit = by_pos.get((row, col))
            text = hit.text if hit is not None else MISSING
            doubtful = (row, col) in bold and col in verdicts and verdicts[col].tested and not verdicts[col].significant
            cells.append(Cell(text + (NOT_SIGNIFICANT if doubtful else ""), (row, col) in bold))
        body.append(cells)
    deltas = privacy_deltas(part) if "privacy_label" in column_by else {}
    heads = [column_labels(column_by, c, deltas) for c in columns]
    named = [(" ".join(p for p in heads[i] if p), verdicts[c]) for i, c in enumerate(columns) if c in verdicts]
    return Block(header=[stub_label] + [s for _, s in heads], rows=body, groups=_spans([g for g, _ in heads]),
                 verdicts=named)


def _verdicts(by_pos: dict, rows: list, columns: list) -> dict[tuple, Verdict]:
    """The significance verdict of every column with at least two scored entries (entries in row order,
    so a tie names the first row shown as the best)."""
    out = {}
    for col in columns:
        hits = [(row, by_pos[(row, col)]) for row in rows if (row, col) in by_pos]
        verdict = column_verdict([Scored(str(row), r.score, r.score_sd, int(r.n_seeds)) for row, r in hits])
        if verdict is not None:
            out[col] = verdict
    return out


def _bold(by_pos: dict) -> set:
    """Positions with the highest finite score of their column."""
    best: dict[tuple, float] = {}
    for (_, col), r in by_pos.items():
        if np.isfinite(r.score):
            best[col] = max(best.get(col, -np.inf), r.score)
    return {pos for pos, r in by_pos.items() if np.isfinite(r.score) and r.score == best[pos[1]]}


def _spans(labels: list[str]) -> list[tuple[str, int]]:
    """Runs of equal consecutive group labels; none when every label is empty."""
    if not any(labels):
        return []
    spans: list[tuple[str, int]] = []
    for text in labels:
        if spans and spans[-1][0] == text:
            spans[-1] = (text, spans[-1][1] + 1)
        else:
            spans.append((text, 1))
    return spans
