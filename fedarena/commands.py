"""The subcommands beyond ``run``: each module here has ``add_parser(subparsers)``."""

from __future__ import annotations

from fedarena.battery import commands as battery_commands
from fedarena.bench import commands as bench_commands
from fedarena.datasets import commands as data_commands
from fedarena.leaderboards import commands as leaderboard_commands
from fedarena.report import commands as report_commands
from fedarena.tuning import commands as tune_commands
from fedarena.website import commands as site_commands

MODULES: list = [bench_commands, battery_commands, data_commands, leaderboard_commands, report_commands,
                 tune_commands, site_commands]
