"""Where runs are tracked: the MLflow store location, a fail-fast reachability check, the suite's experiment.

Default store: an SQLite database ``mlflow.db`` in the working directory (through SQLAlchemy), with the
artifacts in the folder ``mlartifacts`` beside it. ``MLFLOW_TRACKING_URI`` (or an explicit URI) points
elsewhere: another SQLite file, PostgreSQL / MySQL, or an MLflow server (``http(s)://``).
Every call goes through an explicit ``MlflowClient(tracking_uri=...)``; no global MLflow state is set.
"""

from __future__ import annotations

import contextlib
import fcntl
import sqlite3
import urllib.error
import urllib.request
from collections.abc import Iterator
from urllib.parse import urlsplit

from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine
from sqlalchemy.engine.url import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.pool import NullPool

from fedarena.tracking.location import (
    PROBE_TIMEOUT_S,
    TrackingError,
    artifact_root,
    check_local_store,
    first_line,
    local_store_path,
    redact,
    sqlite_path,
)

DATABASES = ("postgresql", "mysql", "mssql", "sqlite")  # the URI schemes MLflow stores through SQLAlchemy
DRIVER_EXTRAS = {"postgresql": "postgres"}  # database -> the fedarena install extra with its default driver


# What a failing store raises (full disk, a server gone, a locked or broken database).
STORE_ERRORS = (MlflowException, SQLAlchemyError, sqlite3.Error, OSError)

def check_driver(uri: str) -> None:
    """A database URI names a database SQLAlchemy knows and its driver (the one SQLAlchemy picks for
    ``postgresql://``, or the one after ``+``) is installed; otherwise a one-line TrackingError naming the
    install extra (before MLflow opens the store). Other URIs (http, file, databricks) pass unchecked."""
    try:
        database = urlsplit(uri).scheme.split("+")[0]
    except ValueError as err:  # e.g. an unclosed [ of an IPv6 host; the URI may hold a password: not echoed
        raise TrackingError(f"the tracking store URI cannot be parsed ({err}); write SCHEME://... with a scheme "
                            f"of {', '.join(DATABASES)}, http(s) or file") from None
    if database not in DATABASES:
        return
    try:
        dialect = make_url(uri).get_dialect()
    except (ArgumentError, ValueError) as err:  # a malformed URI (port), or an unknown driver after '+'
        raise TrackingError(f"tracking store {redact(uri)}: {first_line(err)}; write "
                            f"{database}://user:password@host:port/database (or {database}+DRIVER://...)") from None
    try:
        dialect.import_dbapi()
    except ImportError as err:
        extra = DRIVER_EXTRAS.get(database)
        fix = (f"install fedarena's {extra!r} extra: pip install -e '.[{extra}]' (or make install EXTRAS={extra})"
               if extra and uri.startswith(f"{database}://") else f"install the Python package {dialect.driver!r}")
        raise TrackingError(f"tracking store {redact(uri)} needs the {database} driver {dialect.driver!r}, which "
                            f"is not installed ({first_line(err)}); {fix}") from None


def mlflow_client(uri: str) -> MlflowClient:
    """The one way fedarena makes an MLflow client: explicit about its store, no global MLflow state."""
    return MlflowClient(tracking_uri=uri)


def check_store(uri: str) -> MlflowClient:
    """A client on a store that answers; TrackingError naming the store otherwise (before any trial runs).

    SQLite: the folder of the database file must exist (the file is created on first use).
    HTTP(S): the server's ``/health`` endpoint must answer within a few seconds (MLflow's own client
    would retry for minutes). Every store: one cheap query must succeed.
    """
    check_driver(uri)
    check_local_store(uri)
    scheme = urlsplit(uri).scheme
    if scheme in ("http", "https"):
        _probe_server(uri)
    if scheme.split("+")[0] in ("postgresql", "mysql"):
        _probe_database(uri)
    try:  # this MLflow opens (and creates or migrates) the database in the client's constructor
        with schema_lock(uri):
            client = mlflow_client(uri)
            client.search_experiments(max_results=1)
    except (MlflowException, SQLAlchemyError, OSError, ImportError) as err:
        raise TrackingError(f"tracking store {redact(uri)} cannot be used: {first_line(err)}") from None
    return client


def use_write_ahead_log(uri: str) -> None:
    """An SQLite store a benchmark writes: every connection this process opens to it from now on keeps its journal
    as a write-ahead log (a lasting property of the file) and syncs at checkpoints, not at every commit (SQLite's
    ``synchronous=NORMAL``: a commit survives the process's death; the last ones may not survive a power cut).
    The driver commits about four times a trial: 36 -> 19 ms of its time a trial here. Call it before the store
    is opened (MLflow keeps its connections). Other stores pass."""
    db = sqlite_path(uri)
    if db is None:
        return
    _WRITE_AHEAD.add(str(db.resolve()))
    if not event.contains(Engine, "connect", _write_ahead):
        event.listen(Engine, "connect", _write_ahead)


_WRITE_AHEAD: set[str] = set()  # the SQLite files this process's connections keep in WAL mode


def _write_ahead(dbapi_connection, _record) -> None:
    """SQLAlchemy's connect hook: a connection to a file of ``_WRITE_AHEAD`` switches it to WAL mode (a file
    another connection holds mid-transaction keeps its journal: its writes still work, only slower)."""
    if not isinstance(dbapi_connection, sqlite3.Connection):
        return
    files = {row[2] for row in dbapi_connection.execute("PRAGMA database_list")}
    if files.isdisjoint(_WRITE_AHEAD):
        return
    try:  # the pragma answers with the journal mode in force
        mode = dbapi_connection.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    except sqlite3.OperationalError:  # "database is locked": the journal mode stays
        return
    if mode == "wal":
        dbapi_connection.execute("PRAGMA synchronous=NORMAL")


@contextlib.contextmanager
def schema_lock(uri: str) -> Iterator[None]:
    """An SQLite store: an exclusive lock on ``<db>.lock`` while MLflow creates or migrates its tables, so
    that processes opening a new store at once (two suites' benchmarks started together) create it once;
    the others wait, then find it made. Other stores: no lock (their servers serialise their own DDL)."""
    db = sqlite_path(uri)
    if db is None:
        yield
        return
    with open(db.with_name(db.name + ".lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _probe_database(uri: str) -> None:
    """One connection with a short timeout (MLflow retries an unreachable database for about two minutes)."""
    engine = create_engine(uri, poolclass=NullPool, connect_args={"connect_timeout": int(PROBE_TIMEOUT_S)})
    try:
        with engine.connect():
            pass
    except SQLAlchemyError as err:
        raise TrackingError(f"tracking store {redact(uri)} cannot be reached: {first_line(err.orig or err)}") from None
    finally:
        engine.dispose()


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


def check_store_if_present(uri: str) -> None:
    """``check_store`` for a store that is to be read: a driver missing, a corrupt file, a server that does not
    answer is one line; a missing local store is left to the reader, which says how to fill it (checking
    would create an empty one)."""
    local = local_store_path(uri)
    if local is None or local.exists():
        check_store(uri)
