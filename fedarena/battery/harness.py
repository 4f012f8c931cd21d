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
from pathlib import Path

import pandas as pd

from fedarena.battery.card import Card, card_of, claimed_vs_measured, missing_trials, rank_cards, read_claim
from fedarena.battery.card_costs import card_costs, costs_text
from fedarena.battery.completeness import (
    TRIAL,
    battery_runs,
    by_setting,
    current_version,
    expected_trials,
    keyed_runs,
    rebuilt,
    recorded_version,
    tuned_trials,
    tuned_undefined,
    tuning_note,
)
from fedarena.battery.definition import (
    NAME,
    Battery,
    BatteryError,
    battery_suite,
    builtin_rows,
    load_battery,
    row_of,
)
from fedarena.battery.spread import grid, intervals, within
from fedarena.bench.progress import Printer
from fedarena.bench.runner import BenchOptions, run_bench
from fedarena.contracts import check_plugin, load_checked
from fedarena.isolation import available, load_isolated
from fedarena.leaderboards.build import prepare_runs
from fedarena.leaderboards.cells import aggregate
from fedarena.leaderboards.tables import Block, Cell, Table
from fedarena.privacy.compatibility import CENTRAL_TAG, SECURE_TAG, read_tag, runs_under
from fedarena.suites.spec import Suite
from fedarena.suites.tuned import read_frozen, tuned_label_of, with_tuned
from fedarena.suites.tuned_labels import TUNED
from fedarena.tracking.location import tracking_uri as resolve_uri
from fedarena.tracking.reading import config_of, read_runs


def evaluate(aggregator: str | None = None, method: str | None = None, *, builtin: bool = False,
             settings: dict | None = None, include: Iterable[str | Path] = (), scale: str = "quick",
             out: str | Path | None = None, claim: str | Path | None = None, tracking_uri: str | None = None,
             printer: Printer | None = None, emit: Callable[[str], None] = print, tuned: str | Path | None = None,
             isolate: bool = False, **options) -> list[Card]:
    """Run the battery against ``aggregator`` or ``method`` (with ``settings``), or every built-in one
    (``builtin``), at ``scale``; returns their cards (``options``: ``BenchOptions``, e.g. ``storage``).
    ``tuned``: a frozen choice of ``fedarena tune --aggregator/--method`` (its rows' values per dataset).
    ``isolate``: the ``include``d plugins' aggregators run in sandboxed processes (``fedarena.isolation``), never
    imported here."""
    include = _loaded(include, isolate, aggregator)
    rows = _rows(aggregator, method, builtin, settings)
    claims = read_claim(claim) if claim is not None else None  # bad input before any work
    if tuned is not None:
        _check_tuned_version(tuned)
    uri = resolve_uri(tracking_uri)
    battery = battery_suite(rows, scale)
    suite = with_tuned(battery.suite, scale, tuned) if tuned is not None else battery.suite
    summary = run_bench(BenchOptions(NAME, scale, tracking_uri=uri, include=tuple(map(str, include)), **options),
                        printer, suite=suite)
    if not summary.ok:
        raise BatteryError(f"the battery did not finish ({summary.finished} finished, {summary.failed} failed, "
                           f"{summary.killed} interrupted); run the same command again: it resumes")
    cards = store_cards(uri, battery, "cuda" if options.get("gpus_per_trial", 0) > 0 else "cpu",
                        suite if tuned is not None else None)
    labels = [tuned_label_of(suite, r.label) for r in rows]  # a tuned row runs under its own label
    wanted = [cards[label] for label in labels if label in cards]
    for card in wanted:
        emit(card_text(card))
        if claims is not None:
            emit(claim_text(card, claims))
    if out is not None:
        write_cards(wanted, Path(out), single=not builtin)
    return wanted


def _loaded(include, isolate: bool, aggregator: str | None) -> tuple:
    """Load the plugins: here (``include``, returned for the workers), or with ``isolate`` in their sandboxes
    (nothing returned: the workers receive the stand-ins' plugins instead)."""
    if not isolate:
        load_checked(include)
        return tuple(include)
    if not aggregator:
        raise BatteryError("--isolate evaluates an aggregator (--aggregator NAME): a method runs inside local "
                           "training and cannot be isolated per call")
    reason = available()
    if reason:
        raise BatteryError(f"--isolate needs bubblewrap: {reason}")
    load_checked(())  # FEDARENA_INCLUDE and entry points: the builder's own, trusted
    for plugin in load_isolated(include):
        check_plugin(plugin.origin)
    return ()


def _check_tuned_version(path) -> None:
    """A frozen choice made on another battery version is refused (its objective was other attacks)."""
    made = read_frozen(path).get("battery_version")
    if made is not None and str(made) != str(current_version()):
        raise BatteryError(f"--tuned {path}: tuned on battery version {made}, not the current {current_version()}; "
                           f"tune again with `fedarena tune --aggregator/--method NAME`")


