"""The subcommands beyond ``run``: each module here has ``add_parser(subparsers)``."""

from __future__ import annotations

MODULES: list = []
