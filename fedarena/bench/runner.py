"""``fedarena bench run``: expand a suite, skip what is done, run the rest on Ray Tune, track in MLflow.

Order (every check before Ray starts): load and validate the suite -> expand the grid at the scale ->
check the tracking store answers -> find the suite's experiment -> plan by identity (``config_hash``:
the values a trial uses and the versions of its components, ``simulation.identity``): a trial with a
FINISHED run is skipped; one another suite finished is copied from that run (``bench.sharing``); one with
an unfinished run (FAILED, KILLED, or RUNNING from an interrupted benchmark) continues that run from the
checkpoint recorded in its ``checkpoint`` tag; a finished run of the trial's values at other versions is
stale (the trial runs anew, the plan says why); a trial another running benchmark claimed
(``bench.claims``) is waited for and copied -> start (or join, with ``RAY_ADDRESS``) Ray -> one Tune trial
per remaining federated run.

Running the same command again therefore resumes an interrupted benchmark and never duplicates a
finished trial. A trial that failed with an error no retry can fix (tag ``failure=permanent``) is skipped,
with a line saying why, unless ``retry_failed``. Before Ray starts, every pending trial's plan is built
without training (``preflight``) and the free space of the storage is checked against its checkpoints.
A second benchmark of the same suite on the same store is refused while one runs (``guard.SuiteLock``);
SIGTERM acts as Ctrl+C; Ray's log lines go to a file under the storage (``guard``).
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from fedarena.bench.budget import DEFAULT_FRACTION
from fedarena.bench.callback import Planned, StoreStopper, TrackingCallback
from fedarena.bench.claims import Claims
from fedarena.bench.guard import (
    SIGTERM_EXIT,
    StorageFullError,
    SuiteLock,
    TermAsInterrupt,
    clear_scratch,
    is_storage_full,
    meta_dir,
    ray_logs_to_file,
    storage_full_message,
)
from fedarena.bench.plan import (
    BenchError,
    check_data,
    check_free_space,
    data_key,
    excluded_lines,
    lock_folder,
    plan_trials,
    print_plan,
    recell_tags,
    stale_summary,
)
from fedarena.bench.preflight import preflight
from fedarena.bench.progress import Printer
from fedarena.bench.sharing import await_claimed, link_runs
from fedarena.bench.trainable import auto_checkpoint_every, packed_payloads, run_trial, trial_payload
from fedarena.contracts import load_checked
from fedarena.isolation import shipped as shipped_isolated
from fedarena.plugins import shipped
from fedarena.simulation.experiment import code_version
from fedarena.suites.grid import Excluded, TrialSpec, expand_grid
from fedarena.suites.parse import load_suite
from fedarena.suites.spec import Suite
from fedarena.suites.tuned import with_tuned
from fedarena.tracking.environ import env_vars
from fedarena.tracking.location import TrackingError, first_line, redact, sqlite_path, tracking_uri
from fedarena.tracking.runs import FAILED, FINISHED, RunStore, version_tags
from fedarena.tracking.store import check_store, suite_experiment, use_write_ahead_log

__all__ = ["BenchError", "BenchOptions", "BenchSummary", "benchmark", "run_bench"]

RAY_SHUTDOWN_S = 15.0
EXPERIMENT_STATE_S = 900  # Tune's experiment state, written every 15 minutes (``_fit``)
# MLflow's HTTP client retries a failed request 7 times with exponential backoff (about 4 minutes, and up to
# 120 s per request): a tracking server that goes away would hold the whole benchmark that long before it
# stops. A benchmark loses nothing by stopping (a rerun resumes), so it gives up after about 15 s of outage;
# settings of the user's own environment win.
HTTP_RETRIES = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "4", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}
# Checkpoints Tune keeps per trial: the one recorded in the store must survive until the next is recorded
# (with one, Tune drops it when a newer one arrives, also when recording that one failed).
CHECKPOINTS_KEPT = 2


@dataclass
class BenchOptions:
    suite: str
    scale: str = "quick"
    dataset: str | None = None
    seeds: tuple[int, ...] | None = None
    cpus_per_trial: float = 1.0
    gpus_per_trial: float = 0.0
    max_concurrent: int | None = None
    max_failures: int = 2
    checkpoint_every: int | None = None  # None: the scale's, else about ten per trial; 0: only the final one
    storage: str | Path = "ray_results"  # a folder, or a URI Ray Tune understands (s3://...)
    tracking_uri: str | None = None
    num_cpus: int | None = None  # size of a local Ray instance (default: every core)
    dry_run: bool = False
    retry_failed: bool = False  # also run trials that failed permanently before (default: skip them)
    # called in each trial's process after every round: hook(trial_name, resumed_from_round, round), e.g. to
    # inject faults (tests) or watch progress; it must be picklable (Ray ships it to the workers)
    round_hook: Callable[[str, int, int], None] | None = None
    include: tuple[str, ...] = ()  # plugin files or packages (``fedarena.plugins``; also FEDARENA_INCLUDE, entry points)
    tuned: str | None = None  # a frozen choice of ``fedarena tune`` (its rows' values; ``suites.tuned``)


@dataclass
class BenchSummary:
    total: int
    skipped: int
    resumed: int
    finished: int = 0
    failed: int = 0
    killed: int = 0
    tracking_uri: str = ""
    skipped_failed: int = 0  # trials skipped because they failed permanently before
    unbuildable: int = 0  # trials whose plan cannot be built (dry run)
    terminated: bool = False  # SIGTERM stopped the benchmark
    ray_stuck: bool = False  # Ray did not shut down in time (its processes were killed too): exit at once
    not_started: int = 0  # planned trials an interrupted benchmark never started
    reused: int = 0  # trials another suite computed: copied from its runs
    stale: int = 0  # finished runs of the suite's trials at other component versions (run again)
    excluded: int = 0  # grid points its deployment entries exclude (undefined, or the same trial as another's)

    @property
    def ok(self) -> bool:
        return not (self.failed or self.killed or self.not_started or self.skipped_failed or self.unbuildable)


@contextlib.contextmanager
def ray_session(num_cpus: int | None):
    """Local Ray (every core, no dashboard) unless Ray is already up or ``RAY_ADDRESS`` names a cluster."""
    import ray

    if ray.is_initialized():
        yield lambda: True
        return
    if os.environ.get("RAY_ADDRESS"):
        ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False)
    else:
        ray.init(num_cpus=num_cpus or os.cpu_count(), include_dashboard=False, log_to_driver=False)
    stopped = []
    try:
        yield lambda: bool(stopped)
    finally:
        stopped.append(_shutdown_within(ray.shutdown, RAY_SHUTDOWN_S))


def _shutdown_within(shutdown, seconds: float) -> bool:
    """Run Ray's shutdown, waiting at most ``seconds``: when a group-wide SIGTERM (``timeout``, a batch
    scheduler) also ended Ray's own processes, it would wait for them a minute and then abort."""
    worker = threading.Thread(target=shutdown, daemon=True, name="fedarena-ray-shutdown")
    worker.start()
    worker.join(seconds)
    return not worker.is_alive()


