"""``fedarena site`` / ``fedarena.site``: the leaderboard as a static site, from a store's robustness cards and a
folder of submissions, each rerun through the battery.

Layout of ``out``::

    index.html                       the scales built into this folder
    submit.html                      how to submit
    <scale>/index.html               the current battery version's table (sortable, filterable)
    <scale>/leaderboard.json         one record per entry (``entries.schema()``)
    <scale>/entries/<entry>.html     an entry's card, grid, chart, claims, reproduction
    <scale>/v<k>/...                 an older battery version, archived: never in the current table

The same store, submissions and work folder give byte-identical files. A folder built under an older battery
version is moved to ``<scale>/v<old>/`` before the new version is written, so nothing published is lost.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from fedarena.battery.card import Card, rank_cards
from fedarena.battery.definition import BatteryError, battery_suite, builtin_rows, load_battery
from fedarena.battery.definition import version as battery_version
from fedarena.battery.harness import store_cards
from fedarena.tracking.location import tracking_uri as resolve_uri
from fedarena.tracking.reading import NoRunsError
from fedarena.website.entries import Entry, builtin_entry, leaderboard
from fedarena.website.entry_page import entry_html
from fedarena.website.pages import index_page, landing_page, submit_page
from fedarena.website.submission import (
    Submission,
    SubmissionError,
    metadata,
    read_submission,
    submission_folders,
)
from fedarena.website.verification import (
    DEFAULT_LIMITS,
    REJECTED,
    UNVERIFIED,
    VERIFIED,
    Limits,
    check_before_running,
    differing_cells,
    rerun,
    shown_command,
)


@dataclass
class SiteSummary:
    out: Path
    entries: list[Entry]
    builtin_found: bool  # the store held built-in cards at this scale

    def status_of(self, slug: str) -> str:
        return next(e.status for e in self.entries if e.slug == slug)


def site(scale: str = "quick", out: str | Path = "site", submissions: str | Path | None = None,
         tracking_uri: str | None = None, work: str | Path = "site_submissions", limits: Limits = DEFAULT_LIMITS,
         emit: Callable[[str], None] = print) -> SiteSummary:
    """Build the leaderboard site of ``scale`` into ``out`` from the store's built-in cards and the submissions in
    ``submissions`` (each rerun in ``work/<entry>``)."""
    check_scale(scale)
    folders = submission_folders(Path(submissions)) if submissions is not None else []
    out, work = Path(out), Path(work).resolve()  # the evaluations run in their own folders: absolute paths
    cards, found = builtin_cards(resolve_uri(tracking_uri), scale)
    if not found:
        emit(f"no built-in card at scale {scale} in the store: the table has submissions only (fedarena evaluate "
             f"--builtin --scale {scale} fills it)")
    entries = [builtin_entry(card, scale) for card in cards]
    with ThreadPoolExecutor(max_workers=max(1, limits.jobs)) as pool:  # each waits on its own processes
        reruns = list(pool.map(lambda folder: submission_entry(folder, scale, Path(work), limits), folders))
    for folder, entry in zip(folders, reruns, strict=True):
        emit(f"submission {folder.name}: {entry.status}" + (f" ({entry.reason})" if entry.reason else ""))
        entries.append(entry)
    rank_cards([e.card for e in entries if e.card is not None], {r.label for r in builtin_rows()})
    write_site(out, sorted(entries, key=leaderboard_order), scale)
    emit(f"site of scale {scale} (battery version {battery_version()}): {len(entries)} entries -> {out / scale}")
    return SiteSummary(out, entries, found)


def leaderboard_order(entry: Entry) -> tuple:
    """The table's first order, as RobustBench's: the worst case at 20% of attackers, best first (then the clean
    accuracy); entries without one after those with one, rejected ones last; the entry's name breaks ties."""
    card = entry.card
    worst = card.worst.get("0.2", {}).get("acc") if card is not None else None
    clean = card.clean_acc if card is not None and card.clean_acc is not None else -1.0
    return (card is None, worst is None, -(worst or 0.0), -clean, entry.slug)


def check_scale(scale: str) -> None:
    if scale not in load_battery()["scales"]:
        raise BatteryError(f"the battery (version {battery_version()}) has no scale {scale!r}; its scales: "
                           f"{', '.join(load_battery()['scales'])}")


def builtin_cards(uri: str, scale: str) -> tuple[list[Card], bool]:
    """The cards of the built-in rows the store has runs of at ``scale`` (any battery version)."""
    try:
        cards = store_cards(uri, battery_suite(builtin_rows(), scale))
    except NoRunsError:
        return [], False
    labels = {r.label for r in builtin_rows()}
    kept = [c for label, c in sorted(cards.items()) if label in labels and (c.grid or _undefined_everywhere(c))]
    return kept, bool(kept)


def _undefined_everywhere(card: Card) -> bool:
    """A row the battery cannot run at any level, for a stated reason (MOCHA needs its convex model): a card of its
    own, whatever the store holds."""
    return card.complete and all("undefined" in e and e["undefined"] != "no run at this level" for e in card.worst.values())