def _rows(aggregator, method, builtin: bool, settings: dict | None):
    chosen = [k for k, v in (("aggregator", aggregator), ("method", method)) if v]
    if builtin == bool(chosen) or len(chosen) > 1:
        raise BatteryError("evaluate needs exactly one of --aggregator NAME, --method NAME or --builtin")
    if builtin:
        if settings:
            raise BatteryError("--builtin evaluates every component at its defaults: drop --set")
        return builtin_rows()
    return [row_of(chosen[0], aggregator or method, settings)]


def store_cards(uri: str, battery: Battery, device: str = "cpu", tuned: Suite | None = None) -> dict[str, Card]:
    """The card of every row in the store's battery experiment at the battery's scale, ranked (``device``: the
    one the battery's trials ran on, part of their identity; ``tuned``: the battery ``with_tuned`` made, whose
    tuned rows are rows of their own beside ``battery``'s)."""
    prepared, _ = prepare_runs(read_runs(uri, NAME), battery.scale)
    levels = sorted({lv for a in battery.suite.attacks for lv in a.levels if lv > 0})
    tuned_labels = {m.label for m in tuned.methods if TUNED in m.label} if tuned is not None else set()
    labels = sorted((set(prepared["method_label"].astype(str)) if not prepared.empty else set())
                    | {r.label for r in battery.rows} | tuned_labels)  # a row that ran nothing: every setting undefined
    expected = expected_trials(battery, labels, device)
    undefined = dict(battery.undefined)
    if tuned is not None:
        expected.update(tuned_trials(tuned, battery.scale, expected, device))
        undefined.update(tuned_undefined(tuned, battery.undefined))
    cards = cards_of_rows(prepared, labels, expected, set(), battery.scale, levels, undefined)
    rank_cards(list(cards.values()), {r.label for r in builtin_rows()})
    return cards


def report_cards(prepared: pd.DataFrame) -> list[Card]:
    """The cards of every component a store's battery runs hold (the report's section), ranked."""
    if prepared.empty or "method_label" not in prepared:
        return []
    scale = str(prepared["scale"].dropna().iloc[0]) if "scale" in prepared and prepared["scale"].notna().any() else ""
    levels = sorted({lv for a in load_battery()["attacks"] for lv in a["levels"] if lv > 0})
    labels = sorted(set(prepared["method_label"].astype(str)))
    bases = {label.split("+", 1)[0] for label in labels}
    rows = [row for row in map(rebuilt, sorted(set(labels) | bases)) if row is not None]
    battery = battery_suite(rows, scale) if rows and scale in load_battery()["scales"] else None
    devices = prepared["device"].dropna().astype(str) if "device" in prepared else pd.Series(dtype=str)
    expected = expected_trials(battery, sorted(set(labels) | bases), devices.mode().iloc[0] if len(devices) else "cpu")
    settings_keyed = by_setting(expected, labels)
    undefined = dict(battery.undefined) if battery is not None else {}
    undefined.update({label: undefined.get(label.split("+", 1)[0]) for label in settings_keyed})
    cards = cards_of_rows(prepared, labels, {**expected, **settings_keyed}, set(settings_keyed), scale, levels,
                          undefined)
    rank_cards(list(cards.values()), {r.label for r in builtin_rows()})
    return list(cards.values())


def cards_of_rows(prepared: pd.DataFrame, labels: list[str], expected: dict[str, dict[str, str]],
                  settings_keyed: set[str], scale: str, levels: list[float], undefined: dict) -> dict[str, Card]:
    """Each row's card from its runs of the battery's current trials (``completeness``), unranked."""
    runs = battery_runs(keyed_runs(prepared, settings_keyed), expected)
    cells = aggregate(runs, ci=False) if not runs.empty else pd.DataFrame(columns=["method_label"])
    return {label: _card(cells, runs, label, expected.get(label), scale, levels, undefined.get(label),
                         recorded_version(_of(prepared, label))) for label in labels}


def _of(runs: pd.DataFrame, label: str) -> pd.DataFrame:
    return runs[runs["method_label"] == label] if "method_label" in runs else runs.iloc[:0]


def _card(cells: pd.DataFrame, runs: pd.DataFrame, label: str, expected: dict[str, str] | None, scale: str,
          levels: list[float], undefined: dict | None, recorded: int) -> Card:
    """One row's card: complete (and at the battery's current version) when its runs hold every expected trial,
    else the newest battery version its runs were made under (``recorded``), with what is missing."""
    own = _of(runs, label)
    missing = missing_trials(own, expected, key=TRIAL) if expected is not None else None
    version = current_version() if missing == [] else recorded
    card = card_of(cells, label, kind=label.split(".", 1)[0], battery_version=version, scale=scale, levels=levels,
                   undefined=undefined, missing=missing)
    card.identity, card.code_version = provenance(own, card)
    card.tuning = tuning_note(own)
    card.intervals, card.grid = intervals(own, card.settings), grid(own)
    card.secure_aggregation, card.central_dp = recorded_privacy(own)
    card.costs = card_costs(own)
    return card


