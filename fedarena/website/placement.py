"""Where a submission's rerun runs: isolated, sandboxed, or (only when the builder says so) trusted.

- An **aggregator** is rerun by ``fedarena evaluate --isolate``: that process never imports the plugin; the rule
  runs in sandboxed rule processes of ``fedarena.isolation`` and sees only what crosses to it. Its entry is
  ``isolated``.
- A **method** runs inside local training, where isolating each call is not practical: the whole ``fedarena
  evaluate`` runs under bubblewrap (``bwrap.wrap``), with only its work folder and Ray's temporary folder writable,
  the plugin's folder, the Python install, fedarena's source and the data directory readable, no network and an
  environment of ``bwrap``'s few variables and the three it needs here. Its entry is sandboxed but not isolated:
  the method sees its trial.
- Where bubblewrap cannot start, a submission is rejected in one line, unless the site is built with
  ``--trust-submissions``: then it runs as before this module (its own processes and limits, the builder's user,
  files and network) and its entry is marked "not isolated".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fedarena.datasets.files.storage import ENV_VAR as DATA_ENV
from fedarena.datasets.files.storage import data_root
from fedarena.isolation import bwrap
from fedarena.website.submission import Submission, SubmissionError

Wrapper = Callable[[list[str], Path], list[str]]  # (argv, Ray's temporary folder) -> the argv that runs


@dataclass(frozen=True)
class Placement:
    argv: list[str]
    isolated: bool  # the rule ran in isolated rule processes (an aggregator under --isolate)
    sandboxed: bool  # some part of the rerun ran under bubblewrap (False: trusted, --trust-submissions)
    wrapper: Wrapper | None = None  # wraps the whole command (a method's)


def place(submission: Submission, argv: list[str], work: Path, trust: bool) -> Placement:
    """How ``argv`` (the submission's ``fedarena evaluate``) runs; a SubmissionError where it may not run at all."""
    reason = bwrap.available()
    if reason:
        if not trust:
            raise SubmissionError(f"bubblewrap cannot start here ({reason}): submissions are rejected unless the "
                                  f"site is built with --trust-submissions")
        return Placement(argv, isolated=False, sandboxed=False)
    if submission.kind == "aggregator":
        return Placement([*argv, "--isolate"], isolated=True, sandboxed=True)
    readable = [str(p) for p in (submission.folder.resolve(), data_root()) if p.exists()]  # a bind needs a path

    def wrapper(command: list[str], ray_tmp: Path) -> list[str]:
        # the sandbox clears the environment: what the run needs crosses here (bwrap adds PATH, HOME=/tmp, ...)
        env = {"RAY_TMPDIR": str(ray_tmp), DATA_ENV: str(data_root()), "HOME": str(work)}
        return bwrap.wrap(command, writable=(work, ray_tmp), readable=readable, env=env, chdir=str(work))

    return Placement(argv, isolated=False, sandboxed=True, wrapper=wrapper)
