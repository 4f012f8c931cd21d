"""A component's robustness card from the battery's runs: what RobustBench reports for a classifier, for a
federated defense or method.

From the aggregated cells of the battery's experiment (``leaderboards.cells.aggregate``: means over seeds), a
setting (attack, level) scores the mean over the scale's datasets of benign pooled accuracy (and of its
spread across devices, the worst 10% of devices, the attack success rate). A card holds:

- ``clean_acc``: the clean setting's accuracy;
- ``worst``: per level, the lowest accuracy over every attack run at that level and the attack that reached it,
  with the fairness under it (``acc_std``, ``acc_worst10``); a level where the row ran nothing (its rule is
  undefined there) is ``{"undefined": why}`` and never ranked;
- ``worst_asr``: the highest attack success rate over the targeted attacks and levels, with its attack;
- ``rank``: per level, the row's place by worst-case accuracy among the built-in rows of its kind that have one
  (1 = best; ties share the better place), among complete cards of one battery version only; a card with no
  other such built-in card to rank against (a store without ``evaluate --builtin``'s cards) is not ranked, and
  ``unranked`` says why;
- ``intervals`` (setting -> metric -> [low, high], the 95% Student-t interval over the seeds) and ``grid`` (each
  setting and dataset with its seeds' values: ``battery.spread``);
- ``secure_aggregation`` and ``central_dp``: whether the row's server side runs under each, as its method and
  rule declare it (``sum_only``, ``sensitivity``), recorded with its runs (None: not known);
- ``costs`` (``battery.card_costs``): what each side pays, as the runs recorded it (``cost_*``): the defense's
  ``server_ms`` (its server step per round), ``bytes_sent`` and ``bytes_received`` (one drawn device's per round),
  and ``attacks``: per "attack@level" the attacker's ``attack_ms`` per round and its model passes beyond honest
  training (``attack_forward``, ``attack_backward``); means over the runs; {} where the runs predate these metrics;
- ``complete`` and ``missing``: whether every trial of the battery's current version for the row (each attack,
  level, dataset and seed it can run) is in the store with a finite accuracy, else which are not; an incomplete
  card is never ranked (a minimum over fewer settings can only flatter it) and states the battery version its
  runs were made under;
- the battery's version, the scale, the component's identity (its version) and the code version; ``tuning``:
  the values' origin where the row ran with ``fedarena tune``'s choice (its own row, ``<label>+tuned<budget>``).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from fedarena.battery.definition import BatteryError

CLAIM_KEYS = ("clean_acc", "robust_acc")


@dataclass
class Card:
    component: str  # the row's label, e.g. aggregator.median
    kind: str
    battery_version: int
    scale: str
    datasets: list[str]
    clean_acc: float | None
    worst: dict[str, dict]  # level (e.g. "0.2") -> {acc, attack, acc_std, acc_worst10} or {undefined}
    worst_asr: dict  # {asr, attack} ({} without a targeted attack)
    rank: dict[str, int | None] = field(default_factory=dict)  # level -> place among the built-in rows
    ranked_among: dict[str, int] = field(default_factory=dict)  # level -> how many rows were ranked
    identity: str = ""  # the component's version ("1", or "1+src:<hash>" for a plugin's)
    code_version: str = ""  # git_sha of the runs
    settings: dict[str, dict] = field(default_factory=dict)  # "attack@level" -> {acc, acc_std, acc_worst10, asr}
    complete: bool = False  # every trial of the battery's current version present and finite
    missing: list[str] = field(default_factory=list)  # what is not: "attack@level dataset sN (why)"
    tuning: str = ""  # the tuning note of a tuned row ('' at the component's defaults)
    unranked: str = ""  # why the card has no rank although complete ('' where it is ranked or incomplete)
    intervals: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # setting -> metric -> [low, high]
    grid: list[dict] = field(default_factory=list)  # per setting and dataset: seeds, values, mean, half-width
    secure_aggregation: bool | None = None  # its server side needs only the updates' sum
    central_dp: bool | None = None  # central DP composes with its method and rule
    costs: dict = field(default_factory=dict)  # server_ms, bytes_sent/received, attacks ({}: not recorded)

    @classmethod
    def from_json(cls, data: dict) -> Card:
        """A card as ``to_json`` wrote it (a None accuracy stays None: it was not finite)."""
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})

    def to_json(self) -> dict:
        return _finite(asdict(self))


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def setting_scores(cells: pd.DataFrame, label: str) -> pd.DataFrame:
    """One row per (attack, level) of a component: the means over the datasets of its cells' metrics."""
    own = cells[cells["method_label"] == label]
    if own.empty:
        return pd.DataFrame(columns=["attack_label", "level", "acc_pooled", "acc_std", "acc_worst10", "asr_pooled"])
    metrics = [m for m in ("acc_pooled", "acc_std", "acc_worst10", "asr_pooled") if m in own]
    return own.groupby(["attack_label", "level"], sort=False)[metrics].mean().reset_index()


