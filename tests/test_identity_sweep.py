"""The version rule: no component's numbers change while every version stays (``tests/identity_sweep.py``)."""

import json
import os
import subprocess
import sys
from pathlib import Path

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
    updated_golden,
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
# configs whose ties two CPUs' kernels once broke apart (issue 69): tailored Bulyan (on this AVX-512 CPU, acc_pooled
# 0.05 with its own kernels and 0.24 with AVX2's) and Neurotoxin (its model moved with the scalar kernels)
TIE_CONFIGS = ("attack tailored_bulyan", "attack neurotoxin")
# torch's vectorised kernels of another CPU (read when torch loads) and MKL's code path to match
OTHER_KERNELS = {"avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"},
                 "scalar": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"}}
FINGERPRINTS_OF = """import json, sys
import torch
torch.set_num_threads(1)
from identity_sweep import fingerprint, sweep_configs
configs = dict(sweep_configs(sys.argv[1]))
print(json.dumps({name: fingerprint(configs[name]) for name in sys.argv[2:]}))
"""


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
    bumped = AGGREGATORS.version("krum") + 1
    monkeypatch.setitem(AGGREGATORS._versions, "krum", bumped)
    after = trial_identity(ExperimentConfig.from_dict(data))
    assert before.config_hash in golden and after.config_hash not in golden
    assert after.config_key == before.config_key and after.versions["aggregator/krum"] == bumped


def test_fingerprints_allow_float32_noise_but_not_a_changed_model():
    base = {"history": [{"round": 2, "acc_pooled": 0.5, "loss_mean": 1.0}], "state": {"w": [4.0, 1.0, -2.0]}}
    noisy = {"history": [{"round": 2, "acc_pooled": 0.51, "loss_mean": 1.0000004}],
             "state": {"w": [4.0000016, 1.0000003, -2.0]}}
    moved = {"history": base["history"], "state": {"w": [4.0, 1.3, -2.0]}}
    assert differences(base, noisy) == []
    assert differences(base, moved) == ["state w: [4.0, 1.0, -2.0] -> [4.0, 1.3, -2.0]"]
    assert identity_sweep.close(float(torch.tensor(1.0) / 3), 1 / 3)


@pytest.mark.parametrize("kernels", sorted(OTHER_KERNELS))
def test_ties_give_the_golden_numbers_with_another_cpus_kernels(vehicle_dir, golden, kernels):
    # Execute: the tie configs in a process with another CPU's kernels
    env = {**os.environ, **OTHER_KERNELS[kernels], "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", FINGERPRINTS_OF, vehicle_dir, *TIE_CONFIGS], env=env, check=True,
                         capture_output=True, text=True).stdout
    got = json.loads(out)
    configs = dict(sweep_configs(vehicle_dir))
    # Assert: the golden fingerprint itself, which holds no other CPU's alternate
    for name in TIE_CONFIGS:
        entry = golden[trial_identity(ExperimentConfig.from_dict(configs[name])).config_hash]
        assert "also" not in entry and differences(entry["fingerprint"], got[name]) == [], name


def test_an_update_keeps_the_entries_that_hold_with_their_alternates():
    def fp(w):
        return {"history": [{"round": 2, "acc_pooled": 0.5}], "state": {"w": [w]}}
    golden = {"held": {"name": "a", "fingerprint": fp(1.0), "also": [fp(2.0)]},
              "moved": {"name": "b", "fingerprint": fp(1.0)}, "bumped": {"name": "c", "fingerprint": fp(1.0)}}
    computed = {"held": {"name": "a", "fingerprint": fp(2.0)}, "moved": {"name": "b", "fingerprint": fp(3.0)},
                "new": {"name": "c", "fingerprint": fp(1.0)}}
    # Assert: the entry another CPU's alternate holds stays as it was; a moved one is replaced; the old identity of
    # a bumped version is gone
    assert updated_golden(golden, computed) == {"held": golden["held"], "moved": computed["moved"],
                                                "new": computed["new"]}
