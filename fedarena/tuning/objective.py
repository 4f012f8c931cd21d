"""The tuning objective, one Ray Tune trial per configuration: the row's tuning-battery runs with the trial's values,
one after the other, reporting after each the worst benign validation accuracy so far (ASHA stops a configuration
whose worst case is already behind after a few attacks; the worst case only falls as attacks are added).

Validation data are each device's validation split, disjoint from the test split every table reports
(``datasets.base``); the objective never reads a test metric.
"""

from __future__ import annotations

import math
import time
from typing import Any

from fedarena.config import ExperimentConfig, apply_override
from fedarena.plugins import PluginSource, ensure_loaded
from fedarena.simulation.experiment import run_experiment
from fedarena.simulation.threads import limit_threads

OBJECTIVE = "val_acc_pooled"  # benign pooled validation accuracy (``simulation.metrics``)
PROGRESS = "attacks_done"  # ASHA's time attribute


def plain(value: Any) -> Any:
    """A Tune-sampled value as plain Python (numpy scalars to float / int)."""
    if hasattr(value, "item"):
        value = value.item()
    return value


def with_values(data: dict, values: dict[str, Any]) -> ExperimentConfig:
    """The run's config with the configuration's values set (dotted ``section.option`` or top-level keys)."""
    patched = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    for key, value in values.items():
        apply_override(patched, key, plain(value), {})
    return ExperimentConfig.from_dict(patched)


def validation_score(final: dict) -> float:
    """The run's objective: benign validation accuracy, 0 for a diverged run or a missing value."""
    value = final.get(OBJECTIVE)
    if final.get("diverged") or value is None or not math.isfinite(float(value)):
        return 0.0
    return float(value)


def tune_trial(config: dict, *, runs: tuple[tuple[str, dict], ...], plugins: tuple[PluginSource, ...] = ()) -> None:
    """Ray Tune trainable: ``config`` holds the configuration's values; ``runs`` the (attack label, config dict) of
    the row's tuning battery."""
    from ray import tune  # in the worker: the driver's planning never needs it

    ensure_loaded(plugins)
    limit_threads(1)
    started = time.time()
    worst, scores = math.inf, {}
    for done, (attack, data) in enumerate(runs, start=1):
        result = run_experiment(with_values(data, config))
        scores[attack] = validation_score(result["final"])
        worst = min(worst, scores[attack])
        tune.report({"objective": worst, PROGRESS: done, "started": started,
                     **{f"val_{label}": score for label, score in scores.items()}})
