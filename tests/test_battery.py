"""The standard threat battery's cards on hand-made cells (worst case and rank per level, undefined levels,
claims) and its bad input (one line each, before any work)."""

import json
import re

import pandas as pd
import pytest

import fedarena
from fedarena.battery.card import Card, card_of, claimed_vs_measured, rank_cards, read_claim
from fedarena.battery.definition import (
    BatteryError,
    battery_data,
    battery_suite,
    builtin_rows,
    row_of,
    version,
)
from fedarena.battery.harness import card_text, claim_text

LEVELS = [0.1, 0.2, 0.5]


def cell(method, dataset, attack, level, acc, std=0.1, worst10=0.5, asr=float("nan")):
    return {"method_label": method, "dataset_label": dataset, "attack_label": attack, "level": level,
            "acc_pooled": acc, "acc_std": std, "acc_worst10": worst10, "asr_pooled": asr}


def cells_of(*rows) -> pd.DataFrame:
    return pd.DataFrame(list(rows))


# aggregator.alpha: clean .9; at 10% min_max .8 / badnets .85 (ASR .6); at 20% min_max .6 and a1 .5 (on digits;
# on mnist_5k .7 and .3: the means over the datasets are .65 and .4); undefined at 50%
ALPHA = [cell("aggregator.alpha", d, "clean", 0.0, 0.9) for d in ("digits", "mnist_5k")] + [
    cell("aggregator.alpha", d, "min_max", 0.1, 0.8) for d in ("digits", "mnist_5k")] + [
    cell("aggregator.alpha", d, "badnets", 0.1, 0.85, asr=0.6) for d in ("digits", "mnist_5k")] + [
    cell("aggregator.alpha", "digits", "min_max", 0.2, 0.6), cell("aggregator.alpha", "mnist_5k", "min_max", 0.2, 0.7),
    cell("aggregator.alpha", "digits", "a1", 0.2, 0.5, std=0.2, worst10=0.1),
    cell("aggregator.alpha", "mnist_5k", "a1", 0.2, 0.3, std=0.4, worst10=0.0)]


def test_the_worst_case_per_level_is_the_lowest_dataset_mean_and_names_its_attack():
    card = card_of(cells_of(*ALPHA), "aggregator.alpha", kind="aggregator", battery_version=1, scale="quick",
                   levels=LEVELS, undefined={("a1", 0.5): "trimmed_mean needs 2f < n"})
    assert card.clean_acc == pytest.approx(0.9) and card.datasets == ["digits", "mnist_5k"]
    assert card.worst["0.1"] == pytest.approx({"acc": 0.8, "attack": "min_max", "acc_std": 0.1, "acc_worst10": 0.5})
    assert card.worst["0.2"]["attack"] == "a1" and card.worst["0.2"]["acc"] == pytest.approx(0.4)
    assert card.worst["0.2"]["acc_std"] == pytest.approx(0.3) and card.worst["0.2"]["acc_worst10"] == pytest.approx(0.05)
    assert card.worst["0.5"] == {"undefined": "trimmed_mean needs 2f < n"}
    assert card.worst_asr == pytest.approx({"asr": 0.6, "attack": "badnets@0.1"})


def test_ranks_per_level_among_the_built_in_rows_of_the_kind_undefined_never_ranked():
    # Prepare: three built-in aggregators and a plugin's (not among the built-in peers of the others)
    rows = [cell("aggregator.median", "digits", "min_max", 0.1, 0.7), cell("aggregator.median", "digits", "a1", 0.5, 0.6),
            cell("aggregator.krum", "digits", "min_max", 0.1, 0.9),
            cell("aggregator.mean", "digits", "min_max", 0.1, 0.7), cell("aggregator.mean", "digits", "a1", 0.5, 0.2),
            cell("aggregator.mine", "digits", "min_max", 0.1, 0.95), cell("method.ditto", "digits", "min_max", 0.1, 0.99)]
    cells = cells_of(*rows)
    cards = [card_of(cells, label, kind=label.split(".")[0], battery_version=1, scale="smoke", levels=[0.1, 0.5],
                     missing=[]) for label in ("aggregator.median", "aggregator.krum", "aggregator.mean", "aggregator.mine", "method.ditto")]
    # Execute
    rank_cards(cards, builtin={"aggregator.median", "aggregator.krum", "aggregator.mean", "method.ditto"})
    by = {c.component: c for c in cards}
    # Assert: 1 = best; ties share the better place; krum has no 50% (undefined: not ranked); the plugin's
    # card ranks against the built-in rows and itself; FedAvg (aggregator.mean) ranks among methods too
    assert by["aggregator.krum"].rank == {"0.1": 1, "0.5": None}
    assert by["aggregator.median"].rank == {"0.1": 2, "0.5": 1} and by["aggregator.mean"].rank["0.1"] == 2
    assert by["aggregator.mean"].rank["0.5"] == 2 and by["aggregator.median"].ranked_among["0.5"] == 2
    assert by["aggregator.mine"].rank["0.1"] == 1 and by["aggregator.mine"].ranked_among["0.1"] == 4
    assert by["method.ditto"].rank["0.1"] == 1 and by["method.ditto"].ranked_among["0.1"] == 2
    text = card_text(by["aggregator.krum"])
    assert "| 50% | undefined |" in text and "| 10% | 0.900 | min_max |" in text and "1 of 3" in text


