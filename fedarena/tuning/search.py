"""``fedarena tune`` / ``fedarena.tune``: the same budget of configurations for every row, searched by Ray Tune.

Per row and dataset (``targets.Target``), one Ray Tune experiment: ``budget`` trials drawn by a Tune search
algorithm (``random``: ``BasicVariantGenerator`` seeded; ``optuna``: ``OptunaSearch`` seeded, where optuna is
installed), ASHA stopping configurations whose worst case falls behind after a few attacks. Each trial is one
configuration: its tuning-battery runs, one after the other (``objective.tune_trial``).

Recorded: in the MLflow experiment ``tune`` of the store, one run per configuration (its values as params; the
worst validation accuracy and each attack's as metrics; tags: the search's key, row, dataset, suite, scale,
trial id, whether ASHA let it finish) and one ``choice`` run per search (the chosen values, trials run, the
best-so-far curve); then the frozen file (``suites.tuned``). A search whose ``choice`` run is in the store is not
run again; a killed one resumes from Ray Tune's experiment folder (``storage/fedarena-tune/<key>``): its finished
configurations are not run again. A search in which no configuration finished every tuning attack is an error
(``outcome_of``), never a frozen choice over fewer attacks.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedarena.battery.definition import battery_suite, row_of
from fedarena.bench.guard import ray_logs_to_file
from fedarena.bench.runner import ray_session
from fedarena.contracts import load_checked
from fedarena.plugins import shipped
from fedarena.search_space import DEFAULT_SHARED, parse_domain
from fedarena.suites.parse import load_suite
from fedarena.suites.tuned import digest, write_frozen
from fedarena.tracking.environ import env_vars
from fedarena.tracking.location import tracking_uri as resolve_uri
from fedarena.tracking.reading import all_runs
from fedarena.tracking.store import check_store, suite_experiment
from fedarena.tuning.objective import OBJECTIVE, PROGRESS, plain, tune_trial
from fedarena.tuning.targets import Target, TuneError, check_budget, targets_of, tuning_battery, tuning_seeds

EXPERIMENT = "tune"
SEARCHERS = ("random", "optuna")


@dataclass
class Outcome:
    """A finished search: the chosen values, its objective, the trials run and the best-so-far curve."""

    values: dict[str, Any]
    objective: float
    trials: int
    curve: list[float]
    key: str
    reused: bool = False
    configs: list[tuple[dict, dict]] = field(default_factory=list)  # each configuration's values and last report


def tune(suite: str | Path | None = None, *, scale: str = "quick", budget: int = 8, out: str | Path,
         aggregator: str | None = None, method: str | None = None, rows: tuple[str, ...] | None = None,
         searcher: str = "random", seed: int = 0, keys: tuple[str, ...] = DEFAULT_SHARED,
         space: dict[str, str] | None = None, include=(), tracking_uri: str | None = None,
         storage: str | Path = "ray_results", num_cpus: int | None = None,
         emit: Callable[[str], None] = print) -> dict:
    """Tune every row of ``suite`` (or the battery's row of ``aggregator`` / ``method``) at ``scale`` with
    ``budget`` configurations each; write the frozen file ``out`` and return its contents."""
    budget = check_budget(budget)
    if Path(out).is_dir():
        raise TuneError(f"--out {out}: a folder; give the frozen choice's file path (e.g. {Path(out) / 'tuned.yaml'})")
    if searcher not in SEARCHERS:
        raise TuneError(f"--searcher {searcher!r}: choose one of {', '.join(SEARCHERS)}")
    if searcher == "optuna":
        _optuna_installed()
    load_checked(include)
    extra = {key: parse_domain(text, key) for key, text in (space or {}).items()}
    chosen = _suite_of(suite, aggregator, method, scale)
    targets, skipped = targets_of(chosen, scale, rows=rows, keys=tuple(keys), extra=extra)
    if not targets:
        raise TuneError(f"nothing to tune in {chosen.name} at {scale}: {'; '.join(f'{k}: {v}' for k, v in skipped.items())}")
    for pair, why in skipped.items():
        emit(f"{pair}: not tuned ({why}); it runs as written there")
    level, attacks, version = tuning_battery()
    settings = {"budget": budget, "searcher": searcher, "seed": seed, "battery_version": version}
    uri = resolve_uri(tracking_uri)
    keys_of = {id(t): t.key(**settings) for t in targets}
    store = _tune_experiment(uri)  # one client for every search's lookups and records
    stored = {key: _stored(store, key) for key in keys_of.values()}  # finished searches are not run again
    outcomes = {}
    session = ray_session(num_cpus) if None in stored.values() else contextlib.nullcontext()
    with session:
        for target in targets:
            key = keys_of[id(target)]
            outcome = stored[key] or _search(target, key, budget, searcher, seed, Path(storage))
            if not outcome.reused:
                _record(store, chosen.name, scale, target, outcome)
            emit(f"{target.row} {target.dataset}: {_values_text(outcome.values)} worst validation accuracy "
                 f"{outcome.objective:.3f} ({outcome.trials} configurations{', from the store' if outcome.reused else ''})")
            outcomes.setdefault(target.row, {})[target.dataset] = {
                "values": outcome.values, "trials": outcome.trials, "objective": round(outcome.objective, 6),
                "curve": [round(v, 6) for v in outcome.curve], "key": key}
    seeds = list(tuning_seeds(chosen))
    data = {"suite": chosen.name, "scale": scale, "budget": budget, "searcher": searcher, "seed": seed,
            "battery_version": version, "tuning_seeds": seeds,
            "objective": f"worst {OBJECTIVE} over {', '.join(a.label for a in attacks)} at {level:g} on seed "
                         f"{', '.join(map(str, seeds))} (no reported seed)",
            "rows": outcomes, **({"skipped": skipped} if skipped else {})}
    write_frozen(data, out)
    use = (f"fedarena evaluate --{'aggregator' if aggregator else 'method'} {aggregator or method}"
           if suite is None else f"fedarena bench run {chosen.name}")
    emit(f"wrote {out} (digest {digest(out)}); use it: {use} --scale {scale} --tuned {out}")
    return data


def parse_space_args(items: list[str]) -> dict[str, str]:
    """``KEY=DOMAIN`` command-line items as a mapping (the domains are parsed with the rest, before Ray)."""
    out = {}
    for item in items or ():
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise TuneError(f"--space {item!r}: write KEY=DOMAIN, e.g. aggregator.lam=loguniform(0.0001, 0.01)")
        out[key.strip()] = text.strip()
    return out


def _suite_of(suite, aggregator: str | None, method: str | None, scale: str):
    if bool(aggregator) + bool(method) + (suite is not None) != 1:
        raise TuneError("tune needs exactly one of SUITE, --aggregator NAME or --method NAME")
    if suite is not None:
        return load_suite(suite)
    kind = "aggregator" if aggregator else "method"
    return battery_suite([row_of(kind, aggregator or method)], scale).suite


def _optuna_installed() -> None:
    try:
        import optuna  # noqa: F401
    except ImportError:
        raise TuneError("--searcher optuna needs the optuna package: pip install optuna (into fedarena's "
                        "environment), or use --searcher random") from None


def _searcher(name: str, seed: int):
    if name == "optuna":
        from ray.tune.search.optuna import OptunaSearch

        return OptunaSearch(seed=seed)
    from ray.tune.search.basic_variant import BasicVariantGenerator

    return BasicVariantGenerator(random_state=seed)


def _search(target: Target, key: str, budget: int, searcher: str, seed: int, storage: Path) -> Outcome:
    """Run (or resume) the target's Ray Tune experiment and read its trials back."""
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    folder = (storage / "fedarena-tune").resolve()
    trainable = tune.with_resources(tune.with_parameters(tune_trial, runs=target.runs, plugins=shipped()), {"cpu": 1})
    if tune.Tuner.can_restore(str(folder / key)):
        tuner = tune.Tuner.restore(str(folder / key), trainable, resume_unfinished=True, resume_errored=True)
    else:
        tuner = tune.Tuner(
            trainable, param_space={k: d.to_tune() for k, d in target.space.items()},
            tune_config=tune.TuneConfig(
                metric="objective", mode="max", num_samples=budget, search_alg=_searcher(searcher, seed),
                reuse_actors=True,
                scheduler=ASHAScheduler(time_attr=PROGRESS, max_t=len(target.runs), grace_period=1,
                                        reduction_factor=2)),
            run_config=tune.RunConfig(name=key, storage_path=str(folder), verbose=0))
    # the experiment state is saved after every step, so a killed search resumes with every finished trial
    with ray_logs_to_file(folder / "logs"), env_vars(RAY_AIR_NEW_OUTPUT="0", TUNE_GLOBAL_CHECKPOINT_S="0"):
        grid = tuner.fit()
    return outcome_of(grid, target, key)


def outcome_of(grid, target: Target, key: str) -> Outcome:
    """The best finished configuration of a result grid (ASHA's stopped ones hold an upper bound only) and the
    best-so-far curve over the configurations in the order they were drawn."""
    results = sorted((r for r in grid if r.metrics and "objective" in r.metrics), key=lambda r: r.metrics["trial_id"])
    if not results:
        errors = [str(r.error) for r in grid if r.error is not None]
        raise TuneError(f"{target.row} {target.dataset}: no configuration finished"
                        + (f"; first error: {errors[0].splitlines()[-1]}" if errors else ""))
    full = len(target.runs)
    best, best_values, curve = -1.0, {}, []
    for r in results:
        if r.metrics[PROGRESS] == full and r.metrics["objective"] > best:
            best, best_values = float(r.metrics["objective"]), {k: plain(r.config[k]) for k in target.space}
        curve.append(max(best, 0.0))
    if not best_values:  # an objective over fewer attacks is not the objective: no frozen -1
        done = max(int(r.metrics[PROGRESS]) for r in results)
        raise TuneError(f"{target.row} {target.dataset}: no configuration finished the tuning battery ({len(results)} "
                        f"configurations ran, the furthest {done} of its {full} attacks); nothing to choose")
    configs = [({k: plain(r.config[k]) for k in target.space}, dict(r.metrics)) for r in results]
    return Outcome(best_values, best, len(results), curve, key, configs=configs)


def _tune_experiment(uri: str):
    """(MLflow client, id of the experiment ``tune``) of the store."""
    client = check_store(uri)
    return client, suite_experiment(client, uri, EXPERIMENT)


def _stored(store, key: str) -> Outcome | None:
    """The search's outcome from its ``choice`` run in the store, if it finished before."""
    client, experiment = store
    found = all_runs(client, experiment, f"tags.tune_key = '{key}' and tags.tune_choice = 'true'")
    if not found:
        return None
    tags = found[0].data.tags
    return Outcome(json.loads(tags["tune_values"]), float(found[0].data.metrics["objective"]),
                   int(found[0].data.metrics["trials"]), json.loads(tags["tune_curve"]), key, reused=True)


def _record(store, suite: str, scale: str, target: Target, outcome: Outcome) -> None:
    """One run per configuration (not already recorded) and the search's ``choice`` run."""
    client, experiment = store
    common = {"tune_key": outcome.key, "tune_suite": suite, "tune_scale": scale, "tune_row": target.row,
              "tune_dataset": target.dataset}
    recorded = {r.data.tags.get("tune_trial") for r in all_runs(client, experiment, f"tags.tune_key = '{outcome.key}'")}
    for values, metrics in outcome.configs:
        if metrics["trial_id"] in recorded:
            continue
        run = client.create_run(experiment, run_name=f"{target.row} {target.dataset} {metrics['trial_id']}",
                                tags={**common, "tune_trial": metrics["trial_id"],
                                      "tune_finished": str(metrics[PROGRESS] == len(target.runs)).lower()})
        for k, v in values.items():
            client.log_param(run.info.run_id, k, v)
        for name, value in metrics.items():
            if name == "objective" or name == PROGRESS or name.startswith("val_"):
                client.log_metric(run.info.run_id, name, float(value))
        client.set_terminated(run.info.run_id)
    run = client.create_run(experiment, run_name=f"{target.row} {target.dataset} choice",
                            tags={**common, "tune_choice": "true", "tune_values": json.dumps(outcome.values),
                                  "tune_curve": json.dumps(outcome.curve),
                                  "tune_space": json.dumps({k: d.text() for k, d in target.space.items()})})
    for k, v in outcome.values.items():
        client.log_param(run.info.run_id, k, v)
    client.log_metric(run.info.run_id, "objective", outcome.objective)
    client.log_metric(run.info.run_id, "trials", outcome.trials)
    client.set_terminated(run.info.run_id)


def _values_text(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items())

