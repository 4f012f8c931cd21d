"""What each side pays, on the robustness card and the site's entry page (issue 56, "Costs on both sides"): the
means of the runs' ``cost_*`` metrics, nothing made up for runs recorded before them, the leaderboard's schema,
and the page's new section escaped."""

import json

import jsonschema
import pandas as pd
import pytest

from fedarena.battery.card import Card
from fedarena.battery.card_costs import card_costs
from fedarena.battery.harness import card_text, cards_of_rows
from fedarena.website.entries import builtin_entry, leaderboard, record, schema
from fedarena.website.entry_page import entry_html
from fedarena.website.pages import index_row

LABEL = "aggregator.median"
NAN = float("nan")


def run(attack, level, seed, **costs):
    """A finished run of the median's row on digits (as the store gives it back, normalized), with ``costs``
    as its ``cost_*`` metrics."""
    return {"method_label": LABEL, "dataset_label": "digits", "attack_label": attack, "level": level, "seed": seed,
            "config_hash": f"{attack}{level}s{seed}", "acc_pooled": 0.6, "acc_std": 0.1, "acc_worst10": 0.4,
            "asr_pooled": NAN, "diverged": False, "battery_version": "5", "privacy_label": "none",
            **{f"cost_{k}": v for k, v in costs.items()}}


def defense(server_ms, sent=4000.0, received=3996.0):
    return {"server_ms": server_ms, "bytes_sent": sent, "bytes_received": received}


RUNS = pd.DataFrame([
    run("clean", 0.0, 0, **defense(1.0), attack_ms=0.0, attack_forward=0.0, attack_backward=0.0),
    run("clean", 0.0, 1, **defense(3.0), attack_ms=0.0, attack_forward=0.0, attack_backward=0.0),
    run("alie", 0.2, 0, **defense(2.0), attack_ms=0.5, attack_forward=0.0, attack_backward=0.0),
    run("alie", 0.2, 1, **defense(4.0), attack_ms=1.5, attack_forward=0.0, attack_backward=0.0),
    run("min_max", 0.2, 0, **defense(5.0), attack_ms=10.0, attack_forward=100.0, attack_backward=40.0),
    run("min_max", 0.2, 1, **defense(NAN, NAN, NAN), attack_ms=NAN, attack_forward=NAN, attack_backward=NAN),
])  # the last: a run recorded before the costs existed (NaN: no metric), which must count for nothing


def card_from(runs: pd.DataFrame) -> Card:
    return cards_of_rows(runs, [LABEL], {}, set(), "smoke", [0.1, 0.2], {})[LABEL]


def test_the_cards_costs_are_the_means_of_its_runs_cost_metrics():
    costs = card_from(RUNS).costs
    assert costs["server_ms"] == pytest.approx((1 + 3 + 2 + 4 + 5) / 5)  # not / 6: the old run has none
    assert (costs["bytes_sent"], costs["bytes_received"]) == (4000.0, 3996.0)
    assert costs["attacks"] == {"alie@0.2": pytest.approx({"attack_ms": 1.0, "attack_forward": 0.0,
                                                           "attack_backward": 0.0}),
                                "min_max@0.2": {"attack_ms": 10.0, "attack_forward": 100.0, "attack_backward": 40.0}}
    assert "clean" not in costs["attacks"]  # no attacker there
    assert (costs["runs"], costs["recorded_runs"]) == (6, 5)
    partial = pd.DataFrame([run("clean", 0.0, 0, **defense(1.0)), run("clean", 0.0, 1, **defense(3.0, NAN, NAN))])
    assert card_costs(partial) == {"server_ms": 2.0, "bytes_sent": 4000.0, "bytes_received": 3996.0, "runs": 2,
                                   "recorded_runs": 2}  # each cost over the runs that recorded it
    text = card_text(card_from(RUNS))
    assert "server step 3.00 ms" in text and "| min_max@0.2 | 10.00 ms | 100 | 40 |" in text


def test_a_card_from_runs_without_cost_metrics_has_no_costs_and_the_page_says_so():
    old = RUNS.drop(columns=[c for c in RUNS if c.startswith("cost_")])
    card = card_from(old)
    assert card.costs == {}  # never a 0 made up
    assert "Costs: not recorded by these runs" in card_text(card)
    entry = builtin_entry(card, "smoke")
    page = entry_html(entry, "smoke", "../")
    assert "<h2>Costs</h2>" in page and "Costs: not recorded by these runs" in page and 'id="costs"' not in page
    assert '<td class="num" data-sort="">–</td><td>' in index_row(entry, 0)  # the index's server ms: –
    nan_only = card_from(RUNS.iloc[-1:].copy())  # the columns exist, every value NaN
    assert nan_only.costs == {}


def test_the_entry_page_shows_each_sides_costs():
    entry = builtin_entry(card_from(RUNS), "smoke")
    page = entry_html(entry, "smoke", "../")
    assert "3.00 ms per round" in page and "3.9 KiB (4,000 B) per round" in page and "3.9 KiB (3,996 B) per round" in page and 'id="costs"' in page
    assert "<td>min_max@0.2</td><td class=\"num\">10.00 ms</td>" in page
    assert "Means over the 5 of its 6 runs" in page
    assert '<td class="num" data-sort="3.000000">3.00</td>' in index_row(entry, 0)


def test_the_schema_validates_a_card_with_costs_and_a_record_holds_the_cards_keys():
    card = card_from(RUNS)
    data = json.loads(json.dumps(leaderboard([builtin_entry(card, "smoke")], 5, "smoke")))
    jsonschema.validate(data, schema())
    assert {k: data["entries"][0][k] for k in card.to_json()} == card.to_json()
    assert data["entries"][0]["costs"]["attacks"]["min_max@0.2"]["attack_forward"] == 100.0
    broken = json.loads(json.dumps(data))
    broken["entries"][0]["costs"]["attacks"]["alie@0.2"]["attack_sm"] = 1.0  # a misspelt cost
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema())
    broken["entries"][0]["costs"] = {"server_ms": -1.0}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema())


def test_a_card_written_before_the_costs_reads_without_them():
    written = record(builtin_entry(card_from(RUNS), "smoke"))
    written.pop("costs")
    card = Card.from_json(written)
    assert card.costs == {} and card.component == LABEL


def test_the_costs_section_escapes_what_the_store_gives():
    hostile = '<img src=x onerror="alert(1)">'
    card = card_from(RUNS.assign(attack_label=RUNS["attack_label"].replace({"alie": hostile})))
    assert f"{hostile}@0.2" in card.costs["attacks"]
    page = entry_html(builtin_entry(card, "smoke"), "smoke", "../")
    assert hostile not in page and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;@0.2" in page
