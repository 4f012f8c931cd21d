"""A submission rerun through the battery, and its submitted card held against the rerun.

Each submission is evaluated by ``fedarena evaluate`` in processes of its own (``sandbox``), placed by
``placement`` (an aggregator's rule in isolated rule processes, a method's whole run under bubblewrap, or, where
bubblewrap cannot start and the builder says ``--trust-submissions``, as the builder's user), in a store of its own
under the work folder (``<work>/<slug>/mlflow.db``): a second build reuses its runs (finished trials are skipped;
an edited plugin is a new identity and runs again). The rerun reproduces the submitted card when every seed's value
of every cell lies within ``per_seed.TOLERANCE`` (0.01, absolute) of the submitted one (``per_seed``). Its status:

- **verified**: reproduced, and the rule ran isolated (an aggregator rerun with ``--isolate``);
- **verified (reviewed)**: reproduced, not isolated, and a maintainer reviewed exactly its source (``reviews``);
- **reproduced (not isolated)**: reproduced, but its code ran beside the trial (a method, or any submission built
  with ``--trust-submissions`` where bubblewrap cannot start), and no review of its source;
- **unverified**: some seed's cell differs, is absent from the submitted card or was not measured (listed);
- **rejected** with its reason: it does not load, breaks its contract, names another battery version or scale,
  fails mid-run, passes its time or memory limit, or bubblewrap cannot start and the site does not trust it.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from fedarena.battery.card import Card
from fedarena.battery.definition import version as battery_version
from fedarena.isolation.pseudonyms import ENV_KEY
from fedarena.website.per_seed import TOLERANCE, differing_cells  # noqa: F401 - the site's test, importable here
from fedarena.website.placement import Placement, place
from fedarena.website.sandbox import run_limited
from fedarena.website.submission import Submission, SubmissionError, setting_text

VERIFIED, UNVERIFIED, REJECTED, BUILT_IN = "verified", "unverified", "rejected", "built-in"
REVIEWED, REPRODUCED = "verified (reviewed)", "reproduced (not isolated)"
STATUSES = (BUILT_IN, VERIFIED, REVIEWED, REPRODUCED, UNVERIFIED, REJECTED)
REPRODUCING = (VERIFIED, REVIEWED, REPRODUCED)  # the rerun reproduced the card


@dataclass(frozen=True)
class Limits:
    seconds: float = 7200.0  # one submission's whole battery at the scale
    memory_mib: int = 8192  # its processes together
    num_cpus: int | None = None  # of its own Ray instance (None: every core)
    jobs: int = 1  # submissions evaluated at once (give each num_cpus = cores / jobs)


DEFAULT_LIMITS = Limits()


def command(submission: Submission, scale: str, work: Path, num_cpus: int | None) -> list[str]:
    """The ``fedarena evaluate`` command that reruns ``submission`` in ``work``."""
    args = [sys.executable, "-m", "fedarena.cli", "evaluate", f"--{submission.kind}", submission.component,
            "--include", str(submission.plugin), "--scale", scale, "--tracking-uri", f"sqlite:///{work / 'mlflow.db'}",
            "--storage", str(work / "ray_results"), "--out", str(work / "card")]
    for key, value in sorted(submission.settings.items()):
        args += ["--set", f"{key}={setting_text(value)}"]
    return args + (["--num-cpus", str(num_cpus)] if num_cpus else [])


def shown_command(submission: Submission, scale: str) -> str:
    """What a reader runs to measure the submission's card (the plugin as the submission's folder names it), each
    argument quoted for a POSIX shell."""
    plugin = submission.plugin.relative_to(submission.folder.resolve()) if submission.plugin else "PLUGIN"
    args = ["fedarena", "evaluate", f"--{submission.kind}", submission.component,
            *[word for k, v in sorted(submission.settings.items()) for word in ("--set", f"{k}={setting_text(v)}")],
            "--include", str(plugin), "--scale", scale, "--out", "card/"]
    return shlex.join(args)


def check_before_running(submission: Submission, scale: str) -> None:
    """What the submitted card names, against this battery, before any of the submission's code runs."""
    card = submission.card
    if str(card.get("battery_version")) != str(battery_version()):
        raise SubmissionError(f"its card.json names battery version {card.get('battery_version')}, not the current "
                              f"{battery_version()}: evaluate it again with this fedarena")
    if card.get("scale") != scale:
        raise SubmissionError(f"its card.json is of scale {card.get('scale')!r}, the site's is {scale!r}")
    expected = f"{submission.kind}.{submission.component}"
    if str(card.get("component", "")).split("+", 1)[0] != expected:
        raise SubmissionError(f"its card.json is the card of {card.get('component')!r}, the submission names "
                              f"{expected!r}")


def rerun(submission: Submission, scale: str, work: Path, limits: Limits, trust: bool = False
          ) -> tuple[Card, Placement]:
    """The submission's card from its rerun in ``work`` and where it ran (a SubmissionError with the reason where it
    may not run or fails)."""
    placed = place(submission, command(submission, scale, work, limits.num_cpus), work, trust)
    work.mkdir(parents=True, exist_ok=True)
    secret = {ENV_KEY: work_secret(work.parent)} if placed.isolated else {}  # only the trusted evaluate holds it
    outcome = run_limited(placed.argv, work, work / "evaluate.log", seconds=limits.seconds,
                          memory_mib=limits.memory_mib, wrapper=placed.wrapper, extra_env=secret)
    if outcome.limit:
        raise SubmissionError(f"stopped at its {outcome.limit}")
    if not outcome.ok:
        raise SubmissionError(f"fedarena evaluate failed (exit {outcome.returncode}): {_reason(outcome.output)}")
    try:
        return Card.from_json(json.loads((work / "card" / "card.json").read_text(encoding="utf-8"))), placed
    except (OSError, ValueError, TypeError) as err:
        raise SubmissionError(f"its rerun wrote no readable card ({err})") from None


def status_of(differing: list[dict], isolated: bool, review: dict | None) -> str:
    """A rerun submission's status from what it passed (the module's docstring)."""
    if differing:
        return UNVERIFIED
    if isolated:
        return VERIFIED
    return REVIEWED if review else REPRODUCED


def work_secret(root: Path) -> str:
    """The isolated rules' secret of this work folder (hex), made once and kept there, readable by the builder
    alone: a rebuild gives the same pseudonyms and streams (its reruns are reused), and no sandbox sees the folder."""
    path = root / ".isolation-key"
    if not path.exists():
        root.mkdir(parents=True, exist_ok=True)
        fresh = path.with_suffix(f".{os.getpid()}")
        descriptor = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as out:
            out.write(secrets.token_hex(32))
        os.replace(fresh, path)  # whole or not at all: two builders starting at once each see a complete key
    return path.read_text().strip()


def _reason(output: str) -> str:
    """The error line of a failed evaluation (the CLI's one line, or a traceback's last)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("fedarena: error:"):
            return line.removeprefix("fedarena: error:").strip()[:400]
    return (lines[-1] if lines else "no output")[:400]