def check_resources(cpus: float, gpus: float) -> None:
    import ray

    have = ray.cluster_resources()
    if cpus <= 0 or cpus > have.get("CPU", 0):
        raise BenchError(f"--cpus-per-trial {cpus}: the Ray cluster has {have.get('CPU', 0):g} CPUs")
    if gpus < 0 or gpus > have.get("GPU", 0):
        raise BenchError(f"--gpus-per-trial {gpus}: the Ray cluster has {have.get('GPU', 0):g} GPUs")


def open_store(explicit_uri: str | None, suite: str) -> tuple[RunStore, str]:
    """The suite's experiment in a store that answers (fails fast, naming the store)."""
    uri = tracking_uri(explicit_uri)
    use_write_ahead_log(uri)  # the driver commits a few times a trial
    client = check_store(uri)
    return RunStore(client, suite_experiment(client, uri, suite)), uri


def benchmark(suite: str | Path, scale: str = "quick", *, include=(), tracking_uri: str | None = None,
              printer: Printer | None = None, **options) -> BenchSummary:
    """``fedarena bench run`` (``fedarena.benchmark``): a suite at a scale on Ray Tune, tracked in MLflow
    (``options``: the other ``BenchOptions``, e.g. ``seeds``, ``storage``, ``dry_run``)."""
    return run_bench(BenchOptions(str(suite), scale, tracking_uri=tracking_uri, include=tuple(map(str, include)),
                                  **options), printer)


