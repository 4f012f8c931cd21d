"""Environment variables set for a block and restored afterwards (no MLflow or Ray import)."""

from __future__ import annotations

import contextlib
import os


@contextlib.contextmanager
def env_vars(**values: str):
    """Set ``values`` in ``os.environ`` for the block (for libraries that read settings only from the
    environment: Ray Tune's console, MLflow's HTTP retries and progress bars), restoring them afterwards."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
