"""Where runs are tracked: the MLflow store location, a fail-fast reachability check, the suite's experiment.

Default store: an SQLite database ``mlflow.db`` in the working directory (through SQLAlchemy), with the
artifacts in the folder ``mlartifacts`` beside it. ``MLFLOW_TRACKING_URI`` (or an explicit URI) points
elsewhere: another SQLite file, PostgreSQL / MySQL, or an MLflow server (``http(s)://``).
Every call goes through an explicit ``MlflowClient(tracking_uri=...)``; no global MLflow state is set.
"""

from __future__ import annotations

import os
import re
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from sqlalchemy.exc import SQLAlchemyError

from fedarena.params import ConfigError

ENV_VAR = "MLFLOW_TRACKING_URI"
DEFAULT_DB = "mlflow.db"
ARTIFACT_DIR = "mlartifacts"
PROBE_TIMEOUT_S = 5.0


class TrackingError(ConfigError):
    """The tracking store cannot be used; the message names its (redacted) address."""


def tracking_uri(explicit: str | None = None, cwd: str | os.PathLike | None = None) -> str:
    """The store to use: ``explicit`` > $MLFLOW_TRACKING_URI > ``sqlite:///<cwd>/mlflow.db``."""
    if explicit:
        return explicit
    if os.environ.get(ENV_VAR):
        return os.environ[ENV_VAR]
    return f"sqlite:///{(Path(cwd or Path.cwd()) / DEFAULT_DB).resolve()}"


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (None for other stores and in-memory databases)."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri[len("sqlite:///"):]
    return None if path in ("", ":memory:") else Path(path)


def artifact_root(uri: str) -> Path | None:
    """The artifact folder beside a local SQLite store; None lets a server or database store decide."""
    db = sqlite_path(uri)
    return None if db is None else db.parent / ARTIFACT_DIR


def redact(uri: str) -> str:
    """The URI with any password replaced by ``***`` (for messages and logs)."""
    parts = urlsplit(uri)
    if parts.password is None:
        return uri
    netloc = re.sub(r":[^:@]*@", ":***@", parts.netloc, count=1)
    return urlunsplit(parts._replace(netloc=netloc))


def check_store(uri: str) -> MlflowClient:
    """A client on a store that answers; TrackingError naming the store otherwise (before any trial runs).

    SQLite: the folder of the database file must exist (the file is created on first use).
    HTTP(S): the server's ``/health`` endpoint must answer within a few seconds (MLflow's own client
    would retry for minutes). Every store: one cheap query must succeed.
    """
    db = sqlite_path(uri)
    if db is not None and not db.parent.is_dir():
        raise TrackingError(f"tracking store {uri}: the folder {db.parent} does not exist")
    scheme = urlsplit(uri).scheme
    if scheme in ("http", "https"):
        _probe_server(uri)
    client = MlflowClient(tracking_uri=uri)
    try:
        client.search_experiments(max_results=1)
    except (MlflowException, SQLAlchemyError, OSError, ImportError) as err:
        raise TrackingError(f"tracking store {redact(uri)} cannot be used: {_first_line(err)}") from None
    return client


def _probe_server(uri: str) -> None:
    url = uri.rstrip("/") + "/health"
    try:
        with urllib.request.urlopen(url, timeout=PROBE_TIMEOUT_S) as response:  # noqa: S310 (http(s) only)
            response.read(64)
    except urllib.error.HTTPError:
        return  # the server answered (auth or an older server without /health): the query below decides
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise TrackingError(f"MLflow tracking server {redact(uri)} cannot be reached: {reason}") from None


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def suite_experiment(client: MlflowClient, uri: str, suite: str) -> str:
    """The id of the experiment named ``suite`` (one experiment per suite), created when absent."""
    exp = client.get_experiment_by_name(suite)
    if exp is not None:
        if exp.lifecycle_stage == "deleted":
            raise TrackingError(
                f"experiment {suite!r} in {redact(uri)} was deleted; restore it (MLflow UI or "
                f"`mlflow experiments restore --experiment-id {exp.experiment_id}`) or purge it (`mlflow gc`)"
            )
        return exp.experiment_id
    root = artifact_root(uri)
    location = (root / suite).resolve().as_uri() if root is not None else None
    return client.create_experiment(suite, artifact_location=location)
