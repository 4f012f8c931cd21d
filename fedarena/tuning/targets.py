"""What one tuning search covers: a suite row on one dataset, its search space and its tuning-battery runs.

The tuning battery (``battery.yaml``'s ``tuning``: attacks at one level) replaces the suite's attacks; every row
runs all of it on the scale's datasets with one seed past every seed the suite reports (``tuning_seeds``: the
largest of its scales' seeds plus one), so every row is scored on the same validation data, and no reported run
shares the realisation (partition, malicious set, initialisation) the values were chosen on. A row that cannot run
one of the tuning attacks on a dataset (the suite leaves it out) is not tuned there, never tuned on fewer attacks:
it is reported as skipped, with why. A row's space: its method's and aggregator's declared domains (``search=``
where they register), less the hyperparameters the row sets itself (its label names them, e.g. ``fair_term_t1``),
plus the shared keys (``space.DEFAULT_SHARED``, the learning rate) and the user's ``--space``. A row's ``select``
is dropped: the search covers the values it would choose among. A suite with a privacy axis is tuned without
differential privacy (its ``none`` entry, else its first), one with a deployment axis in the synchronous lab (its
entry that changes nothing, else its first). Every check runs here, before Ray.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from typing import Any

from fedarena.battery.definition import load_battery
from fedarena.search_space import DEFAULT_SHARED, SHARED, Domain
from fedarena.sections import KINDS
from fedarena.suites.deployment import is_default
from fedarena.suites.grid import expand
from fedarena.suites.spec import Entry, Suite
from fedarena.suites.tuned import TuneError

SEARCHED = ("method", "aggregator")  # the sections whose components declare search spaces


@dataclass(frozen=True)
class Target:
    """One search: a row on a dataset, its space (dotted key -> domain) and its runs (attack label, config)."""

    row: str
    dataset: str
    space: dict[str, Domain]
    runs: tuple[tuple[str, dict], ...]

    def key(self, **settings: Any) -> str:
        """The search's identity: everything that decides its trials (their configs carry every version-free
        value; ``settings``: budget, searcher, seed, battery version)."""
        text = json.dumps({"row": self.row, "dataset": self.dataset, "runs": self.runs, "settings": settings,
                           "space": {k: d.text() for k, d in sorted(self.space.items())}}, sort_keys=True,
                          default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def tuning_battery() -> tuple[float, tuple[Entry, ...], int]:
    """(level, attack entries, battery version) of the battery's tuning section."""
    data = load_battery()
    tuning = data["tuning"]
    entries = {a["label"]: a for a in data["attacks"]}
    attacks = tuple(Entry(label, {"attack": dict(entries[label]["attack"])}, f"battery tuning.{label}",
                          levels=(float(tuning["level"]),)) for label in tuning["attacks"])
    return float(tuning["level"]), attacks, int(data["version"])


def check_budget(budget: Any) -> int:
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise TuneError(f"--budget is the number of configurations every row gets: a whole number >= 1, got {budget!r}")
    return budget


def tuning_seeds(suite: Suite) -> tuple[int, ...]:
    """The run seeds a search runs on: one past the largest seed any of the suite's scales reports."""
    return (max((seed for s in suite.scales.values() for seed in s.seeds), default=-1) + 1,)


