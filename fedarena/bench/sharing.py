"""Trials a suite shares with other suites (the same identity): copied from the run that computed them
(``RunStore.link``) instead of computed again, and, where another benchmark is computing one right now
(``bench.claims``), waited for.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from fedarena.bench.callback import Planned, identity_tags
from fedarena.bench.claims import Claims
from fedarena.bench.progress import Printer
from fedarena.suites.grid import TrialSpec
from fedarena.tracking.notes import NOTE_TAG, run_note
from fedarena.tracking.runs import RunStore, RunSummary, run_params

POLL_S = 2.0


def link_runs(store: RunStore, reuse: list[tuple[TrialSpec, RunSummary]], versions: dict[str, str],
              printer: Printer) -> int:
    """Copy each finished run of another suite into this suite's experiment under this suite's labels."""
    for spec, source in reuse:
        tags = identity_tags(spec, versions)
        tags[NOTE_TAG] = (run_note(tags, spec.config.flat()) + f" Computed by suite {source.tags.get('suite', '?')} "
                          f"(run {source.run_id}) and reused here.")
        store.link(source, spec.name, run_params(spec.config.flat()), tags)
    if reuse:
        printer.emit(f"{len(reuse)} trial(s) reused from other suites' runs (same identity; copied, not computed)")
    return len(reuse)


def await_claimed(store: RunStore, waiting: dict[str, Planned], claimed_by: dict[str, str], claims: Claims,
                  versions: dict[str, str], printer: Printer, sleep: Callable[[float], None] = time.sleep
                  ) -> dict[str, Planned]:
    """Wait until every trial another live benchmark claimed is finished there (then copy it here) or that
    benchmark has ended without finishing it; returns those left to compute here."""
    if not waiting:
        return {}
    suites = ", ".join(sorted(set(claimed_by.values())))
    printer.emit(f"waiting for {len(waiting)} trial(s) that the running benchmark of {suites} computes")
    left = dict(waiting)
    while left:
        for config_hash in list(left):
            source = store.finished_with(config_hash)
            if source is not None:
                link_runs(store, [(left.pop(config_hash).spec, source)], versions, Printer(lambda line: None))
        live = claims.others()
        orphans = {h: p for h, p in left.items() if h not in live}
        if orphans and len(orphans) == len(left):
            break
        if left:
            sleep(POLL_S)
    done = len(waiting) - len(left)
    printer.emit(f"{done} trial(s) computed by {suites} reused" + (f"; {len(left)} it did not finish run here"
                                                                   if left else ""))
    return left
