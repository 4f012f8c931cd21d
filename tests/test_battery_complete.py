"""A card only from a complete battery: every trial of the battery's current version present and finite, or the
card says what is missing, states the version its runs were made under and is not ranked (issue 58)."""

import pandas as pd
import pytest

from fedarena.battery.card import card_of, missing_trials, rank_cards
from fedarena.battery.completeness import expected_trials, recorded_version
from fedarena.battery.definition import battery_suite, row_of, version
from fedarena.battery.harness import card_text, cards_of_rows, cards_table, report_cards

BUILTIN = {"aggregator.median", "aggregator.krum", "aggregator.mean"}


def cell(method, attack, level, acc):
    return {"method_label": method, "dataset_label": "digits", "attack_label": attack, "level": level,
            "acc_pooled": acc, "acc_std": 0.1, "acc_worst10": 0.5, "asr_pooled": float("nan")}


CELLS = pd.DataFrame([cell("aggregator.median", "a1", 0.1, 0.7), cell("aggregator.krum", "a1", 0.1, 0.8),
                      cell("aggregator.mean", "a1", 0.1, 0.6)])


def cards(missing: dict[str, list[str]], versions: dict[str, int] | None = None):
    out = [card_of(CELLS, label, kind="aggregator", battery_version=(versions or {}).get(label, 5), scale="smoke",
                   levels=[0.1], missing=missing.get(label, [])) for label in sorted(BUILTIN)]
    rank_cards(out, BUILTIN)
    return {c.component: c for c in out}


def test_a_row_missing_one_battery_trial_is_incomplete_and_unranked_and_ranks_nobody():
    by = cards({"aggregator.krum": ["mimic@0.1 digits s0"]})
    assert not by["aggregator.krum"].complete and by["aggregator.krum"].rank == {"0.1": None}
    # krum (0.8, the best) is no peer: the median is first of the two complete rows
    assert by["aggregator.median"].rank == {"0.1": 1} and by["aggregator.median"].ranked_among == {"0.1": 2}
    assert by["aggregator.krum"].to_json()["missing"] == ["mimic@0.1 digits s0"]
    assert "**Incomplete** (not ranked): 1 of the battery's trials missing: mimic@0.1 digits s0" in card_text(by["aggregator.krum"])
    table = cards_table(list(by.values()))
    assert table.blocks[0].rows[0][0].text == "aggregator.krum (incomplete)"
    assert "Incomplete (some of the battery's current trials missing; not ranked): aggregator.krum." in table.footnotes


def test_complete_rows_of_another_battery_version_are_not_ranked_together():
    by = cards({}, versions={"aggregator.krum": 1})
    # krum alone at version 1: no other built-in card to rank against, said instead of "1 of 1"
    assert by["aggregator.krum"].rank == {"0.1": None} and by["aggregator.krum"].ranked_among == {}
    assert "no other complete built-in aggregator card of battery version 1" in by["aggregator.krum"].unranked
    assert "Not ranked: no other complete built-in" in card_text(by["aggregator.krum"])
    assert by["aggregator.median"].ranked_among == {"0.1": 2} and not by["aggregator.median"].unranked


def test_a_card_left_unchecked_is_incomplete():
    card = card_of(CELLS, "aggregator.median", kind="aggregator", battery_version=5, scale="smoke", levels=[0.1])
    assert not card.complete and "not checked" in card.missing[0]


def test_recorded_battery_versions_compare_as_numbers():
    assert recorded_version(pd.DataFrame({"battery_version": ["9", "10", "2"]})) == 10
    assert recorded_version(pd.DataFrame({"x": [1]})) == 0


def test_missing_trials_names_absent_and_non_finite_ones():
    expected = {"h1": "a1@0.1 digits s0", "h2": "a1@0.2 digits s0", "h3": "clean@0 digits s0"}
    runs = pd.DataFrame({"config_hash": ["h1", "h2"], "acc_pooled": [0.5, float("nan")]})
    assert missing_trials(runs, expected) == ["a1@0.2 digits s0 (no finite accuracy)", "clean@0 digits s0"]
    assert missing_trials(runs.iloc[:0], expected) == sorted(expected.values())


@pytest.fixture(scope="module")
def median_battery():
    battery = battery_suite([row_of("aggregator", "median")], "smoke")
    return battery, expected_trials(battery, ["aggregator.median"])["aggregator.median"]