def submission_entry(folder: Path, scale: str, work: Path, limits: Limits) -> Entry:
    """A submission read, checked and rerun: verified, unverified (with its differing cells) or rejected."""
    try:
        submission = read_submission(folder)
    except SubmissionError as err:
        return _rejected(folder, str(err))
    except Exception as err:  # noqa: BLE001 - untrusted input: a rejection with its reason, never a failed build
        return _rejected(folder, f"could not be read ({type(err).__name__}: {' '.join(str(err).split())[:200]})")
    entry = Entry(submission.slug, REJECTED, None, name=submission.name, authors=submission.authors,
                  paper=submission.paper, claims=submission.claims, component=f"{submission.kind}.{submission.component}",
                  settings=dict(submission.settings), reproduce=shown_command(submission, scale))
    try:
        check_before_running(submission, scale)
        card = rerun(submission, scale, work / submission.slug, limits)
        entry.differing = differing_cells(submission.card, card)
    except SubmissionError as err:
        entry.reason = _relative(str(err), folder, work / submission.slug)
        return entry
    except Exception as err:  # noqa: BLE001 - untrusted input: a rejection with its reason, never a failed build
        entry.reason = f"could not be checked ({type(err).__name__}: {' '.join(str(err).split())[:200]})"
        return entry
    entry.card = card
    entry.status = UNVERIFIED if entry.differing else VERIFIED
    return entry


def _relative(text: str, folder: Path, work: Path) -> str:
    """A reason with the submission's and its work folder's paths written relative to them (the site shows no
    path of the machine that built it, and two machines give the same text)."""
    for path, shown in ((work.resolve(), "<work>"), (work, "<work>"), (folder.resolve(), folder.name), (folder, folder.name)):
        text = text.replace(f"{path}/", "").replace(str(path), shown)
    return text


def _rejected(folder: Path, reason: str) -> Entry:
    meta = metadata(folder)
    stub = Submission(folder, meta.get("name", folder.name), "aggregator", "")
    return Entry(stub.slug, REJECTED, None, name=stub.name, authors=tuple(meta.get("authors", ())), reason=reason,
                 component="aggregator.?")


def write_site(out: Path, entries: list[Entry], scale: str) -> None:
    """Every page of ``scale`` into ``out`` (an older version's pages first archived), then the landing page."""
    current = battery_version()
    folder = out / scale
    archive_older(folder, current)
    by_version: dict[int, list[Entry]] = {}
    for entry in entries:
        version = entry.card.battery_version if entry.card is not None else current
        by_version.setdefault(version if version < current else current, []).append(entry)
    archived = sorted({v for v in by_version if v < current} | _archived_versions(folder), reverse=True)
    _write_version(folder, by_version.get(current, []), current, scale, archived, root="..", current=True)
    for version in sorted(v for v in by_version if v < current):
        _write_version(folder / f"v{version}", by_version[version], version, scale, [], root="../..", current=False)
    scales = sorted((p.name, json.loads((p / "leaderboard.json").read_text())["battery_version"])
                    for p in out.iterdir() if (p / "leaderboard.json").is_file())
    _write(out / "index.html", landing_page(scales))
    _write(out / "submit.html", submit_page(current))


def _write_version(folder: Path, entries: list[Entry], version: int, scale: str, archived: list[int], root: str,
                   current: bool) -> None:
    pages = folder / "entries"
    if pages.exists():
        shutil.rmtree(pages)  # an entry gone from the store or the submissions leaves no stale page
    pages.mkdir(parents=True)
    for entry in entries:
        _write(pages / f"{entry.slug}.html", entry_html(entry, scale, f"{root}/.."))
    _write(folder / "index.html", index_page(entries, version, scale, archived, root, current))
    _write(folder / "leaderboard.json", json.dumps(leaderboard(entries, version, scale), indent=2, sort_keys=True) + "\n")


def archive_older(folder: Path, current: int) -> None:
    """A folder last built under an older battery version: its pages moved to ``v<old>/`` (kept as published)."""
    data = folder / "leaderboard.json"
    if not data.is_file():
        return
    old = json.loads(data.read_text(encoding="utf-8")).get("battery_version")
    if not isinstance(old, int) or old >= current or (folder / f"v{old}").exists():
        return
    target = folder / f"v{old}"
    target.mkdir(parents=True)
    for name in ("index.html", "leaderboard.json", "entries"):
        if (folder / name).exists():
            shutil.move(str(folder / name), str(target / name))


def _archived_versions(folder: Path) -> set[int]:
    if not folder.is_dir():
        return set()
    return {int(p.name[1:]) for p in folder.iterdir() if p.is_dir() and p.name[:1] == "v" and p.name[1:].isdigit()}


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def verify(folder: str | Path, scale: str | None = None, limits: Limits = DEFAULT_LIMITS,
           emit: Callable[[str], None] = print) -> Entry:
    """``fedarena site --verify``: one submission rerun on a fresh store (a temporary work folder), its status
    and the cells its card does not reproduce."""
    folder = Path(folder)
    if not folder.is_dir():
        raise SubmissionError(f"--verify {folder}: not a folder (give one submission's folder)")
    if scale is None:
        try:
            scale = str(json.loads((folder / "card.json").read_text(encoding="utf-8")).get("scale") or "quick")
        except (OSError, ValueError, AttributeError):
            scale = "quick"
    check_scale(scale)
    with tempfile.TemporaryDirectory(prefix="fedarena-verify-") as tmp:
        entry = submission_entry(folder, scale, Path(tmp).resolve(), limits)
    emit(f"{folder.name}: {entry.status}" + (f" ({entry.reason})" if entry.reason else ""))
    for cell in entry.differing:
        span = cell["interval"]
        emit(f"  {cell['cell']}: submitted {cell['submitted']}, rerun {cell['measured']}"
             + (f" [{span[0]:.4f}, {span[1]:.4f}]" if span else "") + f" ({cell['why']})")
    return entry
