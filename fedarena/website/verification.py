"""A submission rerun through the battery, and its submitted card held against the rerun.

Each submission is evaluated by ``fedarena evaluate`` in processes of its own (``sandbox``), in a store of its own
under the work folder (``<work>/<slug>/mlflow.db``): it writes only its own runs, and a second build reuses them
(finished trials are skipped; an edited plugin is a new identity and runs again). The submitted card is
**verified** when every cell of it (the clean accuracy, each level's worst case, the worst attack success rate,
and every setting's accuracy, spread across devices, worst 10% of devices and attack success rate) lies within the
rerun's 95% interval over the seeds (``battery.spread``: with one seed the rerun's number itself, to float32
rounding), and **unverified** with the differing cells otherwise. A submission that cannot be evaluated is
**rejected** with its reason: it does not load, breaks its contract, names another battery version or scale,
fails mid-run, or passes its time or memory limit.
"""

from __future__ import annotations

import json
import math
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from fedarena.battery.card import Card
from fedarena.battery.definition import version as battery_version
from fedarena.battery.spread import METRICS, within
from fedarena.website.sandbox import run_limited
from fedarena.website.submission import Submission, SubmissionError, setting_text

VERIFIED, UNVERIFIED, REJECTED, BUILT_IN = "verified", "unverified", "rejected", "built-in"


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


def rerun(submission: Submission, scale: str, work: Path, limits: Limits) -> Card:
    """The submission's card from its rerun in ``work`` (a SubmissionError with the reason where it fails)."""
    work.mkdir(parents=True, exist_ok=True)
    outcome = run_limited(command(submission, scale, work, limits.num_cpus), work, work / "evaluate.log",
                          seconds=limits.seconds, memory_mib=limits.memory_mib)
    if outcome.limit:
        raise SubmissionError(f"stopped at its {outcome.limit}")
    if not outcome.ok:
        raise SubmissionError(f"fedarena evaluate failed (exit {outcome.returncode}): {_reason(outcome.output)}")
    try:
        return Card.from_json(json.loads((work / "card" / "card.json").read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError) as err:
        raise SubmissionError(f"its rerun wrote no readable card ({err})") from None


def _reason(output: str) -> str:
    """The error line of a failed evaluation (the CLI's one line, or a traceback's last)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("fedarena: error:"):
            return line.removeprefix("fedarena: error:").strip()[:400]
    return (lines[-1] if lines else "no output")[:400]


def differing_cells(submitted: dict, measured: Card) -> list[dict]:
    """Each cell of the submitted card outside the rerun's interval: {cell, submitted, measured, interval}."""
    out = []
    settings = _mapping(submitted.get("settings"))
    for key in sorted(set(measured.settings) - set(settings)):
        out.append({"cell": key, "submitted": None, "measured": None, "interval": None,
                    "why": "absent from the submitted card"})
    for key in sorted(settings):
        for metric in METRICS:
            value = _mapping(settings.get(key)).get(metric)
            reference = measured.settings.get(key, {}).get(metric)
            cell = _compare(f"{key} {metric}", value, reference, measured.intervals.get(key, {}).get(metric))
            if cell:
                out.append(cell)
    clean = _compare("clean_acc", submitted.get("clean_acc"), measured.clean_acc,
                     measured.intervals.get("clean", {}).get("acc_pooled"))
    out += [clean] if clean else []
    worst = _mapping(submitted.get("worst"))
    for level in sorted(set(measured.worst) - set(worst)):
        if "acc" in measured.worst[level]:
            out.append({"cell": f"worst@{level}", "submitted": None, "measured": measured.worst[level]["acc"],
                        "interval": None, "why": "absent from the submitted card"})
    for level, entry in sorted(worst.items()):
        ours = measured.worst.get(level, {})
        setting = f"{ours.get('attack')}@{float(level):g}" if "acc" in ours else ""
        for metric, key in (("acc", "acc_pooled"), ("acc_worst10", "acc_worst10")):
            cell = _compare(f"worst@{level} {metric}", _mapping(entry).get(metric), ours.get(metric),
                            measured.intervals.get(setting, {}).get(key))
            out += [cell] if cell else []
    asr = _mapping(submitted.get("worst_asr"))
    if asr or measured.worst_asr:
        setting = measured.worst_asr.get("attack", "")
        cell = _compare("worst_asr", asr.get("asr"), measured.worst_asr.get("asr"),
                        measured.intervals.get(setting, {}).get("asr_pooled"))
        out += [cell] if cell else []
    return out


def _compare(name: str, value, reference, interval) -> dict | None:
    """None where ``value`` agrees with the rerun, else the differing cell."""
    given = _number(value)
    ours = _number(reference)
    if given is None and ours is None:
        return None
    span = interval if interval else ([ours, ours] if ours is not None else None)
    if given is not None and span is not None and within(given, span):
        return None
    return {"cell": name, "submitted": given, "measured": ours, "interval": span,
            "why": "not measured by the rerun" if ours is None else
            ("absent from the submitted card" if given is None else "outside the rerun's interval")}


def _mapping(value) -> dict:
    """A part of a submitted card as a mapping (anything else in its place: nothing submitted there)."""
    return value if isinstance(value, dict) else {}


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer past float's range
        return None
    return number if math.isfinite(number) else None
