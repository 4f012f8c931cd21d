"""``fedarena site`` / ``fedarena.site``: the leaderboard as a static site, from a store's robustness cards and a
folder of submissions, each rerun through the battery.

Layout of ``out``::

    index.html                       the scales built into this folder
    submit.html                      how to submit
    <scale>/index.html               the current battery version's table (sortable, filterable)
    <scale>/leaderboard.json         one record per entry (``entries.schema()``)
    <scale>/entries/<entry>.html     an entry's card, grid, chart, claims, reproduction
    <scale>/v<k>/...                 an older battery version, archived: never in the current table

The same store, submissions and work folder give byte-identical files. The folder is built fresh and moved into
place (``output``): a folder built under an older battery version is kept as ``<scale>/v<old>/``, so nothing
published is lost, and nothing a submission wrote into it survives.
"""

from __future__ import annotations

import json
import re
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
from fedarena.website.entries import Entry, builtin_entry
from fedarena.website.output import check_places, write_site
from fedarena.website.reviews import read_reviews, review_of
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
    TOLERANCE,
    Limits,
    check_before_running,
    differing_cells,
    rerun,
    shown_command,
    status_of,
)

SANDBOX_COPY = re.compile(r"/[^\s'\"]*fedarena-isolated-[A-Za-z0-9_]+/")  # fedarena.isolation's temporary folder


@dataclass
class SiteSummary:
    out: Path
    entries: list[Entry]
    builtin_found: bool  # the store held built-in cards at this scale

    def status_of(self, slug: str) -> str:
        return next(e.status for e in self.entries if e.slug == slug)


def site(scale: str = "quick", out: str | Path = "site", submissions: str | Path | None = None,
         tracking_uri: str | None = None, work: str | Path = "site_submissions", limits: Limits = DEFAULT_LIMITS,
         emit: Callable[[str], None] = print, trust_submissions: bool = False) -> SiteSummary:
    """Build the leaderboard site of ``scale`` into ``out`` from the store's built-in cards and the submissions in
    ``submissions`` (each rerun in ``work/<entry>``; ``trust_submissions``: where bubblewrap cannot start, rerun
    them unsandboxed, marked "not isolated", rather than reject them)."""
    check_scale(scale)
    folders = submission_folders(Path(submissions)) if submissions is not None else []
    reviews = read_reviews(Path(submissions)) if submissions is not None else []
    out, work = Path(out), Path(work).resolve()  # the evaluations run in their own folders: absolute paths
    check_places(out, work)
    cards, found = builtin_cards(resolve_uri(tracking_uri), scale)
    if not found:
        emit(f"no built-in card at scale {scale} in the store: the table has submissions only (fedarena evaluate "
             f"--builtin --scale {scale} fills it)")
    entries = [builtin_entry(card, scale) for card in cards]
    with ThreadPoolExecutor(max_workers=max(1, limits.jobs)) as pool:  # each waits on its own processes
        reruns = list(pool.map(lambda folder: submission_entry(folder, scale, work, limits, trust_submissions,
                                                               reviews), folders))
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


def submission_entry(folder: Path, scale: str, work: Path, limits: Limits, trust: bool = False,
                     reviews: list[dict] | tuple = ()) -> Entry:
    """A submission read, checked and rerun: its status (``verification``), the checks it passed, its differing
    cells, or rejected with why."""
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
        review = review_of(list(reviews), folder, submission.plugin)  # the source as it is before the rerun
        card, placed = rerun(submission, scale, work / submission.slug, limits, trust)
        entry.differing = differing_cells(submission.card, card)
    except SubmissionError as err:
        entry.reason = _relative(str(err), folder, work / submission.slug)
        return entry
    except Exception as err:  # noqa: BLE001 - untrusted input: a rejection with its reason, never a failed build
        entry.reason = f"could not be checked ({type(err).__name__}: {' '.join(str(err).split())[:200]})"
        return entry
    entry.card = card
    entry.checks = {"isolated": placed.isolated, "sandboxed": placed.sandboxed, "reproduced": not entry.differing,
                    "reviewed": review, "tolerance": TOLERANCE}
    entry.status = status_of(entry.differing, placed.isolated, review)
    return entry


def _relative(text: str, folder: Path, work: Path) -> str:
    """A reason with the submission's and its work folder's paths written relative to them (the site shows no
    path of the machine that built it, and two machines give the same text)."""
    for path, shown in ((work.resolve(), "<work>"), (work, "<work>"), (folder.resolve(), folder.name), (folder, folder.name)):
        text = text.replace(f"{path}/", "").replace(str(path), shown)
    return SANDBOX_COPY.sub("", text)  # the isolated rule's copy of the plugin: a random temporary folder


def _rejected(folder: Path, reason: str) -> Entry:
    meta = metadata(folder)
    stub = Submission(folder, meta.get("name", folder.name), "aggregator", "")
    return Entry(stub.slug, REJECTED, None, name=stub.name, authors=tuple(meta.get("authors", ())), reason=reason,
                 component="aggregator.?")


def verify(folder: str | Path, scale: str | None = None, limits: Limits = DEFAULT_LIMITS,
           emit: Callable[[str], None] = print, trust_submissions: bool = False) -> Entry:
    """``fedarena site --verify``: one submission rerun on a fresh store (a temporary work folder), its status
    (reviews from ``reviews.yaml`` beside its folder) and each seed's cell its card does not reproduce."""
    folder = Path(folder)
    if not folder.is_dir():
        raise SubmissionError(f"--verify {folder}: not a folder (give one submission's folder)")
    if scale is None:
        try:
            scale = str(json.loads((folder / "card.json").read_text(encoding="utf-8")).get("scale") or "quick")
        except (OSError, ValueError, AttributeError):
            scale = "quick"
    check_scale(scale)
    reviews = read_reviews(folder.resolve().parent)
    with tempfile.TemporaryDirectory(prefix="fedarena-verify-") as tmp:
        entry = submission_entry(folder, scale, Path(tmp).resolve(), limits, trust_submissions, reviews)
    emit(f"{folder.name}: {entry.status}" + (f" ({entry.reason})" if entry.reason else ""))
    for cell in entry.differing:
        span = cell["interval"]
        emit(f"  {cell['cell']} {cell['dataset']} seed {cell['seed']}: submitted {cell['submitted']}, rerun "
             f"{cell['measured']}" + (f" (between seeds [{span[0]:.4f}, {span[1]:.4f}])" if span else "")
             + f": {cell['why']}")
    return entry