def test_a_claim_is_printed_against_the_measured_setting(tmp_path):
    claim = tmp_path / "claim.json"
    claim.write_text(json.dumps({"clean_acc": 0.95, "robust_acc": {"min_max@0.2": 0.8, "fang@0.1": 0.7}}))
    card = card_of(cells_of(*ALPHA), "aggregator.alpha", kind="aggregator", battery_version=1, scale="quick",
                   levels=LEVELS)
    card.intervals = {"clean": {"acc_pooled": [0.88, 0.92]}, "min_max@0.2": {"acc_pooled": [0.6, 0.85]}}
    rows = claimed_vs_measured(card, read_claim(claim))
    assert rows == [("clean", 0.95, pytest.approx(0.9), [0.88, 0.92]),
                    ("min_max@0.2", 0.8, pytest.approx(0.65), [0.6, 0.85]), ("fang@0.1", 0.7, None, None)]
    # the claim outside the measured interval is shown with its difference, the one inside as inside
    text = claim_text(card, read_claim(claim))
    assert "| clean | 0.950 | 0.900 | [0.880, 0.920] | -0.050 | no |" in text
    assert "| min_max@0.2 | 0.800 | 0.650 | [0.600, 0.850] | -0.150 | yes |" in text


@pytest.mark.parametrize("text,message", [
    ("{", "not JSON"),
    ('{"clean": 0.9}', "expected keys clean_acc, robust_acc, got ['clean']"),
    ('{"robust_acc": {"min_max": 0.8}}', "robust_acc key 'min_max' is not 'attack@level'"),
    ('{"clean_acc": 91}', "accuracies are fractions in [0, 1]"),
    ('[0.9]', "expected keys clean_acc, robust_acc, got list"),
])
def test_a_claim_file_that_is_not_the_schema_is_one_line(tmp_path, text, message):
    path = tmp_path / "claim.json"
    path.write_text(text)
    with pytest.raises(BatteryError, match=message.replace("[", r"\[").replace("]", r"\]")):
        read_claim(path)


def test_bad_components_and_scales_are_one_line_before_any_work():
    with pytest.raises(BatteryError, match=re.escape("unknown aggregator 'medain' (did you mean 'median'?); available:")):
        row_of("aggregator", "medain")
    with pytest.raises(BatteryError, match="the battery .version 5. has no scale 'huge'; its scales: smoke, quick, paper"):
        battery_data([row_of("aggregator", "median")], "huge")
    with pytest.raises(BatteryError, match="exactly one of --aggregator NAME, --method NAME or --builtin"):
        fedarena.evaluate("median", "ditto", scale="smoke")
    with pytest.raises(BatteryError, match="unknown parameter"):
        battery_suite([row_of("aggregator", "median", {"nosuch": 1})], "smoke")


def test_the_battery_is_one_version_of_threats_for_every_row():
    # Prepare / Execute: the smoke battery for Krum and the trimmed mean
    battery = battery_suite([row_of("aggregator", "krum"), row_of("aggregator", "trimmed_mean")], "smoke")
    attacks = {a.label: a.levels for a in battery.suite.attacks}
    # Assert: every attack of the definition at its levels; Krum meets tailored_krum as Krum, the trimmed
    # mean meets tailored_median as the trimmed mean; undefined levels are left out with their reason
    assert version() == 5 and battery.suite.tags == {"battery_version": "5"}
    assert attacks["a1"] == (0.1, 0.2, 0.5, 0.8) and attacks["badnets"] == (0.1, 0.2) and len(attacks) == 23
    patches = {(r.match["method"], r.match["attack"]): r.patch for r in battery.suite.overrides}
    assert patches[(("aggregator.krum",), ("tailored_krum",))] == {"attack": {"target": "krum"}}
    assert patches[(("aggregator.trimmed_mean",), ("tailored_median",))] == {"attack": {"rule": "trimmed_mean"}}
    assert set(battery.undefined["aggregator.krum"]) == {(a, 0.8) for a in ("a1", "a2")}
    assert "needs n - f - 2 >= 1" in battery.undefined["aggregator.krum"][("a1", 0.8)]
    assert "needs 2 * 4 < n = 5" in battery.undefined["aggregator.trimmed_mean"][("a1", 0.8)]  # f = 4 of 5 at 80%
    assert {r.label for r in builtin_rows()} >= {"aggregator.median", "method.ditto", "aggregator.mean"}
    assert "method.global" not in {r.label for r in builtin_rows()}  # FedAvg is aggregator.mean


def test_a_card_serialises_without_nan():
    card = Card("aggregator.x", "aggregator", 1, "smoke", ["digits"], None, {"0.1": {"undefined": "why"}}, {})
    assert json.loads(json.dumps(card.to_json()))["clean_acc"] is None
