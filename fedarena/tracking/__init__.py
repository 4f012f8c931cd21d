"""MLflow tracking: where the store is (``location``: no MLflow import, so the CLI checks a store in
milliseconds), the reachability check and the suite's experiment (``store``), and the run schema, logging and
querying (``runs``). The names below load their module (and MLflow) on first use."""

from __future__ import annotations

import importlib

_HOMES = {
    "location": ("TrackingError", "artifact_root", "redact", "sqlite_path", "tracking_uri"),
    "store": ("check_store", "suite_experiment"),
    "runs": ("METRICS", "TAGS", "RunStore", "RunSummary", "param_value", "run_name", "run_params", "version_tags"),
}
_MODULE_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str):
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
