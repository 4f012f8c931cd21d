"""``fedarena evaluate`` / ``fedarena.evaluate``: the standard threat battery run against one component (or every
built-in one) through the benchmark runner, and its robustness card.

The battery's trials are benchmark trials of the suite ``battery`` (Ray Tune, MLflow, resume, finished ones
skipped, other suites' identical trials reused), so the built-in rows' cards, computed once at a scale
(``--builtin``), are read from the store when a new component is evaluated: its rank costs nothing more.
The card is printed and written as ``card.md`` and ``card.json`` (``--builtin``: one ``<label>.md``/``.json``
per component); ``--claim FILE`` prints a paper's claims against the measured numbers.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

import pandas as pd

from fedarena.battery.card import Card, card_of, claimed_vs_measured, rank_cards, read_claim
from fedarena.battery.definition import (
    NAME,
    Battery,
    BatteryError,
    battery_suite,
    builtin_rows,
    load_battery,
    row_of,
)
from fedarena.bench.progress import Printer
from fedarena.bench.runner import BenchOptions, run_bench
from fedarena.bench.tuned import read_frozen, with_tuned
from fedarena.contracts import load_checked
from fedarena.leaderboards.build import prepare_runs
from fedarena.leaderboards.cells import aggregate
from fedarena.leaderboards.tables import Block, Cell, Table
from fedarena.tracking.location import tracking_uri as resolve_uri
from fedarena.tracking.reading import read_runs


def evaluate(aggregator: str | None = None, method: str | None = None, *, builtin: bool = False,
             settings: dict | None = None, include: Iterable[str | Path] = (), scale: str = "quick",
             out: str | Path | None = None, claim: str | Path | None = None, tracking_uri: str | None = None,
             printer: Printer | None = None, emit: Callable[[str], None] = print, tuned: str | Path | None = None,
             **options) -> list[Card]:
    """Run the battery against ``aggregator`` or ``method`` (with ``settings``), or every built-in one
    (``builtin``), at ``scale``; returns their cards (``options``: ``BenchOptions``, e.g. ``storage``).
    ``tuned``: a frozen choice of ``fedarena tune --aggregator/--method`` (its rows' values per dataset)."""
    load_checked(include)
    rows = _rows(aggregator, method, builtin, settings)
    claims = read_claim(claim) if claim is not None else None  # bad input before any work
    if tuned is not None:
        read_frozen(tuned)
    uri = resolve_uri(tracking_uri)
    battery = battery_suite(rows, scale)
    if tuned is not None:
        battery = replace(battery, suite=with_tuned(battery.suite, scale, tuned))
    summary = run_bench(BenchOptions(NAME, scale, tracking_uri=uri, include=tuple(map(str, include)), **options),
                        printer, suite=battery.suite)
    if not summary.ok:
        raise BatteryError(f"the battery did not finish ({summary.finished} finished, {summary.failed} failed, "
                           f"{summary.killed} interrupted); run the same command again: it resumes")
    cards = store_cards(uri, battery)
    wanted = [cards[r.label] for r in rows if r.label in cards]
    for card in wanted:
        emit(card_text(card))
        if tuned is not None:  # the values the card's runs used, from the frozen choice
            emit(f"Tuned with {Path(tuned).name} ({battery.suite.tags['tuned_budget']} configurations per row).")
        if claims is not None:
            emit(claim_text(card, claims))
    if out is not None:
        write_cards(wanted, Path(out), single=not builtin)
    return wanted


def _rows(aggregator, method, builtin: bool, settings: dict | None):
    chosen = [k for k, v in (("aggregator", aggregator), ("method", method)) if v]
    if builtin == bool(chosen) or len(chosen) > 1:
        raise BatteryError("evaluate needs exactly one of --aggregator NAME, --method NAME or --builtin")
    if builtin:
        if settings:
            raise BatteryError("--builtin evaluates every component at its defaults: drop --set")
        return builtin_rows()
    return [row_of(chosen[0], aggregator or method, settings)]


def store_cards(uri: str, battery: Battery) -> dict[str, Card]:
    """The card of every row in the store's battery experiment at the battery's scale, ranked."""
    runs = read_runs(uri, NAME)
    prepared, _ = prepare_runs(runs, battery.scale)
    cards = cards_from_cells(aggregate(prepared, ci=False), battery)
    for label, card in cards.items():
        card.identity, card.code_version = provenance(prepared[prepared["method_label"] == label], card)
    return cards


def provenance(runs: pd.DataFrame, card: Card) -> tuple[str, str]:
    """(the component's version as its runs recorded it, their code versions)."""
    name = card.component.split(".", 1)[1].split("+", 1)[0]
    key = f"{card.kind if card.kind == 'method' else 'aggregator'}/{name}"
    versions = {str(json.loads(v).get(key, "?")) for v in runs.get("component_versions", pd.Series(dtype=str)).dropna()}
    shas = sorted({str(s)[:12] for s in runs.get("git_sha", pd.Series(dtype=str)).dropna()})
    return ", ".join(sorted(versions)), ", ".join(shas)


def cards_from_cells(cells: pd.DataFrame, battery: Battery) -> dict[str, Card]:
    """Every row's card from the aggregated cells of the battery's runs (the rows under test and any other row
    in the store), ranked per level among the built-in rows of each kind."""
    levels = sorted({lv for a in battery.suite.attacks for lv in a.levels if lv > 0})
    version = int(battery.suite.tags.get("battery_version", 0)) if battery.suite.tags else 0
    builtin = {r.label for r in builtin_rows()}
    labels = sorted(set(cells["method_label"].astype(str)) if not cells.empty else set()
                    | {r.label for r in battery.rows})  # a row that ran nothing: every setting undefined
    cards = {label: card_of(cells, label, kind=label.split(".", 1)[0], battery_version=version,
                            scale=battery.scale, levels=levels, undefined=battery.undefined.get(label))
             for label in labels}
    rank_cards(list(cards.values()), builtin)
    return cards


def report_cards(cells: pd.DataFrame, prepared: pd.DataFrame) -> list[Card]:
    """The cards of every component a store's battery runs hold (the report's section), ranked."""
    if cells.empty:
        return []
    scale = str(prepared["scale"].dropna().iloc[0]) if "scale" in prepared and prepared["scale"].notna().any() else ""
    versions = prepared["battery_version"].dropna() if "battery_version" in prepared else pd.Series(dtype=str)
    levels = sorted({lv for a in load_battery()["attacks"] for lv in a["levels"] if lv > 0})
    labels = sorted(set(cells["method_label"].astype(str)))
    cards = [card_of(cells, label, kind=label.split(".", 1)[0], battery_version=int(versions.max()) if len(versions)
                     else 0, scale=scale, levels=levels) for label in labels]
    rank_cards(cards, {r.label for r in builtin_rows()})
    for card in cards:
        card.identity, card.code_version = provenance(prepared[prepared["method_label"] == card.component], card)
    return cards


def card_text(card: Card) -> str:
    """The card as markdown (what is printed and written as card.md)."""
    lines = [f"## Robustness card: {card.component}", "",
             f"Battery version {card.battery_version}, scale {card.scale}, datasets {', '.join(card.datasets)}; "
             f"component version {card.identity or '?'}, code {card.code_version or '?'}.", "",
             f"Clean accuracy: {_fmt(card.clean_acc)}", "",
             "| level | worst-case accuracy | attack | std across devices | worst 10% of devices | rank |",
             "|:---|:---:|:---|:---:|:---:|:---:|"]
    for level, entry in card.worst.items():
        if "acc" not in entry:
            lines.append(f"| {float(level):.0%} | undefined | {entry['undefined']} | – | – | – |")
            continue
        place = card.rank.get(level)
        among = card.ranked_among.get(level)
        rank = f"{place} of {among}" if place is not None else "–"
        lines.append(f"| {float(level):.0%} | {_fmt(entry['acc'])} | {entry['attack']} | {_fmt(entry['acc_std'])} | "
                     f"{_fmt(entry['acc_worst10'])} | {rank} |")
    asr = card.worst_asr
    lines += ["", f"Worst attack success rate: {_fmt(asr['asr'])} ({asr['attack']})" if asr else
              "Worst attack success rate: – (no targeted attack ran)"]
    lines.append("Rank: among the built-in rows of its kind with a worst case at that level (1 = best).")
    return "\n".join(lines)


def claim_text(card: Card, claim: dict) -> str:
    rows = ["| setting | claimed | measured | measured - claimed |", "|:---|:---:|:---:|:---:|"]
    for what, claimed, measured in claimed_vs_measured(card, claim):
        diff = f"{measured - claimed:+.3f}" if measured is not None else "–"
        rows.append(f"| {what} | {claimed:.3f} | {_fmt(measured)} | {diff} |")
    return "\n".join([f"Claimed against measured ({card.component}):", "", *rows])


def _fmt(value: float | None) -> str:
    return "–" if value is None or value != value else f"{value:.3f}"


def write_cards(cards: list[Card], folder: Path, single: bool) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for card in cards:
        stem = "card" if single else card.component
        (folder / f"{stem}.md").write_text(card_text(card) + "\n", encoding="utf-8")
        (folder / f"{stem}.json").write_text(json.dumps(card.to_json(), indent=2) + "\n", encoding="utf-8")
        paths += [folder / f"{stem}.md", folder / f"{stem}.json"]
    return paths


def cards_table(cards: list[Card]) -> Table:
    """The cards as one table (the report's section): per component, clean and worst-case accuracy per level
    with its attack and rank, and the worst attack success rate."""
    levels = sorted({lv for c in cards for lv in c.worst}, key=float)
    header = ["component", "clean", *[f"worst@{float(lv):.0%}" for lv in levels], "worst ASR"]
    rows = []
    for card in cards:
        cells = [Cell(card.component), Cell(_fmt(card.clean_acc))]
        for level in levels:
            entry = card.worst.get(level, {"undefined": ""})
            rank = card.rank.get(level)
            cells.append(Cell("undefined" if "acc" not in entry else
                              f"{_fmt(entry['acc'])} [{entry['attack']}]" + (f" #{rank}" if rank else "")))
        asr = card.worst_asr
        cells.append(Cell(f"{_fmt(asr['asr'])} [{asr['attack']}]" if asr else "–"))
        rows.append(cells)
    notes = ["Worst case: the lowest benign accuracy over the battery's attacks at that level (mean over the "
             "scale's datasets and seeds); #k: the rank among the built-in rows of the component's kind (1 = best); "
             "undefined: the component's rule is not defined there (not ranked)."]
    tidy = pd.DataFrame([c.to_json() for c in cards])
    return Table("robustness_cards", "Robustness cards (the standard threat battery)", [Block(header, rows)], notes, tidy)