def recorded_privacy(runs: pd.DataFrame) -> tuple[bool | None, bool | None]:
    """(secure aggregation, central DP) of a row's server side: as its runs recorded it (``privacy.compatibility``), or
    for runs recorded before the tags, from today's registries where its components are registered here."""
    if runs.empty:
        return None, None
    first = runs.iloc[0].to_dict()
    recorded = [read_tag(first.get(tag)) for tag in (SECURE_TAG, CENTRAL_TAG)]
    if None not in recorded:
        return recorded[0], recorded[1]
    config = config_of(first)
    facts = runs_under(config.get("method") or {}, config.get("aggregator") or {})
    return (None, None) if facts is None else (facts[SECURE_TAG], facts[CENTRAL_TAG])


def provenance(runs: pd.DataFrame, card: Card) -> tuple[str, str]:
    """(the component's version as its runs recorded it, their code versions)."""
    name = card.component.split(".", 1)[1].split("+", 1)[0]
    key = f"{card.kind if card.kind == 'method' else 'aggregator'}/{name}"
    versions = {str(json.loads(v).get(key, "?")) for v in runs.get("component_versions", pd.Series(dtype=str)).dropna()}
    shas = sorted({str(s)[:12] for s in runs.get("git_sha", pd.Series(dtype=str)).dropna()})
    return ", ".join(sorted(versions)), ", ".join(shas)


def card_text(card: Card) -> str:
    """The card as markdown (what is printed and written as card.md)."""
    lines = [f"## Robustness card: {card.component}", "",
             f"Battery version {card.battery_version}, scale {card.scale}, datasets {', '.join(card.datasets)}; "
             f"component version {card.identity or '?'}, code {card.code_version or '?'}.", "",
             *([f"Values: {card.tuning}.", ""] if card.tuning else []),
             *([] if card.complete else [_incomplete_text(card), ""]),
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
    lines.append("Rank: among the complete built-in rows of its kind and battery version with a worst case at that "
                 "level (1 = best); an incomplete card is not ranked.")
    if card.unranked:
        lines.append(f"Not ranked: {card.unranked}.")
    return "\n".join([*lines, "", *costs_text(card.costs)])


def _incomplete_text(card: Card, shown: int = 5) -> str:
    more = f" and {len(card.missing) - shown} more" if len(card.missing) > shown else ""
    return (f"**Incomplete** (not ranked): {len(card.missing)} of the battery's trials missing: "
            f"{'; '.join(card.missing[:shown])}{more}.")


def claim_text(card: Card, claim: dict) -> str:
    rows = ["| setting | claimed | measured | 95% interval | measured - claimed | claim in interval |",
            "|:---|:---:|:---:|:---:|:---:|:---:|"]
    for what, claimed, measured, interval in claimed_vs_measured(card, claim):
        diff = f"{measured - claimed:+.3f}" if measured is not None else "–"
        span = f"[{interval[0]:.3f}, {interval[1]:.3f}]" if interval else "–"
        inside = "–" if not interval else ("yes" if within(claimed, interval) else "no")
        rows.append(f"| {what} | {claimed:.3f} | {_fmt(measured)} | {span} | {diff} | {inside} |")
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
    header = ["component", "battery", "clean", *[f"worst@{float(lv):.0%}" for lv in levels], "worst ASR"]
    rows = []
    for card in cards:
        cells = [Cell(card.component + ("" if card.complete else " (incomplete)")), Cell(f"v{card.battery_version}"),
                 Cell(_fmt(card.clean_acc))]
        for level in levels:
            entry = card.worst.get(level, {"undefined": ""})
            rank = card.rank.get(level)
            cells.append(Cell("undefined" if "acc" not in entry else
                              f"{_fmt(entry['acc'])} [{entry['attack']}]" + (f" #{rank}" if rank else "")))
        asr = card.worst_asr
        cells.append(Cell(f"{_fmt(asr['asr'])} [{asr['attack']}]" if asr else "–"))
        rows.append(cells)
    notes = ["Worst case: the lowest benign accuracy over the battery's attacks at that level (mean over the "
             "scale's datasets and seeds); #k: the rank among the complete built-in rows of the component's kind and "
             "battery version (1 = best); undefined: the component's rule is not defined there (not ranked)."]
    incomplete = [c.component for c in cards if not c.complete]
    if incomplete:
        notes.append(f"Incomplete (some of the battery's current trials missing; not ranked): {', '.join(incomplete)}.")
    notes += [f"{c.component}: {c.tuning}." for c in cards if c.tuning]
    tidy = pd.DataFrame([c.to_json() for c in cards])
    return Table("robustness_cards", "Robustness cards (the standard threat battery)", [Block(header, rows)], notes, tidy)
