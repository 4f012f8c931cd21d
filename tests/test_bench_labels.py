"""Labels that say what ran: dataset labels of suites, run names and tags name the dataset really run."""

from pathlib import Path

import pytest
import yaml

from fedarena.bench.callback import identity_tags
from fedarena.config import SCALES
from fedarena.datasets import DATASETS
from fedarena.leaderboards.paper import paper_datasets
from fedarena.suites import SUITES
from fedarena.suites.dataset_labels import misnamed, shown_label
from fedarena.suites.grid import expand
from fedarena.suites.parse import load_suite
from fedarena.suites.spec import SuiteError

TINY = {"rounds": 2, "eval_every": 1, "clients_per_round": 2, "local_steps": 1}


def test_quick_robustness_trials_are_labelled_by_the_dataset_they_run():
    # Prepare
    suite = load_suite("robustness")
    # Execute
    trials = expand(suite, "quick", seeds=(0,))
    # Assert: digits runs say digits in the label, the run name and the tags, never fmnist
    ditto = next(t for t in trials if t.method_label == "ditto" and t.attack_label == "a3" and t.level == 0.5)
    assert ditto.config.dataset["name"] == "digits"
    assert ditto.dataset_label == "digits"
    assert ditto.name == "ditto digits a3@0.5 s0"
    tags = identity_tags(ditto, {"git_sha": "abc"})
    assert (tags["dataset_label"], tags["dataset_name"]) == ("digits", "digits")
    assert not any("fmnist" in t.name for t in trials)


def test_no_shipped_suite_labels_a_dataset_with_another_datasets_name():
    # Prepare / Execute
    entries = [(name, scale, e.label, e.patch["dataset"]["name"]) for name in SUITES.names()
               for scale in SCALES for e in load_suite(name, check_names=False).scales[scale].datasets]
    # Assert: e.g. (robustness, quick, digits, digits) and (fedtilt, paper, fmnist, fmnist_fedtilt)
    assert ("robustness", "quick", "digits", "digits") in entries
    assert ("fedtilt", "paper", "fmnist", "fmnist_fedtilt") in entries
    assert [e for e in entries if misnamed(e[2], e[3], DATASETS.names())] == []


def test_a_label_naming_another_dataset_is_refused(tmp_path: Path):
    # Prepare: digits labelled fmnist, the mislabelling of issue 11
    data = {
        "name": "mislabelled",
        "methods": [{"label": "global", "method": {"name": "global"}}],
        "attacks": [{"label": "clean", "attack": {"name": "none"}, "levels": [0.0]}],
        "scales": {s: {"fixed": TINY, "seeds": [0],
                       "datasets": [{"label": "fmnist", "dataset": {"name": "digits", "num_clients": 6}}]}
                   for s in SCALES},
    }
    path = tmp_path / "mislabelled.yaml"
    path.write_text(yaml.safe_dump(data))
    # Execute / Assert
    with pytest.raises(SuiteError, match=r"scales\.smoke\.datasets\[0\]\.label: 'fmnist' names another dataset "
                                         r"than the one run \('digits'\).*`label: digits`"):
        load_suite(path)


@pytest.mark.parametrize(
    ("label", "name", "shown"),
    [
        ("fmnist", "digits", "digits"),  # a paper's dataset id on another dataset: the dataset run
        ("fmnist", "fmnist_fedtilt", "fmnist"),  # FedTilt's partition of Fashion-MNIST is Fashion-MNIST
        ("digits", "digits", "digits"),
        ("my_mix", "digits", "my_mix"),  # a label that names no dataset is free
    ],
)
def test_shown_label_is_the_dataset_run_when_the_label_names_another(label, name, shown):
    assert shown_label(label, name, paper_datasets()) == shown  # as the leaderboards see labels
