"""Planning a benchmark before Ray starts: which trials run, resume or are skipped (``plan_trials``), whether
their data is here (``check_data``), the printed plan of a dry run, where the suite's lock lives and whether
the storage can hold the checkpoints (``check_free_space``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fedarena.bench.callback import Planned
from fedarena.bench.guard import StorageFullError, free_bytes, human, meta_dir
from fedarena.bench.preflight import Preflight
from fedarena.bench.progress import Printer
from fedarena.datasets.files.fetch import info, info_text
from fedarena.errors import ConfigError
from fedarena.suites.grid import Excluded, TrialSpec
from fedarena.suites.tuned_labels import TUNED, tuned_under_default_label
from fedarena.tracking.location import sqlite_path
from fedarena.tracking.runs import (
    CHECKPOINT,
    CHECKPOINT_ROUND,
    ERROR,
    FAILED,
    FAILURE_KIND,
    FINISHED,
    PERMANENT,
    RunSummary,
)
from fedarena.tracking.versions import CHECKPOINT_HASH_TAG, FOLDED_TAG


class BenchError(ConfigError):
    """The benchmark cannot start (resources, Ray, data, trials that cannot be built)."""


@dataclass
class Plan:
    """What a benchmark does with each trial of its grid, decided by identity (``simulation.identity``)."""

    pending: dict[str, Planned] = field(default_factory=dict)  # config hash -> trial to run (new or resumed)
    skipped: int = 0  # a FINISHED run of its identity is in the suite's experiment
    failed: list[tuple[TrialSpec, str]] = field(default_factory=list)  # newest run failed permanently: its error
    reuse: list[tuple[TrialSpec, RunSummary]] = field(default_factory=list)  # finished in another suite: copied
    stale: list[tuple[TrialSpec, RunSummary, str]] = field(default_factory=list)  # finished at other versions: why
    # finished runs of a trial whose cell is another today (a data seed equal to the seed, folded into the identity,
    # now fixed for the whole cell): re-tagged with the spec's identity so the cell holds all its seeds
    recell: list[tuple[RunSummary, TrialSpec]] = field(default_factory=list)

    @property
    def resumed(self) -> int:
        return sum(1 for p in self.pending.values() if p.run_id)


def plan_trials(specs: list[TrialSpec], own: list[RunSummary], elsewhere: dict[str, RunSummary] | None = None,
                retry_failed: bool = False) -> Plan:
    """Each trial against the suite's runs (``own``, newest first) and the other suites' finished ones
    (``elsewhere``, by identity): skipped where a FINISHED run of its identity exists under its row's label
    (copied where only another row's run of it does); reused where another suite finished it; skipped with its
    error where its newest run failed permanently (``retry_failed`` runs it again); resumed from the newest unfinished run of its identity; else new. A FINISHED run with
    the trial's values at other versions is stale: the trial runs anew and the plan says why."""
    by_hash: dict[str, list[RunSummary]] = {}
    finished_by_key: dict[str, RunSummary] = {}
    for run in own:
        if run.config_hash:
            by_hash.setdefault(run.config_hash, []).append(run)
        key = run.identity.config_key if run.identity is not None else None
        if key and run.status == FINISHED:
            finished_by_key.setdefault(key, run)
    plan, elsewhere = Plan(), elsewhere or {}
    for spec in specs:
        runs = by_hash.get(spec.config_hash, [])
        finished = [run for run in runs if run.status == FINISHED]
        done = next((run for run in finished if _counts_for(run, spec)), None)
        if done is not None:
            plan.skipped += 1
            if _cell_of(done) not in (None, spec.cell_hash):
                plan.recell.append((done, spec))
        elif finished:  # the same trial under a tuned row's label and its default row's: copied, not computed
            plan.reuse.append((spec, finished[0]))
        elif runs and _failed_permanently(runs[0]) and not retry_failed:
            plan.failed.append((spec, runs[0].tags.get(ERROR, "unknown error")))
        elif runs:  # newest unfinished run: continue it from its last checkpoint
            plan.pending[spec.config_hash] = _resume(spec, runs[0])
        elif spec.config_hash in elsewhere:
            plan.reuse.append((spec, elsewhere[spec.config_hash]))
        else:
            plan.pending[spec.config_hash] = Planned(spec)
        old = finished_by_key.get(spec.config_key)
        if not any(run.status == FINISHED for run in runs) and old is not None:
            plan.stale.append((spec, old, old.identity.why_stale(spec.versions)))
    return plan


def _counts_for(run: RunSummary, spec: TrialSpec) -> bool:
    """Whether a finished run of the spec's identity is the spec's own: one row's run does not count for a tuned
    row holding the same trial (a tuned row at its defaults), nor for the default row where it is a tuned row's
    run recorded, before tuned rows had labels of their own, under the default label."""
    label = run.tags.get("method_label")
    tuned_before = tuned_under_default_label(label, run.tags.get("tuned_rows"))
    if label is None or (label == spec.method_label and not tuned_before):
        return True
    return not (tuned_before or TUNED in spec.method_label or TUNED in label)  # other renames: as before, skipped


def _cell_of(run: RunSummary) -> str | None:
    """A current run's cell as read (None for a previous release's run: its old-format tag is left alone)."""
    if run.identity is None or run.identity.legacy:
        return None
    return run.identity.cell_hash or run.tags.get("cell_hash")


def _resume(spec: TrialSpec, run: RunSummary) -> Planned:
    tags = run.tags
    round_tag = tags.get(CHECKPOINT_ROUND)
    legacy = bool(run.identity is not None and run.identity.legacy)
    recorded = (run.identity.recorded_hash if run.identity is not None else "") or tags.get(CHECKPOINT_HASH_TAG, "")
    return Planned(spec, run.run_id, tags.get(CHECKPOINT), int(round_tag) if round_tag and tags.get(CHECKPOINT) else None,
                   legacy, recorded)


def recell_tags(spec: TrialSpec) -> dict[str, str]:
    """The tags that move a finished run into the spec's cell: its folded identity (read as recorded from then)."""
    return {"config_hash": spec.config_hash, "config_key": spec.config_key, "cell_hash": spec.cell_hash,
            FOLDED_TAG: "true"}


def stale_summary(stale: list[tuple[TrialSpec, RunSummary, str]]) -> str:
    """One line: how many finished runs are stale, grouped by why (``aggregator/krum v1 -> v2: 12``)."""
    reasons: dict[str, int] = {}
    for _, _, why in stale:
        reasons[why] = reasons.get(why, 0) + 1
    parts = [f"{why} ({count})" for why, count in sorted(reasons.items(), key=lambda item: -item[1])]
    return f"{len(stale)} finished run(s) are stale and run again: " + "; ".join(parts)


def _failed_permanently(run: RunSummary) -> bool:
    return run.status == FAILED and run.tags.get(FAILURE_KIND) == PERMANENT


def check_data(plan: dict[str, Planned], cluster: bool = False) -> set[tuple]:
    """Every dataset the pending trials read is present here, before any trial starts; returns the
    (name, data_dir) present. On a cluster (``cluster``) the data lives on the workers: a dataset missing
    here is not an error, it is only left out of the preflight."""
    seen, present = set(), set()
    for planned in plan.values():
        dataset = planned.spec.config.dataset
        key = (dataset["name"], dataset.get("data_dir"))
        if key in seen:
            continue
        seen.add(key)
        if info(*key, verify=False)["complete"]:
            present.add(key)
        elif not cluster:
            raise BenchError(f"trials of this benchmark need data that is not here:\n{info_text(*key, verify=False)}"
                             f"\n(or leave this dataset out: --dataset picks one dataset of the scale)")
    return present


def data_key(planned: Planned) -> tuple:
    return planned.spec.config.dataset["name"], planned.spec.config.dataset.get("data_dir")


def print_plan(plan: dict[str, Planned], checked: Preflight, printer: Printer, present: set[tuple],
               decided: Plan | None = None, waiting: dict[str, Planned] | None = None,
               claimed: dict[str, str] | None = None) -> None:
    """One line per trial (new, resume, CANNOT RUN with why; trials whose data is not here are not built; a
    stale run's reason; reuse of another suite's run; waiting for another running benchmark), then the
    summary of what cannot run and the datasets to fetch."""
    problems = {spec.config_hash: error for spec, error in checked.problems}
    stale = {spec.config_hash: why for spec, _, why in (decided.stale if decided else ())}
    for spec, source in decided.reuse if decided else ():
        printer.emit(f"  reuse  {spec.name} [{spec.config_hash}]: run {source.run_id[:8]} of suite "
                     f"{source.tags.get('suite', '?')}")
    for config_hash, planned in (waiting or {}).items():
        printer.emit(f"  wait   {planned.spec.name} [{config_hash}]: computed by the running benchmark of suite "
                     f"{(claimed or {}).get(config_hash, '?')}")
    for planned in plan.values():
        spec = planned.spec
        word = "CANNOT RUN" if spec.config_hash in problems else ("resume" if planned.run_id else "new   ")
        line = f"  {word} {spec.name} [{spec.config_hash}]"
        if spec.config_hash in problems:
            line += f": {problems[spec.config_hash]}"
        elif data_key(planned) not in present:
            line += " (data not here: not checked)"
        if spec.config_hash in stale:
            line += f" (its finished run is stale: {stale[spec.config_hash]})"
        printer.emit(line)
    if checked.problems:
        printer.emit(checked.summary(len(plan)))
    missing = sorted({data_key(p)[0] for p in plan.values() if data_key(p) not in present})
    if missing:
        printer.emit(f"data not here for: {', '.join(missing)} (see `fedarena data info NAME`)")


def excluded_lines(excluded: list[Excluded], each: bool) -> list[str]:
    """The grid points the suite's deployment entries exclude, with their reasons: one line each (``each``, a dry
    run's plan), else one line per reason with its count and an example."""
    if not excluded:
        return []
    head = [f"{len(excluded)} grid point(s) excluded: undefined under their deployment, or the same trial as "
            f"another deployment's (the tables show why)"]
    if each:
        return head + [f"  excluded {point.name}: {point.reason}" for point in excluded]
    reasons: dict[tuple[str, str], list[Excluded]] = {}
    for point in excluded:
        reasons.setdefault((point.deployment_label, _general(point)), []).append(point)
    return head + [f"  {len(points)} of {deployment}: {why} (e.g. {points[0].name})"
                   for (deployment, why), points in reasons.items()]


def _general(point: Excluded) -> str:
    """A reason without the trial it names (a same-trial reason names the trial kept)."""
    same = f": the same trial as {point.same_as}'s" if point.same_as else ""
    return point.reason.split(": the same trial as ")[0] + same


def lock_folder(uri: str, storage: str | Path) -> Path:
    """Where the suite lock lives: beside a local SQLite store (every benchmark on it sees it), else in the
    local storage folder, else in the user's cache."""
    db = sqlite_path(uri)
    if db is not None:
        return db.parent / ".fedarena" / "locks"
    return (meta_dir(storage) or Path.home() / ".cache" / "fedarena") / "locks"


def check_free_space(storage: str | Path, at_once: int, checked: Preflight) -> int:
    """The bytes the checkpoints of the trials that run at once need (each keeps up to ``CHECKPOINT_COPIES``
    copies while it runs; finished trials' are removed); fail before any trial starts when the storage has
    less free space."""
    free = free_bytes(storage)
    needed = checked.disk_needed(at_once)
    if free is not None and needed > free:
        raise StorageFullError(
            f"storage {storage} has {human(free)} free; the checkpoints of {at_once} trials at once need about "
            f"{human(needed)}. Free space, point --storage at a larger disk, or lower --max-concurrent")
    return needed
