"""Planning a benchmark before Ray starts: which trials run, resume or are skipped (``plan_trials``), whether
their data is here (``check_data``), the printed plan of a dry run, where the suite's lock lives and whether
the storage can hold the checkpoints (``check_free_space``)."""

from __future__ import annotations

from pathlib import Path

from fedarena.bench.callback import Planned
from fedarena.bench.grid import TrialSpec
from fedarena.bench.guard import StorageFullError, free_bytes, human, meta_dir
from fedarena.bench.preflight import Preflight
from fedarena.bench.progress import Printer
from fedarena.datasets.files.fetch import info, info_text
from fedarena.errors import ConfigError
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


class BenchError(ConfigError):
    """The benchmark cannot start (resources, Ray, data, trials that cannot be built)."""


def plan_trials(specs: list[TrialSpec], existing: dict[str, list[RunSummary]], retry_failed: bool = False
                ) -> tuple[dict[str, Planned], int, list[tuple[TrialSpec, str]]]:
    """(trials to run by config hash, number skipped because a FINISHED run exists, trials skipped because
    their newest run failed permanently, with its error; ``retry_failed`` runs those again)."""
    plan, skipped, failed = {}, 0, []
    for spec in specs:
        runs = existing.get(spec.config_hash, [])
        if any(run.status == FINISHED for run in runs):
            skipped += 1
        elif runs and _failed_permanently(runs[0]) and not retry_failed:
            failed.append((spec, runs[0].tags.get(ERROR, "unknown error")))
        elif runs:  # newest unfinished run: continue it from its last checkpoint
            tags = runs[0].tags
            round_tag = tags.get(CHECKPOINT_ROUND)
            plan[spec.config_hash] = Planned(spec, runs[0].run_id, tags.get(CHECKPOINT),
                                             int(round_tag) if round_tag and tags.get(CHECKPOINT) else None)
        else:
            plan[spec.config_hash] = Planned(spec)
    return plan, skipped, failed


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


def print_plan(plan: dict[str, Planned], checked: Preflight, printer: Printer, present: set[tuple]) -> None:
    """One line per trial (new, resume, CANNOT RUN with why; trials whose data is not here are not built),
    then the summary of what cannot run and the datasets to fetch."""
    problems = {spec.config_hash: error for spec, error in checked.problems}
    for planned in plan.values():
        spec = planned.spec
        word = "CANNOT RUN" if spec.config_hash in problems else ("resume" if planned.run_id else "new   ")
        line = f"  {word} {spec.name} [{spec.config_hash}]"
        if spec.config_hash in problems:
            line += f": {problems[spec.config_hash]}"
        elif data_key(planned) not in present:
            line += " (data not here: not checked)"
        printer.emit(line)
    if checked.problems:
        printer.emit(checked.summary(len(plan)))
    missing = sorted({data_key(p)[0] for p in plan.values() if data_key(p) not in present})
    if missing:
        printer.emit(f"data not here for: {', '.join(missing)} (see `fedarena data info NAME`)")


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
