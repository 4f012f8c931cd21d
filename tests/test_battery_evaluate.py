"""``fedarena.evaluate`` through the benchmark runner (real Ray Tune, real MLflow) at the smoke scale: a built-in
aggregator's card, the same call served from the store, and a plugin's aggregator ranked against it."""

import json

import pytest
import yaml

import fedarena
from fedarena.battery.definition import battery_suite, row_of
from fedarena.battery.harness import store_cards
from fedarena.bench.progress import Printer
from fedarena.report.compose import build_report
from fedarena.suites.tuned import with_tuned

pytestmark = pytest.mark.integration  # real processes: Ray

PLUGIN = '''
from fedarena import aggregator, check_updates


@aggregator("shrunk_mean")
def shrunk_mean(updates, *, weights, losses, f, factor: float = 0.5):
    """The mean scaled by ``factor`` (a test rule)."""
    check_updates(updates, f)
    return factor * updates.mean(0)
'''


def test_a_card_is_computed_served_from_the_store_and_a_plugin_is_ranked_against_it(ray_cluster, tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    options = {"scale": "smoke", "tracking_uri": uri, "storage": tmp_path / "ray", "emit": lambda text: None}
    lines = []
    # Execute: the median's card, then the same call again
    (median,) = fedarena.evaluate("median", out=tmp_path / "median", printer=Printer(lines.append), **options)
    again_lines = []
    (again,) = fedarena.evaluate("median", printer=Printer(again_lines.append), **options)
    # Assert: 50 battery trials ran once; the second call trained nothing and gives the same card
    assert any("50 trials; 0 already finished" in line for line in lines), lines
    assert any("50 trials; 50 already finished" in line for line in again_lines), again_lines
    assert again.to_json() == median.to_json()
    card = json.loads((tmp_path / "median" / "card.json").read_text())
    assert card["component"] == "aggregator.median" and card["battery_version"] == 5 and card["scale"] == "smoke"
    assert 0 < card["clean_acc"] <= 1 and set(card["worst"]) == {"0.1", "0.2", "0.5", "0.8"}
    assert all("acc" in card["worst"][level] and card["worst"][level]["attack"] for level in card["worst"])
    assert card["worst_asr"]["attack"].split("@")[0] in {"badnets", "dba", "model_replacement", "neurotoxin",
                                                          "targeted_flip", "a3fl", "edge_case", "iba"}
    # the only built-in row in this store: not ranked "1 of 1", and the card says why
    assert card["rank"] == {"0.1": None, "0.2": None, "0.5": None, "0.8": None} and card["ranked_among"] == {}
    assert "no other complete built-in aggregator card of battery version 5 at scale smoke" in card["unranked"]
    assert card["secure_aggregation"] is False and card["central_dp"] is True  # as the median declares it
    assert set(card["intervals"]["clean"]) >= {"acc_pooled", "acc_std"} and len(card["grid"]) == 50
    assert card["complete"] is True and card["missing"] == []
    assert "## Robustness card: aggregator.median" in (tmp_path / "median" / "card.md").read_text()
    # Execute: a plugin's aggregator, from a file outside the repository
    plugin = tmp_path / "shrunk.py"
    plugin.write_text(PLUGIN)
    (mine,) = fedarena.evaluate("shrunk_mean", include=[plugin], settings={"factor": 0.8}, **options)
    # Assert: its card, ranked among the built-in rows (the median) and itself
    assert mine.component == "aggregator.shrunk_mean+factor0.8" and mine.identity.startswith("1+src:")
    assert all(mine.ranked_among[level] == 2 and mine.rank[level] in (1, 2) for level in mine.worst)
    # Execute: the median with values a frozen choice gives (written by hand here: `fedarena tune` is tested apart)
    frozen = tmp_path / "tuned.yaml"
    frozen.write_text(yaml.safe_dump({"fedarena_tuned": 1, "suite": "battery", "scale": "smoke", "budget": 2,
                                      "rows": {"aggregator.median": {"digits": {"values": {"lr": 0.1}}}}}))
    (tuned,) = fedarena.evaluate("median", tuned=frozen, **options)
    (median_after,) = fedarena.evaluate("median", **options)
    (mine_after,) = fedarena.evaluate("shrunk_mean", include=[plugin], settings={"factor": 0.8}, **options)
    # Assert: the tuned row is a card of its own, with its note, beside the default one, which it does not replace;
    # it ranks against the built-in rows like any other row, and the others' ranks stay as they were
    assert tuned.component == "aggregator.median+tuned2" and tuned.complete and "2 configurations" in tuned.tuning
    assert median_after.to_json() == median.to_json() and mine_after.rank == mine.rank
    assert tuned.clean_acc != median.clean_acc
    battery = battery_suite([row_of("aggregator", "median")], "smoke")
    during = store_cards(uri, battery, tuned=with_tuned(battery.suite, "smoke", frozen))  # what the tuned call ranked
    assert during["aggregator.median"].to_json() == median.to_json()
    assert during["aggregator.median+tuned2"].complete
    page = build_report("battery", uri, tmp_path / "report").read_text()
    assert "Robustness cards" in page and "aggregator.shrunk_mean+factor0.8" in page
    assert "aggregator.median+tuned2" in page and "(incomplete)" not in page
