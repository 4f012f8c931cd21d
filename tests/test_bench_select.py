"""A method entry's ``select``: variants per scale, their labels and tags, strict validation."""

from pathlib import Path

import pytest
import yaml

from fedarena.bench.callback import identity_tags
from fedarena.config import SCALES
from fedarena.suites.grid import expand
from fedarena.suites.parse import load_suite
from fedarena.suites.spec import SuiteError

TINY = {"rounds": 2, "eval_every": 1, "clients_per_round": 4, "local_steps": 1}
SYNTHETIC = {"label": "synthetic", "dataset": {"name": "synthetic", "num_clients": 8, "max_samples": 60, "dim": 5}}
MGDA = {"label": "mgda", "method": {"name": "global"}, "aggregator": {"name": "fedmgda_plus"},
        "select": {"by": "val_acc_pooled", "over": {"aggregator.eps": [0.0, 0.5]}, "scales": ["paper"]}}


def write(tmp_path: Path, methods: list, **extra) -> Path:
    data = {
        "name": "sel",
        "methods": [{"label": "global", "method": {"name": "global"}}, *methods],
        "attacks": [{"label": "clean", "attack": {"name": "none"}, "levels": [0.0]},
                    {"label": "a1", "attack": {"name": "a1"}, "levels": [0.25]}],
        "scales": {s: {"fixed": TINY, "seeds": [0], "datasets": [SYNTHETIC]} for s in SCALES},
        **extra,
    }
    path = tmp_path / "sel.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_select_runs_one_variant_per_value_at_its_scales_only(tmp_path):
    # Prepare
    suite = load_suite(write(tmp_path, [MGDA]))
    # Execute
    paper = [t for t in expand(suite, "paper") if t.attack_label == "clean"]
    quick = [t for t in expand(suite, "quick") if t.attack_label == "clean"]
    # Assert: at paper, two variants of the row "mgda" with eps set and their tags; at quick, the entry once
    assert [(t.method_label, t.config.aggregator["eps"], t.select_group, t.select_by, t.variant)
            for t in paper if t.method_label != "global"] == [
        ("mgda_eps0", 0.0, "mgda", "val_acc_pooled", "eps=0"),
        ("mgda_eps0.5", 0.5, "mgda", "val_acc_pooled", "eps=0.5"),
    ]
    assert paper[1].name == "mgda_eps0 synthetic clean s0"
    assert [(t.method_label, t.select_group) for t in quick] == [("global", ""), ("mgda", "")]
    tags = identity_tags(paper[2], {})
    assert (tags["method_label"], tags["select_group"], tags["select_by"], tags["variant"]) == (
        "mgda_eps0.5", "mgda", "val_acc_pooled", "eps=0.5")
    assert "select_group" not in identity_tags(quick[1], {})


def test_rules_naming_the_entry_apply_to_every_variant(tmp_path):
    # Prepare: exclude the row mgda under a1
    suite = load_suite(write(tmp_path, [MGDA], exclude=[{"method": "mgda", "attack": "a1"}]))
    # Execute
    trials = expand(suite, "paper")
    # Assert
    assert sorted((t.method_label, t.attack_label) for t in trials) == [
        ("global", "a1"), ("global", "clean"), ("mgda_eps0", "clean"), ("mgda_eps0.5", "clean")]


def test_robustness_selects_fedmgda_eps_among_the_papers_values():
    # Prepare / Execute
    trials = expand(load_suite("robustness"), "paper", dataset="vehicle", seeds=(0,))
    # Assert
    clean = [t for t in trials if t.select_group == "fedmgda_plus" and t.attack_label == "clean"]
    assert [t.config.aggregator["eps"] for t in clean] == [0.0, 0.1, 0.5, 1.0]
    assert {t.select_by for t in clean} == {"val_acc_pooled"}


@pytest.mark.parametrize(
    ("select", "where", "message"),
    [
        ({"by": "val_acc_pooled", "over": {"aggregator.eps": [0.1]}, "among": 1}, "methods[1].select.among",
         "unknown key; allowed: by, over, scales"),
        ({"over": {"aggregator.eps": [0.1]}}, "methods[1].select", "missing key 'by'"),
        ({"by": "val_acc", "over": {"aggregator.eps": [0.1]}}, "methods[1].select.by",
         "unknown metric 'val_acc'; available: acc_pooled"),
        ({"by": "val_acc_pooled", "over": {"aggregator": [0.1]}}, "methods[1].select.over.aggregator",
         "a setting to select is section.option"),
        ({"by": "val_acc_pooled", "over": {"aggregator.eps": [0.1, 0.1]}}, "methods[1].select.over.aggregator.eps",
         "duplicate values"),
        ({"by": "val_acc_pooled", "over": {"aggregator.epsilon": [0.1]}}, "methods[1].select.aggregator",
         "epsilon"),
        ({"by": "val_acc_pooled", "over": {"aggregator.eps": [0.1]}, "scales": ["fast"]},
         "methods[1].select.scales[0]", "unknown scale 'fast'"),
    ],
)
def test_select_is_validated_strictly(tmp_path, select, where, message):
    # Prepare
    path = write(tmp_path, [{**MGDA, "select": select}])
    # Execute / Assert: the file, the key and the reason
    with pytest.raises(SuiteError) as err:
        load_suite(path)
    assert f"{path}: {where}" in str(err.value) and message in str(err.value)
