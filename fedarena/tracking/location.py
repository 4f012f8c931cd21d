"""Where runs are tracked, and the checks that need no MLflow import (they run first, in milliseconds).

Default store: an SQLite database ``mlflow.db`` in the working directory, with the artifacts in the folder
``mlartifacts`` beside it; ``MLFLOW_TRACKING_URI`` (or an explicit URI) points elsewhere.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
from pathlib import Path
from urllib.parse import urlparse, urlsplit, urlunsplit

from fedarena.errors import ConfigError

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


def local_store_path(uri: str) -> Path | None:
    """The file or folder of a local store (sqlite / file / a plain path), None for remote stores."""
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///"):])
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return Path(parsed.path)
    if parsed.scheme == "" or len(parsed.scheme) == 1:  # a plain path (or a Windows drive letter)
        return Path(uri)
    return None


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


def check_sqlite_file(db: Path) -> None:
    """An SQLite store this process can write: its folder exists and is writable, and an existing file is an
    SQLite database (checked with sqlite3 itself, in milliseconds: MLflow would retry for minutes). A transaction
    that a killed process left unfinished is rolled back here, as SQLite does on the next write."""
    if not db.parent.is_dir():
        raise TrackingError(f"tracking store {db}: the folder {db.parent} does not exist")
    if not os.access(db.parent, os.W_OK) or (db.exists() and not os.access(db, os.W_OK)):
        where = db if db.exists() else db.parent
        raise TrackingError(f"tracking store {db}: {where} is read-only here (SQLite writes the file and a journal "
                            f"beside it); use a writable folder, e.g. --tracking-uri sqlite:///$HOME/fedarena/mlflow.db")
    if not db.exists():
        return
    try:  # read-write: a writer killed mid-transaction leaves a hot journal, which only a writable connection rolls back
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=rw", uri=True, timeout=PROBE_TIMEOUT_S)) as conn:
            conn.execute("PRAGMA schema_version").fetchone()
    except sqlite3.DatabaseError as err:
        raise TrackingError(f"tracking store {db} is not a usable SQLite database ({err}); move it aside "
                            f"(a new store is created) or point --tracking-uri / ${ENV_VAR} at another one") from None


def first_line(err: BaseException) -> str:
    """An error's first non-blank line (its type's name if it has no message), for one-line messages."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__


def check_local_store(uri: str) -> None:
    """The checks of a store that need no MLflow (an SQLite file here); other stores pass."""
    db = sqlite_path(uri)
    if db is not None:
        check_sqlite_file(db)
