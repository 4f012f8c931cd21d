"""The version rule: no component's numbers change while every version stays (``tests/identity_sweep.py``)."""

import json

import identity_sweep
import pytest
import torch
from identity_sweep import (
    GOLDEN,
    compute,
    differences,
    differences_from_golden,
    fingerprint,
    sweep_configs,
    vehicle_folder,
)

from fedarena.config import ExperimentConfig
from fedarena.methods.aggregators import krum as krum_module
from fedarena.methods.aggregators.base import AGGREGATORS, PRE_AGGREGATORS
from fedarena.methods.aggregators.builder import pre_names
from fedarena.sections import KINDS
from fedarena.simulation.identity import trial_identity

pytestmark = pytest.mark.slow  # ~100 small federated runs (about 15 s)

KRUM_AT_80 = "krum at 80% in reference mode"


@pytest.fixture(scope="module")
def vehicle_dir(tmp_path_factory):
    return vehicle_folder(tmp_path_factory.mktemp("vehicle"))


@pytest.fixture(scope="module")
def golden():
    return json.loads(GOLDEN.read_text())


def test_every_fingerprint_is_the_golden_one_of_its_identity(vehicle_dir, golden):
    # Execute
    computed = compute(vehicle_dir)
    # Assert: an identity not in the golden file is a version bump (or a new config): regenerate it with
    # `python tests/identity_sweep.py --update`; a different fingerprint under the same identity is a change of
    # behaviour without a version bump
    missing = sorted(e["name"] for h, e in computed.items() if h not in golden)
    assert not missing, f"identities not in {GOLDEN.name} (a version was bumped? run tests/identity_sweep.py --update): {missing}"
    # a few configs hit a tie or a chaotic step that two CPUs' kernels round apart (Bulyan's and Neurotoxin's ties,
    # SKL's saturated softmax): their entries also hold ("also") the fingerprint the other CPU computes; a change of
    # behaviour moves away from every one of them
    changed = {e["name"]: differences_from_golden(golden[h], e["fingerprint"]) for h, e in computed.items()}
    assert not {k: v for k, v in changed.items() if v}, "numbers changed while every version stayed: bump the version"


def test_the_sweep_covers_every_registered_component(vehicle_dir):
    configs = [data for _, data in sweep_configs(vehicle_dir)]
    used = {(kind, data[kind]["name"]) for data in configs for kind in KINDS if kind in data}
    for kind in ("method", "aggregator"):
        assert {(kind, name) for name in KINDS[kind].registry.built_in()} <= used
    assert {("attack", name) for name in KINDS["attack"].registry.built_in() if name != "none"} <= used
    pres = {name for data in configs for name in pre_names(data.get("aggregator", {}))}
    assert pres == set(PRE_AGGREGATORS.built_in())
    backends = {(data["method"]["name"], data.get("backend")) for data in configs if "method" in data}
    assert all((name, b) in backends for name in KINDS["method"].registry.built_in() for b in ("sequential", "batched"))


def test_the_krum_change_without_a_version_bump_fails_the_sweep(vehicle_dir, golden, monkeypatch):
    # Prepare: Krum in reference mode at k = 0 returns the lowest index instead of the client drawn first (the
    # authors'-code change that kept every config hash)
    data = dict(sweep_configs(vehicle_dir))[KRUM_AT_80]
    config_hash = trial_identity(ExperimentConfig.from_dict(data)).config_hash
    original = krum_module.krum_order
    monkeypatch.setattr(krum_module, "krum_order",
                        lambda updates, f, reference_mode, draw: original(updates, f, False, draw))
    # Execute
    found = differences(golden[config_hash]["fingerprint"], fingerprint(data))
    # Assert: the identity is unchanged and the numbers are not
    assert trial_identity(ExperimentConfig.from_dict(data)).config_hash == config_hash
    assert found, "the sweep did not see Krum's behaviour change"


def test_a_version_bump_changes_the_identity_the_golden_file_keys(vehicle_dir, golden, monkeypatch):
    data = dict(sweep_configs(vehicle_dir))[KRUM_AT_80]
    before = trial_identity(ExperimentConfig.from_dict(data))
    monkeypatch.setitem(AGGREGATORS._versions, "krum", 2)
    after = trial_identity(ExperimentConfig.from_dict(data))
    assert before.config_hash in golden and after.config_hash not in golden
    assert after.config_key == before.config_key and after.versions["aggregator/krum"] == 2


def test_fingerprints_allow_float32_noise_but_not_a_changed_model():
    base = {"history": [{"round": 2, "acc_pooled": 0.5, "loss_mean": 1.0}], "state": {"w": [4.0, 1.0, -2.0]}}
    noisy = {"history": [{"round": 2, "acc_pooled": 0.51, "loss_mean": 1.0000004}],
             "state": {"w": [4.0000016, 1.0000003, -2.0]}}
    moved = {"history": base["history"], "state": {"w": [4.0, 1.3, -2.0]}}
    assert differences(base, noisy) == []
    assert differences(base, moved) == ["state w: [4.0, 1.0, -2.0] -> [4.0, 1.3, -2.0]"]
    assert identity_sweep.close(float(torch.tensor(1.0) / 3), 1 / 3)