def run_bench(options: BenchOptions, printer: Printer | None = None, suite: Suite | None = None) -> BenchSummary:
    """Validate, plan and run a suite at a scale (see the module docstring); returns the counts. ``suite``: a
    suite built in memory (the threat battery's), instead of the one ``options.suite`` names."""
    printer = printer or Printer()
    options = replace(options, tracking_uri=tracking_uri(options.tracking_uri))  # worked out once, here
    load_checked(options.include)  # before the suite: its names may be a plugin's
    suite = suite if suite is not None else load_suite(options.suite)
    if options.tuned is not None:
        suite = with_tuned(suite, options.scale, options.tuned)
    device = "cuda" if options.gpus_per_trial > 0 else "cpu"
    grid = expand_grid(suite, options.scale, dataset=options.dataset, seeds=options.seeds, device=device)
    specs = grid.trials
    with env_vars(**{name: os.environ.get(name, value) for name, value in HTTP_RETRIES.items()}):
        store, uri = open_store(options.tracking_uri, suite.name)
        folder = lock_folder(uri, options.storage)
        lock = SuiteLock(folder, suite.name, uri)
        claims = Claims(folder, suite.name, uri, lock.path)
        if not options.dry_run:
            lock.acquire(redact(uri))
        try:
            return _plan_and_run(options, suite, specs, store, uri, printer, claims, grid.excluded)
        finally:
            if not options.dry_run:
                claims.release()
            lock.release()


def _plan_and_run(options: BenchOptions, suite, specs: list[TrialSpec], store: RunStore, uri: str,
                  printer: Printer, claims: Claims, excluded: list[Excluded] = ()) -> BenchSummary:
    with claims.planning():  # no claim is released between reading the store and reading the claims
        own = store.runs()
        planned = plan_trials(specs, own, None, options.retry_failed)
        if any(not p.run_id for p in planned.pending.values()):  # new trials: another suite may have finished them
            planned = plan_trials(specs, own, store.finished_elsewhere(), options.retry_failed)
        plan = planned.pending
        claimed = claims.others() if options.dry_run else claims.claim(plan)
    waiting = {h: plan.pop(h) for h in claimed if h in plan}
    summary = BenchSummary(len(specs), planned.skipped, planned.resumed, tracking_uri=redact(uri),
                           skipped_failed=len(planned.failed), reused=len(planned.reuse), stale=len(planned.stale),
                           excluded=len(excluded))
    reused = f"{len(planned.reuse)} finished by other suites (reused), " if planned.reuse else ""
    printer.emit(f"suite {suite.name!r} at scale {options.scale!r}: {len(specs)} trials; {planned.skipped} already "
                 f"finished in {redact(uri)} (skipped), {reused}{planned.resumed} to resume, "
                 f"{len(plan) - planned.resumed} new"
                 + (f", {len(waiting)} computed by another running benchmark (waited for)" if waiting else ""))
    for line in excluded_lines(excluded, each=options.dry_run):
        printer.emit(line)
    if planned.stale:
        printer.emit(stale_summary(planned.stale))
    if planned.failed:
        failed = planned.failed
        printer.emit(f"{len(failed)} trial(s) skipped: they failed with an error a rerun cannot fix, e.g. "
                     f"{failed[0][0].name}: {failed[0][1]} (fix the suite, or pass --retry-failed to run them again)")
    cluster = bool(os.environ.get("RAY_ADDRESS"))
    present = check_data(plan, cluster or options.dry_run)  # a dry run shows the plan without the data too
    checked = preflight([p.spec for p in plan.values() if data_key(p) in present])
    if options.dry_run:
        print_plan(plan, checked, printer, present, planned, waiting, claimed)
        summary.unbuildable = len(checked.problems)
        return summary
    if checked.problems:
        raise BenchError(checked.summary(len(plan)))
    versions = version_tags(code_version())
    link_runs(store, planned.reuse, versions, printer)
    for run, spec in planned.recell:  # a finished run that belongs to another cell of this suite today
        store.set_tags(run.run_id, recell_tags(spec))
    scale_every = suite.scales[options.scale].checkpoint_every
    if plan:
        _execute(options, suite.name, store, plan, printer, summary, scale_every, _space(options, checked))
    if summary.terminated or summary.killed:
        return summary
    left = await_claimed(store, waiting, claimed, claims, versions, printer)
    summary.reused += len(waiting) - len(left)
    if left:  # the benchmark that claimed them ended without finishing them: they run here
        claims.claim(left)
        checked = preflight([p.spec for p in left.values()])
        if checked.problems:
            raise BenchError(checked.summary(len(left)))
        before = (summary.finished, summary.failed)
        _execute(options, suite.name, store, left, printer, summary, scale_every, _space(options, checked))
        summary.finished, summary.failed = summary.finished + before[0], summary.failed + before[1]
    return summary