def card_of(cells: pd.DataFrame, label: str, *, kind: str, battery_version: int, scale: str,
            levels: list[float], undefined: dict | None = None, missing: list[str] | None = None) -> Card:
    """The card of one row (``label``) from the aggregated cells; ``levels``: the battery's levels;
    ``undefined``: (attack, level) -> why, of the settings the row could not run; ``missing``: the battery's
    trials the row lacks (``missing_trials``; None: not checked, so the card is incomplete)."""
    scores = setting_scores(cells, label)
    clean = scores[scores["attack_label"] == "clean"]
    clean_acc = float(clean["acc_pooled"].iloc[0]) if len(clean) else None
    worst: dict[str, dict] = {}
    for level in levels:
        at = scores[(scores["attack_label"] != "clean") & np.isclose(scores["level"], level)]
        at = at[np.isfinite(at["acc_pooled"].to_numpy(dtype=float))]
        key = f"{level:g}"
        if at.empty:
            reasons = {why for (_, lv), why in (undefined or {}).items() if math.isclose(lv, level)}
            worst[key] = {"undefined": "; ".join(sorted(reasons)) or "no run at this level"}
            continue
        row = at.loc[at["acc_pooled"].idxmin()]
        worst[key] = {"acc": float(row["acc_pooled"]), "attack": str(row["attack_label"]),
                      "acc_std": float(row.get("acc_std", np.nan)), "acc_worst10": float(row.get("acc_worst10", np.nan))}
    unchecked = ["not checked against the battery (its component is not registered in this process)"]
    return Card(label, kind, battery_version, scale, _datasets(cells, label), clean_acc, worst,
                _worst_asr(scores), settings=_settings(scores), complete=missing == [],
                missing=unchecked if missing is None else list(missing))


def missing_trials(runs: pd.DataFrame, expected: dict[str, str], key: str = "config_hash") -> list[str]:
    """What of ``expected`` (trial key -> "attack@level dataset sN", the battery's trials for one row) the row's
    finished ``runs`` lack (their key in column ``key``: the identity): no run of that trial, or one without a
    finite benign accuracy."""
    if runs.empty or key not in runs:
        return sorted(expected.values())
    accuracy = pd.to_numeric(runs.get("acc_pooled", pd.Series(np.nan, index=runs.index)), errors="coerce")
    finite = set(runs.loc[np.isfinite(accuracy.to_numpy(dtype=float)), key].dropna().astype(str))
    present = set(runs[key].dropna().astype(str))
    return sorted(what if trial not in present else f"{what} (no finite accuracy)"
                  for trial, what in expected.items() if trial not in finite)


def _worst_asr(scores: pd.DataFrame) -> dict:
    if "asr_pooled" not in scores:
        return {}
    targeted = scores[np.isfinite(scores["asr_pooled"].to_numpy(dtype=float))]
    if targeted.empty:
        return {}
    row = targeted.loc[targeted["asr_pooled"].idxmax()]
    return {"asr": float(row["asr_pooled"]), "attack": f"{row['attack_label']}@{float(row['level']):g}"}


def _settings(scores: pd.DataFrame) -> dict[str, dict]:
    out = {}
    for row in scores.to_dict("records"):
        key = "clean" if row["attack_label"] == "clean" else f"{row['attack_label']}@{float(row['level']):g}"
        out[key] = {k: float(v) for k, v in row.items() if k not in ("attack_label", "level")}
    return out


