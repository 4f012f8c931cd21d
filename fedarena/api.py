"""The Python API; the ``fedarena`` command is a thin layer over it (``cli.py`` and each ``commands.py``).

    import fedarena
    r = fedarena.run({"dataset": {"name": "digits"}, "method": {"name": "ditto"},
                      "attack": {"name": "a1", "level": 0.5}}, rounds=50, include=["my_rules.py"])
    r.final["acc_mean"]; r.history; r.clients      # pandas frames: one row per evaluated round / per device
    fedarena.benchmark("robustness", scale="quick", include=[...])   # `fedarena bench run`
    fedarena.runs("robustness")                                      # one row per run of the store
    fedarena.leaderboard("robustness", format="latex", out="tables/")

Every function loads the plugins first (``FEDARENA_INCLUDE``, ``include``, the installed entry points) and checks
their components (``contracts``), as the CLI does.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from fedarena.battery.harness import evaluate
from fedarena.bench.callback import identity_tags
from fedarena.bench.runner import BenchSummary, benchmark, open_store
from fedarena.bench.trainable import CLIENTS_FILE, RESULT_FILE, write_final
from fedarena.config import (
    SECTIONS,
    TOP_LEVEL_KEYS,
    ExperimentConfig,
    ResolvedConfig,
    apply_override,
    read_yaml_file,
)
from fedarena.contracts import load_checked
from fedarena.errors import ConfigError
from fedarena.leaderboards.build import leaderboard
from fedarena.plugins import PluginSource
from fedarena.sections import resolve_config, section_keys
from fedarena.simulation.costs import cost_metrics
from fedarena.simulation.experiment import code_version, run_experiment
from fedarena.simulation.identity import trial_identity
from fedarena.suites.grid import TrialSpec
from fedarena.tracking.notes import NOTE_TAG, run_note
from fedarena.tracking.reading import runs
from fedarena.tracking.runs import FINISHED, RunStore, run_name, run_params, version_tags
from fedarena.tuning.search import tune

ADHOC = "adhoc"  # the experiment of tracked single runs unless one is named
__all__ = ["ADHOC", "BenchSummary", "RunResult", "benchmark", "evaluate", "leaderboard", "load_plugins",
           "make_config", "run", "runs", "track_run", "tune"]


def load_plugins(include: Iterable[str | Path] = ()) -> list[PluginSource]:
    """Load and check the plugins (``FEDARENA_INCLUDE``, ``include``, installed entry points)."""
    return load_checked(include)


@dataclass(frozen=True)
class RunResult:
    """One experiment's result: ``record`` is what ``fedarena run --out`` writes; ``run_id`` its MLflow run
    where it was tracked."""

    record: dict
    run_id: str | None = None

    @property
    def final(self) -> dict:
        return self.record["final"]

    @property
    def history(self) -> pd.DataFrame:
        """One row per evaluated round (``round`` and every metric)."""
        return pd.DataFrame(self.record["history"])

    @property
    def clients(self) -> pd.DataFrame:
        """One row per device of the last evaluation."""
        return pd.DataFrame(self.record["clients"])

    @property
    def config(self) -> dict:
        return self.record["config"]

    @property
    def config_hash(self) -> str:
        return self.record["config_hash"]

    @property
    def versions(self) -> dict:
        return self.record["component_versions"]


def make_config(config: ExperimentConfig | Mapping[str, Any] | str | Path | None = None,
                sets: Iterable[tuple[str, Any]] = (), **settings) -> ExperimentConfig:
    """A config from a mapping, an ``ExperimentConfig`` or a YAML file, with ``sets`` (``--set`` pairs, in order)
    then ``settings`` applied as ``--set`` applies them: top-level keys (``rounds=50``), ``section.key`` or a
    chosen component's hyperparameters by bare name (``lam=0.1``); the config is resolved once however many
    settings there are."""
    pairs = [*sets, *settings.items()]
    if isinstance(config, ResolvedConfig) and not pairs:  # what the CLI built: taken as it is, not resolved again
        return config
    if config is None:
        data = ExperimentConfig().to_dict()
    elif isinstance(config, ExperimentConfig):
        data = config.to_dict()
    elif isinstance(config, (str, Path)):
        loaded = read_yaml_file(Path(config)) or {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{config}: expected a mapping of config keys, got {type(loaded).__name__}")
        data = {**ExperimentConfig().to_dict(), **loaded}
    else:
        data = {**ExperimentConfig().to_dict(), **dict(config)}
    if pairs:
        apply_settings(data, pairs)
    return resolve_config(ExperimentConfig.from_dict(data))


def apply_settings(data: dict, pairs: list[tuple[str, Any]]) -> None:
    """``--set`` pairs applied in order to a config's dict; the chosen components' keys (for a bare
    hyperparameter name) are worked out only where a bare name comes, and anew after a component changes."""
    keys = None
    for key, value in pairs:
        if keys is None and "." not in key and key not in TOP_LEVEL_KEYS:
            keys = section_keys(ExperimentConfig.from_dict(data))
        apply_override(data, key, value, keys or {})
        if key in SECTIONS or key.endswith(".name"):  # another component: its own keys from now on
            keys = None


def run(config: ExperimentConfig | Mapping[str, Any] | str | Path | None = None, *, include: Iterable[str | Path] = (),
        track: bool = False, experiment: str = ADHOC, tracking_uri: str | None = None,
        on_round: Callable | None = None, start: Callable | None = None, **settings) -> RunResult:
    """One experiment, as ``fedarena run`` runs it (see ``make_config`` for ``config`` and ``settings``);
    ``track``: also record it in the store like a benchmark trial, in ``experiment``."""
    load_plugins(include)
    cfg = make_config(config, **settings)
    store = open_store(tracking_uri, experiment)[0] if track else None  # a store that fails: before training
    record = run_experiment(cfg, on_round=on_round, start=start)
    run_id = track_run(record, store) if store is not None else None
    return RunResult(record, run_id)


def adhoc_spec(cfg: ExperimentConfig, experiment: str) -> TrialSpec:
    """A single run's labels, as a one-trial suite named ``experiment`` would give them."""
    identity = trial_identity(cfg)
    attack = cfg.attack["name"] if cfg.attack["name"] != "none" else "clean"
    level = float(cfg.attack.get("level", 0.0))
    method, dataset = cfg.method["name"], cfg.dataset["name"]
    privacy = "none" if cfg.privacy_is_default() else cfg.privacy["name"]
    deployment = "synchronous" if cfg.system_is_default() else cfg.system["name"]
    return TrialSpec(cfg, experiment, ADHOC, method, dataset, attack, level, cfg.seed, identity.config_hash,
                     identity.cell_hash, run_name(method, dataset, attack, level, cfg.seed, privacy, deployment),
                     config_key=identity.config_key, versions=identity.versions, privacy_label=privacy,
                     deployment_label=deployment)


def track_run(record: dict, store: RunStore) -> str:
    """Record a finished single run in the store's experiment as the benchmark records a trial: identity tags,
    params, every evaluation round, what it cost, ``result.json`` and ``clients.csv``."""
    cfg = resolve_config(ExperimentConfig.from_dict(record["config"]))
    spec = adhoc_spec(cfg, store.client.get_experiment(store.experiment_id).name)
    tags = {**identity_tags(spec, version_tags(code_version())), "dataset_fingerprint": record["dataset_fingerprint"],
            "backend_used": record["backend"], "diverged": bool(record["final"]["diverged"])}
    tags[NOTE_TAG] = run_note(tags, cfg.flat())
    run_id = store.open(spec.name, run_params(cfg.flat()), tags, cfg.to_dict())
    rounds = {entry["round"]: entry for entry in record["history"]}
    final_round = record["final"]["round"]
    rounds[final_round] = {**rounds.get(final_round, record["final"]), **cost_metrics(record.get("cost", {}))}
    with tempfile.TemporaryDirectory() as tmp:
        write_final(Path(tmp), record)
        store.finish(run_id, FINISHED, [Path(tmp, RESULT_FILE), Path(tmp, CLIENTS_FILE)], rounds=rounds)
    return run_id