def finished_runs(expected: dict[str, str], battery_version: str) -> pd.DataFrame:
    """One finished run per expected trial of the median's row (as the store gives them back, normalized)."""
    rows = []
    for key, what in expected.items():
        setting, dataset, seed = what.split()
        attack, level = setting.split("@")
        rows.append({"method_label": "aggregator.median", "dataset_label": dataset, "attack_label": attack,
                     "level": float(level), "seed": int(seed[1:]), "config_hash": key, "acc_pooled": 0.6,
                     "acc_std": 0.1, "acc_worst10": 0.4, "asr_pooled": float("nan"), "diverged": False,
                     "battery_version": battery_version, "privacy_label": "none"})
    return pd.DataFrame(rows)


def card_from(battery, expected, runs, label="aggregator.median"):
    levels = sorted({lv for a in battery.suite.attacks for lv in a.levels if lv > 0})
    return cards_of_rows(runs, [label], {label: expected}, set(), "smoke", levels, {})[label]


def test_a_row_with_every_current_trial_is_complete_at_the_current_version(median_battery):
    battery, expected = median_battery
    runs = finished_runs(expected, "4")  # made under an earlier version, the same trials as today's
    card = card_from(battery, expected, runs)
    assert card.complete and card.missing == [] and card.battery_version == version()


def test_a_row_evaluated_before_an_attack_joined_is_incomplete_at_its_own_version(median_battery):
    battery, expected = median_battery
    runs = finished_runs(expected, "1")
    runs = runs[~runs["attack_label"].isin(["mimic", "iba"])]  # the attacks later versions added
    card = card_from(battery, expected, runs)
    assert not card.complete and card.battery_version == 1
    assert {m.split("@")[0] for m in card.missing} == {"mimic", "iba"} and len(card.missing) == 4


def test_runs_outside_the_current_battery_never_enter_the_card(median_battery):
    battery, expected = median_battery
    runs = finished_runs(expected, "5")
    extra = runs.iloc[:2].assign(attack_label="retired_attack", level=0.1, config_hash=["x1", "x2"], acc_pooled=0.01)
    card = card_from(battery, expected, pd.concat([runs, extra], ignore_index=True))
    assert card.complete and card.worst["0.1"]["acc"] == pytest.approx(0.6)
    assert not any(key.startswith("retired_attack") for key in card.settings)


@pytest.mark.parametrize("recorded,complete", [("5", True), ("1", False)])
def test_the_report_checks_a_tuned_row_by_setting_on_current_version_runs_only(median_battery, recorded, complete):
    battery, expected = median_battery
    runs = finished_runs(expected, str(version())).assign(scale="smoke", device="cpu")
    tuned = runs.assign(method_label="aggregator.median+tuned8", config_hash="tuned",
                        battery_version=str(version()) if recorded == "5" else recorded)
    cards = {c.component: c for c in report_cards(pd.concat([runs, tuned], ignore_index=True))}
    assert cards["aggregator.median"].complete
    assert cards["aggregator.median+tuned8"].complete is complete
    assert cards["aggregator.median+tuned8"].battery_version == (version() if complete else 1)


def test_only_a_tuned_rows_card_carries_the_tuning_note(median_battery):
    battery, expected = median_battery
    runs = finished_runs(expected, "5").assign(tuned_budget="8", tuned_file="abc", tuned_rows="aggregator.krum+tuned8")
    assert card_from(battery, expected, runs).tuning == ""  # a default row run in a --tuned benchmark
    tuned = runs.assign(tuned_rows="aggregator.median")
    assert card_from(battery, expected, tuned).tuning == "tuned with fedarena tune (8 configurations per row, frozen file abc)"


def test_a_frozen_choice_of_another_battery_version_is_refused_before_any_work(tmp_path):
    import yaml

    import fedarena
    from fedarena.battery.definition import BatteryError

    frozen = tmp_path / "tuned.yaml"
    frozen.write_text(yaml.safe_dump({"fedarena_tuned": 1, "suite": "battery", "scale": "smoke", "budget": 2,
                                      "battery_version": 1, "rows": {}}))
    with pytest.raises(BatteryError, match=f"tuned on battery version 1, not the current {version()}"):
        fedarena.evaluate("median", tuned=frozen, scale="smoke", tracking_uri=f"sqlite:///{tmp_path}/m.db")
    assert not (tmp_path / "m.db").exists()
