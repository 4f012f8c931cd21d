"""Which of a store's battery runs a card is made of, and whether they are the whole battery.

A row's card counts only the runs of the battery's current trials for it (``expected_trials``: each attack,
level, dataset and seed the row can run, matched by identity), so that a setting an older battery version ran
and the current one does not, or an extra seed, never enters its worst case; and it is complete only when
every one of them is there with a finite benign accuracy (``card.missing_trials``). A row the battery cannot
rebuild from its label (one with settings, ``+k...``, or tuned values, ``+tuned<b>``) in a store read without its
evaluation (the report) is checked setting by setting against its component's default row, on runs made under
the battery's current version only.
"""

from __future__ import annotations

import pandas as pd

from fedarena.battery.definition import Battery, BatteryError, Row, battery_suite, load_battery, row_of
from fedarena.suites.grid import expand
from fedarena.suites.spec import Suite
from fedarena.suites.tuned_labels import TUNED

TRIAL = "battery_trial"  # the column a run's trial key is put in: its identity, or its setting text


def expected_trials(battery: Battery | None, labels: list[str], device: str = "cpu") -> dict[str, dict[str, str]]:
    """label -> {config_hash: "attack@level dataset sN"}: the trials the battery's current version runs on
    ``device`` for each row it can rebuild (the rows of ``battery``, and any other built-in or registered
    component at its defaults among ``labels``); a row it cannot rebuild is left out."""
    if battery is None:
        return {}
    own = {r.label for r in battery.rows} | {m.label for m in battery.suite.methods}
    others = [row for row in map(rebuilt, sorted(set(labels) - own)) if row is not None]
    specs = expand(battery.suite, battery.scale, device=device) if battery.rows else []
    if others:
        specs += expand(battery_suite(others, battery.scale).suite, battery.scale, device=device)
    out: dict[str, dict[str, str]] = {label: {} for label in own | {r.label for r in others}}
    for spec in specs:
        out.setdefault(spec.method_label, {})[spec.config_hash] = setting_text(
            spec.attack_label, spec.level, spec.dataset_label, spec.seed)
    return out


def setting_text(attack: str, level: float, dataset: str, seed: int) -> str:
    return f"{attack}@{float(level):g} {dataset} s{int(seed)}"


def rebuilt(label: str) -> Row | None:
    """The row of a label without settings whose component is registered here (None otherwise)."""
    kind, _, name = label.partition(".")
    if "+" in name or kind not in ("aggregator", "method"):
        return None
    try:
        return row_of(kind, name)
    except BatteryError:
        return None


def by_setting(expected: dict[str, dict[str, str]], labels: list[str]) -> dict[str, dict[str, str]]:
    """For each label with settings or tuned values whose default row is in ``expected``: that row's trials
    keyed by their setting text (what the store tells of such a row's runs without its settings)."""
    out = {}
    for label in labels:
        base = label.split("+", 1)[0]
        if "+" in label and base in expected:
            out[label] = {text: text for text in expected[base].values()}
    return out


def keyed_runs(runs: pd.DataFrame, settings_keyed: set[str]) -> pd.DataFrame:
    """The runs with their trial key in ``TRIAL``: the identity, or, for the rows of ``settings_keyed``, the
    setting text, only on runs made under the battery's current version (others get no key)."""
    if runs.empty:
        return runs.assign(**{TRIAL: pd.Series(dtype=object)})
    keys = runs["config_hash"].astype(object) if "config_hash" in runs else pd.Series(None, index=runs.index)
    if settings_keyed:
        chosen = runs["method_label"].isin(settings_keyed)
        current = pd.to_numeric(runs.get("battery_version"), errors="coerce") == current_version()
        texts = [setting_text(a, lv, d, s) for a, lv, d, s in zip(
            runs["attack_label"], runs["level"], runs["dataset_label"], runs["seed"], strict=True)]
        keys = keys.where(~chosen, pd.Series(texts, index=runs.index).where(current, None))
    return runs.assign(**{TRIAL: keys})


def battery_runs(runs: pd.DataFrame, expected: dict[str, dict[str, str]]) -> pd.DataFrame:
    """The runs a card is made of: of a checked row, only its runs of the battery's current trials; of a row
    that cannot be checked, all of them (its card is incomplete)."""
    if runs.empty:
        return runs
    checked = runs["method_label"].isin(set(expected))
    wanted = [key in expected.get(label, {}) for label, key in zip(runs["method_label"], runs[TRIAL], strict=True)]
    return runs[~checked | pd.Series(wanted, index=runs.index)]


def current_version() -> int:
    return int(load_battery()["version"])


def recorded_version(runs: pd.DataFrame) -> int:
    """The newest battery version a row's runs were made under, compared as numbers (0: none recorded)."""
    if "battery_version" not in runs:
        return 0
    numbers = pd.to_numeric(runs["battery_version"], errors="coerce").dropna()
    return int(numbers.max()) if len(numbers) else 0


def tuned_trials(tuned: Suite, scale: str, default: dict[str, dict[str, str]], device: str = "cpu"
                 ) -> dict[str, dict[str, str]]:
    """label -> trials of each tuned row (``<label>+tuned<b>``) of a suite ``with_tuned`` made: its own on the
    datasets it was tuned on, and, as never present, its default row's on the others (a card over fewer
    datasets than the battery's is incomplete)."""
    out: dict[str, dict[str, str]] = {}
    for spec in expand(tuned, scale, device=device):
        if TUNED in spec.method_label:
            out.setdefault(spec.method_label, {})[spec.config_hash] = setting_text(
                spec.attack_label, spec.level, spec.dataset_label, spec.seed)
    for label, trials in out.items():
        tuned_on = {text.split()[1] for text in trials.values()}
        for text in default.get(label.split(TUNED, 1)[0], {}).values():
            if text.split()[1] not in tuned_on:
                trials[f"untuned {text}"] = f"{text} (not tuned on this dataset)"
    return out


def tuned_undefined(tuned: Suite, undefined: dict[str, dict]) -> dict[str, dict]:
    """A tuned row's undefined settings are its default row's (``suites.tuned`` labels it ``<label>+tuned<b>``)."""
    out = {}
    for entry in tuned.methods:
        base = entry.label.split(TUNED, 1)[0]
        if base != entry.label and base in undefined:
            out[entry.label] = undefined[base]
    return out


def tuning_note(runs: pd.DataFrame) -> str:
    """'tuned with fedarena tune (B configurations per row, frozen file D)' where the row's runs are a tuned row's
    (their label among the run's ``tuned_rows``), else ''."""
    if "tuned_budget" not in runs or "tuned_rows" not in runs:
        return ""
    own = pd.Series([str(label) in str(rows).split(",") for label, rows in zip(
        runs["method_label"], runs["tuned_rows"], strict=True)], index=runs.index, dtype=bool)
    tuned = runs[own].dropna(subset=["tuned_budget"])
    if tuned.empty:
        return ""
    files = sorted(set(tuned["tuned_file"].dropna().astype(str))) if "tuned_file" in tuned else []
    return (f"tuned with fedarena tune ({tuned['tuned_budget'].iloc[0]} configurations per row"
            + (f", frozen file {', '.join(files)}" if files else "") + ")")
