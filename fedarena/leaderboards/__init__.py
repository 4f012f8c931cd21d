"""Leaderboards: the Ditto and FedTilt papers' tables, built from the MLflow tracking store.

Entry point: :func:`build_leaderboards` (used by ``fedarena leaderboard`` and ``make leaderboards``).
The building blocks are pure functions on a DataFrame of runs: :func:`leaderboard_tables`,
``cells.aggregate``, ``specs.build_table``, ``paper.reproduction`` and the renderers.

The names below load on first use (PEP 562): every command line imports this package for its sub-command's
parser, and the tables' modules (pandas, scipy, matplotlib) took 5.6 s of a benchmark's start.
"""

from importlib import import_module

# (``render``, the function, is not among them: loading the submodule ``render`` binds that name to the module)
_FROM = {"LeaderboardError": "build", "build_leaderboards": "build", "leaderboard_tables": "build",
         "read_runs": "build", "FORMATS": "render"}
__all__ = sorted(_FROM)


def __getattr__(name: str):
    if name not in _FROM:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_FROM[name]}"), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