def _space(options: BenchOptions, checked) -> int:
    at_once = options.max_concurrent or max(1, int((options.num_cpus or os.cpu_count() or 1)
                                                   // options.cpus_per_trial))
    return check_free_space(options.storage, at_once, checked)


def checkpoint_spacing(option: int | None, scale: int | None, rounds: int, eval_every: int
                       ) -> tuple[int, float | None]:
    """(rounds between a trial's checkpoints, 0: only the final one; the time budget): ``--checkpoint-every``
    > the scale's ``checkpoint_every`` (exactly those rounds) > about ten per trial, each only when
    checkpoints stay within ``DEFAULT_FRACTION`` of the trial's time (``bench.budget``)."""
    for chosen in (option, scale):
        if chosen is not None:
            return chosen, None
    return auto_checkpoint_every(rounds, eval_every), DEFAULT_FRACTION


def _execute(options: BenchOptions, suite: str, store: RunStore, plan: dict[str, Planned], printer: Printer,
             summary: BenchSummary, scale_every: int | None = None, needed: int | None = None) -> None:
    meta = meta_dir(options.storage)
    scratch = meta / "tmp" / suite if meta is not None else None
    clear_scratch(scratch)  # what a killed benchmark of this suite left (we hold the suite's lock)
    callback = TrackingCallback(store, plan, version_tags(code_version()), printer)
    signals = TermAsInterrupt(on_stuck=lambda: _exit_stuck(summary, callback, printer, suite))
    try:
        with signals, ray_logs_to_file(meta / "logs" if meta else None), ray_session(options.num_cpus) as stopped:
            signals.install()  # after Ray's start, which installs its own SIGTERM handler
            check_resources(options.cpus_per_trial, options.gpus_per_trial)
            _fit(_tuner(options, suite, plan, callback, scale_every, scratch), callback, summary)
            summary.terminated = signals.received
            if callback.store_error is not None:
                raise callback.store_error
            _report(summary, callback, printer, suite)  # before Ray's shutdown, which may not come back
            signals.done()
    except Exception as err:
        if is_storage_full(err):
            paths = {"storage": options.storage, "store": sqlite_path(options.tracking_uri)}
            raise StorageFullError(storage_full_message(err, paths, needed)) from None
        if err is callback.store_error:
            raise TrackingError(f"the tracking store {redact(options.tracking_uri)} failed "
                                f"({_store_error_line(err)}); the benchmark stopped, nothing is lost: run the same "
                                f"command again when the store works, unfinished trials resume") from None
        raise
    summary.ray_stuck = not stopped()


def _exit_stuck(summary: BenchSummary, callback: TrackingCallback, printer: Printer, suite: str) -> None:
    """SIGTERM came, and Ray's clean-up hangs on its own killed processes: close the runs (KILLED: the next
    run resumes them), print the summary and leave with SIGTERM's exit status."""
    summary.killed = callback.close_open_runs()
    summary.terminated = True
    _report(summary, callback, printer, suite)
    sys.stdout.flush()
    os._exit(SIGTERM_EXIT)


def _store_error_line(err: BaseException) -> str:
    """The cause of a store's error in a few words: for a server MLflow gave up on, the request and the
    connection's error (``/api/2.0/mlflow/runs/log-batch: Connection refused``), else the first line."""
    text = str(err)
    gave_up = re.search(r"Max retries exceeded with url: (\S+)", text)
    if gave_up is None:  # a server that died while answering: the request and "Connection broken"
        broken = re.search(r"API request to \S+?(/api/\S+) failed with exception \('(Connection broken)", text)
        return f"{broken.group(1)}: {broken.group(2)}" if broken else first_line(err)[:300]
    reason = re.search(r"\[Errno -?\d+\] ([^\"')]+)|(timed out)", text)
    words = (reason.group(1) or reason.group(2)) if reason else "no answer"
    return f"{gave_up.group(1)}: {words}"


def _report(summary: BenchSummary, callback: TrackingCallback, printer: Printer, suite: str) -> None:
    summary.finished, summary.failed = callback.outcomes[FINISHED], callback.outcomes[FAILED]
    summary.not_started = len(callback.plan) - summary.finished - summary.failed - summary.killed
    waiting = f", {summary.not_started} not started" if summary.not_started else ""
    hint = " Run the same command again to resume." if summary.failed or summary.killed or waiting else ""
    printer.emit(f"done: {summary.finished} finished, {summary.failed} failed, {summary.killed} interrupted{waiting}, "
                 f"{summary.skipped} skipped.{hint} Browse: fedarena ui; tables: fedarena leaderboard {suite}")
    printer.summary(_cores())  # wall time, throughput and the slowest cells



def _cores() -> float | None:
    """The CPUs of the Ray cluster the benchmark ran on (None once Ray is gone)."""
    import ray

    return ray.cluster_resources().get("CPU") if ray.is_initialized() else None


def _fit(tuner, callback: TrackingCallback, summary: BenchSummary) -> None:
    # Tune's own per-trial JSON/CSV/TensorBoard files are off: MLflow is the record. Its experiment state (every
    # trial's JSON, rewritten every few seconds: 11% of the driver's time on the quick robustness suite) is never
    # read back, since a rerun is a new Tune experiment resuming from the store: it is written rarely.
    try:
        with env_vars(RAY_AIR_NEW_OUTPUT="0", TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S="0",
                      TUNE_DISABLE_AUTO_CALLBACK_LOGGERS="1", TUNE_GLOBAL_CHECKPOINT_S=str(EXPERIMENT_STATE_S)):
            tuner.fit()
    except KeyboardInterrupt:  # a second Ctrl+C (or SIGTERM) while Tune was stopping: the runs close below
        pass
    finally:
        summary.killed = callback.close_open_runs()


def _tuner(options: BenchOptions, suite: str, plan: dict[str, Planned], callback: TrackingCallback,
           scale_every: int | None = None, scratch: Path | None = None):
    """One Tune trial per planned run, each a point Tune's variant generator evaluates as given (``points_to_evaluate``;
    a grid search deep-copies its whole list for every trial it creates: 1,506 trials spent 10 s of the driver's
    start there). A trial's Tune config is its config hash, its index in the plan and its name; each payload (config)
    reaches the trainable pickled on its own (``packed_payloads``) through Ray's object store, once, so a worker unpickles
    only its trial's, not every trial's; every worker imports the plugins before it builds a trial."""
    from ray import tune
    from ray.tune.search.basic_variant import BasicVariantGenerator

    payloads, names = {}, {}
    driver = {"host": socket.gethostname(), "pid": os.getpid()}
    for index, planned in enumerate(plan.values()):
        cfg, spec = planned.spec.config, planned.spec
        every, budget = checkpoint_spacing(options.checkpoint_every, scale_every, cfg.rounds, cfg.eval_every)
        payloads[spec.config_hash] = trial_payload(
            cfg, spec.config_hash, spec.name, checkpoint_every=every, resume_from=planned.resume_from,
            scratch=str(scratch) if scratch else None, driver=driver, round_hook=options.round_hook, cpus=options.cpus_per_trial,
            checkpoint_budget=budget, legacy_hash=spec.legacy_hash if planned.resume_legacy else planned.resume_hash)
        names[spec.config_hash] = (index, spec.name)
    resources = {"cpu": options.cpus_per_trial, "gpu": options.gpus_per_trial}
    storage = str(options.storage) if "://" in str(options.storage) else Path(options.storage).resolve()
    # Keeping a bounded number of checkpoints per trial makes Tune snapshot its whole experiment state at every
    # checkpoint (quadratic in the trials); trials that only checkpoint at their end have one to keep anyway.
    keep = CHECKPOINTS_KEPT if any(p["checkpoint_every"] > 0 for p in payloads.values()) else None
    trainable = tune.with_parameters(run_trial, payloads=packed_payloads(payloads), plugins=shipped(),
                                     isolated=shipped_isolated())
    # a search algorithm of our own makes Tune ignore max_concurrent_trials: the generator holds the limit itself,
    # as the one Tune builds when given none
    points = BasicVariantGenerator(points_to_evaluate=[{"trial": config_hash, "index": index, "name": name}
                                                      for config_hash, (index, name) in names.items()],
                                   max_concurrent=options.max_concurrent or 0)
    return tune.Tuner(
        tune.with_resources(trainable, resources),
        # the keys each point sets (falsy placeholders: Tune checks a point against them)
        param_space={"trial": "", "index": 0, "name": ""},
        tune_config=tune.TuneConfig(search_alg=points, num_samples=len(names), reuse_actors=True,
                                    trial_name_creator=trial_name, trial_dirname_creator=trial_dirname),
        run_config=tune.RunConfig(
            name=f"{suite}-{options.scale}-{time.strftime('%Y%m%d-%H%M%S')}", storage_path=str(storage),
            verbose=0, callbacks=[callback], stop=StoreStopper(callback), failure_config=tune.FailureConfig(max_failures=options.max_failures),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=keep)),
    )  # fmt: skip


def trial_name(trial) -> str:
    """A Tune trial's name: its planned run's (from its point; Tune pickles the name creators for every trial it
    creates, so they hold no data: a creator holding the suite's 1,506 names cost the driver 4 ms a trial)."""
    return trial.config["name"]


def trial_dirname(trial) -> str:
    """A Tune trial's folder: its index in the plan and its config hash."""
    return f"{trial.config['index']:05d}_{trial.config['trial']}"
