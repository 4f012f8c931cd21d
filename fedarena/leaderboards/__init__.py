"""Leaderboards: the Ditto and FedTilt papers' tables, built from the MLflow tracking store.

Entry point: :func:`build_leaderboards` (used by ``fedarena leaderboard`` and ``make leaderboards``).
The building blocks are pure functions on a DataFrame of runs: :func:`leaderboard_tables`,
``cells.aggregate``, ``specs.build_table``, ``paper.reproduction`` and the renderers.
"""

from fedarena.leaderboards.build import LeaderboardError, build_leaderboards, leaderboard_tables, read_runs
from fedarena.leaderboards.render import FORMATS, render

__all__ = ["FORMATS", "LeaderboardError", "build_leaderboards", "leaderboard_tables", "read_runs", "render"]
