"""The deployment axis of a suite: how the devices behave (the ``system`` section) and the f the server declares.

    deployment:
      - {label: synchronous}                                      # the lab: every drawn device reports
      - {label: fail0.3, system: {name: synchronous, failure_rate: 0.3}}
      - {label: async_k5, system: {name: asynchronous, buffer: 5}}
      - {label: f_half, f_declared: half}                         # the server's aggregator.f

An entry has a ``label`` and a ``system`` section (named, as a privacy entry names its mechanism), an
``f_declared``, or both; nothing else (a rule is a method entry's). A suite without the axis has one entry,
``synchronous`` with no patch: its trials, run names and labels are those of a suite before the axis existed.

``f_declared`` sets the server's ``aggregator.f`` relative to the f the trial would use (``exact``: the section's
own ``f`` where it sets one, else the expected number of malicious devices among those drawn,
``simulation.identity.trial_facts``): ``half`` is exact // 2, ``double`` 2 exact. It is computed when the trial's
config is built (``grid.build_config``), after every patch and override, and needs the number of devices before
any data is read (a dataset with a ``num_clients`` option). A method without global aggregation (local training,
MOCHA) has no rule to read f: it runs its trial as it is, which is the synchronous entry's, so the grid leaves it
out as the same trial. A rule that ignores f (the mean, the median, SignGuard) does run its f_half and f_double
trials: they are other configs (an attack that simulates the server's rule, such as the tailored ones, reads its
f), and where nothing reads f their numbers equal the baseline's, a check that the rule does not read it.

Exclusions (``grid.Excluded``): a trial that a deployment entry makes undefined (the rule's requirement on n and
f fails with the declared f, or the system section refuses the trial's privacy), while the same grid point at
the synchronous default is defined, is excluded with the error's message as its reason; a declared f equal to the
trial's own (f = 0 without attackers: half and double are 0 too) is the same trial as the entry without it, and
excluded with ``same_as`` naming that entry's label, whose cell the tables show in its place.
"""

from __future__ import annotations

from typing import Any

from fedarena.config import ExperimentConfig
from fedarena.errors import ConfigError
from fedarena.methods.base import method_from
from fedarena.sections import resolve_config
from fedarena.simulation.identity import trial_facts
from fedarena.suites.spec import F_DECLARED, Entry

ENTRY_KEYS = ("label", "system", "f_declared")
F_DECLARED_TAG = "f_declared"  # the run tag of a trial with a declared f


def parse_deployment(r, value: Any, where: str) -> tuple[Entry, ...]:
    """The suite's ``deployment:`` list read strictly (``r`` is the parser's reader, ``parse._Reader``)."""
    entries, seen = [], set()
    for i, item in enumerate(r.items(value, where)):
        at = f"{where}[{i}]"
        item = r.mapping(item, at, required=("label",))
        for key in item:
            if key not in ENTRY_KEYS:
                r.fail(f"{at}.{key}", f"unknown key; a deployment entry has {', '.join(ENTRY_KEYS)} (the server "
                                      f"rule and its other settings are a method entry's)")
        label = r.label(item["label"], f"{at}.label")
        if label in seen:
            r.fail(f"{at}.label", f"duplicate label {label!r} in {where}")
        seen.add(label)
        patch = r.patch({k: v for k, v in item.items() if k == "system"}, at)
        if "system" in patch and "name" not in patch["system"]:
            r.fail(f"{at}.system", "a deployment entry names its system: `system: {name: synchronous, ...}` or "
                                   "`{name: asynchronous, ...}`")
        entries.append(Entry(label, patch, at, f_declared=_f_declared(r, item.get("f_declared"), f"{at}.f_declared")))
    return tuple(entries)


def _f_declared(r, value: Any, where: str) -> str:
    if value is None:
        return ""
    if value not in F_DECLARED:
        r.fail(where, f"f_declared is the server's f relative to the trial's: one of {', '.join(F_DECLARED)}; "
                      f"got {value!r}")
    return value


def is_default(entry: Entry) -> bool:
    """Whether the entry changes nothing (the synchronous lab, the trial's own f)."""
    return not entry.patch and entry.f_declared in ("", "exact")


def declared_f(data: dict, how: str) -> int | None:
    """The ``aggregator.f`` of ``f_declared: how`` for a built config (``data``, ``ExperimentConfig.to_dict()``);
    None for a method without global aggregation (no rule reads f)."""
    cfg = resolve_config(ExperimentConfig.from_dict(data))
    if not method_from(cfg.method).uses_aggregator:
        return None
    exact = cfg.aggregator.get("f")
    if exact is None:
        exact = trial_facts(cfg).f
    if exact is None:
        raise ConfigError(f"f_declared: {how} needs the trial's f before any data is read, which needs the number "
                          f"of devices as a dataset option (num_clients); dataset {cfg.dataset['name']!r} has it "
                          f"from its data")
    return {"half": exact // 2, "exact": exact, "double": 2 * exact}[how]


def declared_f_tag(entry: Entry) -> dict[str, str]:
    """The run tag of a trial whose server declares another f than its own (``F_DECLARED_TAG``: half or double),
    which the tables and figures read; none otherwise."""
    return {F_DECLARED_TAG: entry.f_declared} if entry.f_declared in ("half", "double") else {}


def same_trial_reason(entry: Entry, cfg: ExperimentConfig) -> str:
    """Why a trial of ``entry`` is the same trial as the entry without its declared f."""
    method = cfg.method["name"]
    if not method_from(cfg.method).uses_aggregator:
        return f"method {method!r} has no global aggregation, so no rule reads the declared f"
    return f"f declared {entry.f_declared} is {cfg.aggregator.get('f')}, the f the trial assumes"
