"""Vehicle as the reference code runs it (issue 17 item 7): the linear SVM initialised at zero, lr 0.01 and
600 rounds of one local step in the reproduction suites; the paper's lr 0.1 in the rounds procedure."""

import numpy as np
import pytest
import torch

from fedarena.datasets.catalog import build_dataset
from fedarena.errors import ConfigError
from fedarena.models.functional import build_model
from fedarena.suites.grid import expand
from fedarena.suites.parse import load_suite


def test_zero_init_svm_starts_at_zero_and_the_default_does_not():
    # Execute
    _, zero = build_model("svm", {"zero_init": True}, (100,), 2, "binary_pm1", seed=3, device=torch.device("cpu"))
    _, default = build_model("svm", {}, (100,), 2, "binary_pm1", seed=3, device=torch.device("cpu"))
    # Assert: 100 weights and a bias, all zero (reference: W = tf.zeros([100, 1]), b = tf.zeros([1]))
    assert zero.shape == (101,) and torch.equal(zero, torch.zeros(101))
    assert default.abs().sum() > 0


def vehicle_settings(suite: str) -> set[tuple]:
    """The Vehicle trials' schedules, MOCHA's aside (run_mocha.m's own: every device, 1000 W steps)."""
    trials = [t for t in expand(load_suite(suite), "paper", dataset="vehicle") if t.config.method["name"] != "mocha"]
    return {(t.config.lr, t.config.rounds, t.config.local_steps, t.config.batch_size, t.config.model["zero_init"],
             t.config.dataset["split"]) for t in trials}


def test_reproduction_suites_use_the_reference_script_and_clean_rounds_the_papers_lr():
    # Execute / Assert: run_vehicle_*.sh: lr 0.01, 600 rounds, 1 local iteration, batch 32, tested on every
    # sample not trained on (create_dataset.py)
    for suite in ("robustness", "fairness", "ditto_lambda"):
        assert vehicle_settings(suite) == {(0.01, 600, 1, 32, True, "reference")}, suite
    assert vehicle_settings("clean_rounds") == {(0.1, 1200, 1, 32, True, "paper")}


def test_reference_split_tests_on_every_sample_not_trained_or_validated_on(linear_vehicle):
    # Prepare: 4 devices of 60-90 samples; power-law training sizes cut the 72% training part
    rng = lambda: np.random.default_rng(0)  # noqa: E731
    options = {"data_dir": str(linear_vehicle), "num_clients": 4}
    paper = build_dataset("vehicle", options, rng())
    reference = build_dataset("vehicle", {**options, "split": "reference"}, rng())
    # Assert: the same training and validation samples; the reference tests on all the others (the paper's
    # test part and what the power-law cut left out, where it left some out)
    grown = 0
    for k, (p, r) in enumerate(zip(paper.clients, reference.clients, strict=True)):
        assert torch.equal(p.train.x, r.train.x) and torch.equal(p.val.x, r.val.x)
        assert len(r.train) + len(r.val) + len(r.test) == (60, 80, 70, 90)[k]
        assert torch.equal(r.test.x[-len(p.test):], p.test.x)
        grown += len(r.test) > len(p.test)
    assert grown >= 2 and paper.fingerprint != reference.fingerprint


def test_vehicle_refuses_an_unknown_split(linear_vehicle):
    with pytest.raises(ConfigError, match="vehicle split must be 'paper' or 'reference', got 'script'"):
        build_dataset("vehicle", {"data_dir": str(linear_vehicle), "num_clients": 4, "split": "script"}, np.random.default_rng(0))
