"""MLflow tracking: the store location (``store``) and the run schema, logging and querying (``runs``)."""

from fedarena.tracking.runs import (
    METRICS,
    TAGS,
    RunStore,
    RunSummary,
    param_value,
    run_name,
    run_params,
    version_tags,
)
from fedarena.tracking.store import (
    TrackingError,
    artifact_root,
    check_store,
    redact,
    sqlite_path,
    suite_experiment,
    tracking_uri,
)

__all__ = [
    "METRICS",
    "TAGS",
    "RunStore",
    "RunSummary",
    "TrackingError",
    "artifact_root",
    "check_store",
    "param_value",
    "redact",
    "run_name",
    "run_params",
    "sqlite_path",
    "suite_experiment",
    "tracking_uri",
    "version_tags",
]