def targets_of(suite: Suite, scale: str, *, rows: tuple[str, ...] | None = None,
               keys: tuple[str, ...] = DEFAULT_SHARED, extra: dict[str, Domain] | None = None
               ) -> tuple[list[Target], dict[str, str]]:
    """The searches of ``suite`` at ``scale`` (its ``rows``, default all of the scale's), and the (row dataset)
    pairs left out with why (a tuning attack excluded for the row there at the level)."""
    if scale not in suite.scales:
        raise TuneError(f"{suite.name} has no scale {scale!r}; its scales: {', '.join(suite.scales)}")
    unknown = sorted(set(keys) - set(SHARED))
    if unknown:
        raise TuneError(f"--keys: {', '.join(unknown)} is not a shared key; shared keys: {', '.join(SHARED)}")
    level, attacks, _ = tuning_battery()
    chosen = suite.scales[scale]
    labels = [m.label for m in suite.methods if chosen.methods is None or m.label in chosen.methods]
    for row in rows or ():
        if row not in labels:
            raise TuneError(f"{suite.name} has no row {row!r} at scale {scale!r}; its rows: {', '.join(labels)}")
    wanted = tuple(rows) if rows else tuple(labels)
    entries = {m.label: m for m in suite.methods}
    privacy = _without_dp(suite)  # one privacy setting: the search runs without differential privacy where it can
    tuning = replace(suite, methods=tuple(replace(entries[label], select=None) for label in wanted), attacks=attacks,
                     privacy=(privacy,), deployment=(_in_the_lab(suite),),
                     scales={scale: replace(chosen, methods=None, attacks=None, seeds=tuning_seeds(suite),
                                            privacy=None, deployment=None)})
    specs = expand(tuning, scale)
    targets, skipped = [], {}
    for label in wanted:
        for dataset in chosen.datasets:
            runs = tuple((s.attack_label, s.config.to_dict()) for s in specs
                         if s.method_label == label and s.dataset_label == dataset.label)
            missing = [a.label for a in attacks if a.label not in {attack for attack, _ in runs}]
            if len(missing) == len(attacks):
                skipped[f"{label} {dataset.label}"] = f"every tuning attack is left out at level {level:g}"
                continue
            if missing:  # the same objective for every row: not the worst case over fewer attacks
                skipped[f"{label} {dataset.label}"] = (f"the suite leaves out tuning attack {', '.join(missing)} at "
                                                       f"level {level:g}: not tuned on fewer attacks")
                continue
            space = row_space(entries[label], runs[0][1], keys, extra or {})
            targets.append(Target(label, dataset.label, space, runs))
    return targets, skipped


def _without_dp(suite: Suite) -> Entry:
    """The suite's privacy entry without differential privacy (``none``), else its first."""
    return next((p for p in suite.privacy if p.patch.get("privacy", {}).get("name", "none") == "none"),
                suite.privacy[0])


def _in_the_lab(suite: Suite) -> Entry:
    """The suite's deployment entry that changes nothing (synchronous rounds, the trial's own f), else its first."""
    return next((d for d in suite.deployment if is_default(d)), suite.deployment[0])


def row_space(entry: Entry, config: dict, keys: tuple[str, ...], extra: dict[str, Domain]) -> dict[str, Domain]:
    """The row's search space (see the module docstring), every domain and key checked."""
    space: dict[str, Domain] = {}
    for section in SEARCHED:
        name = config[section]["name"]
        own = entry.patch.get(section, {})
        allowed = _allowed(section, name)
        for option, domain in KINDS[section].registry.search(name).items():
            if option not in allowed:
                raise TuneError(f"{section} {name!r} declares a search space over {option!r}, which it does not "
                                f"take; its hyperparameters: {', '.join(sorted(allowed)) or 'none'}")
            if option not in own:
                space[f"{section}.{option}"] = domain
    for key in keys:
        if key not in entry.patch:
            space[key] = SHARED[key]
    for key, domain in extra.items():
        check_key(key, config)
        space[key] = domain
    for key, domain in space.items():
        domain.check(key)
    if not space:
        raise TuneError(f"row {entry.label!r} has nothing to search: no declared space and no shared key")
    return space


def check_key(key: str, config: dict) -> None:
    """ConfigError unless ``key`` is a shared key or a hyperparameter of the row's method or aggregator."""
    if "." not in key:
        if key not in SHARED:
            raise TuneError(f"--space {key}: not a searchable key; top-level keys: {', '.join(SHARED)}, or "
                            f"method.OPTION / aggregator.OPTION")
        return
    section, option = key.split(".", 1)
    if section not in SEARCHED:
        raise TuneError(f"--space {key}: search a method.OPTION, an aggregator.OPTION or one of {', '.join(SHARED)}")
    name = config[section]["name"]
    allowed = _allowed(section, name)
    if option not in allowed:
        raise TuneError(f"--space {key}: {section} {name!r} has no hyperparameter {option!r}; it has: "
                        f"{', '.join(sorted(allowed)) or 'none'}")


def _allowed(section: str, name: str) -> set[str]:
    """The hyperparameters of the section's component ``name`` (its section's keys but the structural ones)."""
    kind = KINDS[section]
    return kind.keys(name) - set(kind.structural_keys)