def _datasets(cells: pd.DataFrame, label: str) -> list[str]:
    return sorted(set(cells.loc[cells["method_label"] == label, "dataset_label"].astype(str)))


FEDAVG = "aggregator.mean"  # FedAvg's row: the no-defense aggregator, and the global method with the mean


def rank_cards(cards: list[Card], builtin: set[str]) -> None:
    """Each complete card's place per level by worst-case accuracy among the complete built-in rows of its kind
    (and itself) of the same battery version; FedAvg's row counts among the methods too. An incomplete card has
    no rank (and is nobody's peer); nor has a card with no other built-in card to rank against (``unranked``)."""
    for card in cards:
        card.rank, card.ranked_among, card.unranked = {}, {}, ""
        for level, entry in card.worst.items():
            if "acc" not in entry or not card.complete:
                card.rank[level] = None
                continue
            peers = [c.worst[level]["acc"] for c in cards if (c.kind == card.kind or c.component == FEDAVG)
                     and c.complete and c.battery_version == card.battery_version
                     and level in c.worst and "acc" in c.worst[level] and (c.component in builtin or c is card)]
            if len(peers) < 2:  # itself alone: "1 of 1" would say nothing
                card.rank[level] = None
                continue
            card.rank[level] = 1 + sum(acc > entry["acc"] for acc in peers)
            card.ranked_among[level] = len(peers)
        if card.complete and not card.ranked_among and any("acc" in e for e in card.worst.values()):
            card.unranked = (f"no other complete built-in {card.kind} card of battery version {card.battery_version} "
                             f"at scale {card.scale} in this store to rank against (fedarena evaluate --builtin "
                             f"--scale {card.scale} computes them)")


def read_claim(path) -> dict:
    """A paper's claims for a component (JSON: ``clean_acc`` and ``robust_acc`` as {"attack@level": value}),
    checked: one line naming what is wrong and what is expected."""
    try:
        data = json.loads(open(path, encoding="utf-8").read())
    except OSError as err:
        raise BatteryError(f"claim file {path}: cannot read it ({err.strerror or err})") from None
    except ValueError as err:
        raise BatteryError(f"claim file {path}: not JSON ({err})") from None
    return check_claim(data, f"claim file {path}")


def check_claim(data, where: str) -> dict:
    """``data`` as a claim (``read_claim``'s schema), or a BatteryError starting with ``where``."""
    expected = ('{"clean_acc": 0.91, "robust_acc": {"min_max@0.2": 0.85}} (fractions; attack labels of the '
                'battery)')
    if not isinstance(data, dict) or set(data) - set(CLAIM_KEYS) or not data:
        raise BatteryError(f"{where}: expected keys {', '.join(CLAIM_KEYS)}, got "
                           f"{sorted(data) if isinstance(data, dict) else type(data).__name__}; e.g. {expected}")
    robust = data.get("robust_acc", {})
    values = [data.get("clean_acc", 0.0), *(robust.values() if isinstance(robust, dict) else [None])]
    if not isinstance(robust, dict) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                               and 0 <= v <= 1 for v in values):
        raise BatteryError(f"{where}: accuracies are fractions in [0, 1] and robust_acc maps "
                           f"'attack@level' to one; e.g. {expected}")
    for key in robust:
        attack, sep, level = str(key).partition("@")
        if not sep or not attack or not _is_number(level):
            raise BatteryError(f"{where}: robust_acc key {key!r} is not 'attack@level' (e.g. 'min_max@0.2')")
    return data


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def claimed_vs_measured(card: Card, claim: dict) -> list[tuple[str, float, float | None, list[float] | None]]:
    """(what, claimed, measured, measured interval) for every claim; measured None where the battery has no such
    setting, the interval None where the card has none."""
    rows = []
    if "clean_acc" in claim:
        rows.append(("clean", float(claim["clean_acc"]), card.clean_acc,
                     card.intervals.get("clean", {}).get("acc_pooled")))
    for key, value in claim.get("robust_acc", {}).items():
        attack, _, level = key.partition("@")
        setting = f"{attack}@{float(level):g}"
        measured = card.settings.get(setting, {}).get("acc_pooled")
        rows.append((setting, float(value), measured, card.intervals.get(setting, {}).get("acc_pooled")))
    return rows
