"""The sweep that holds the version rule: a change of a component's numbers bumps its version.

A fixed list of small configs covers every registered method (on both backends), aggregator, pre-aggregator,
attack, offline dataset, partitioner and model; each runs a few rounds and leaves a fingerprint (the
evaluated metrics of every evaluation round and random projections of the final global model and per-client
tables). ``tests/golden/identity_sweep.json`` keeps each config's fingerprint under its identity
(``config_hash``, which holds every component's version). ``test_identity_sweep.py`` recomputes them: a
fingerprint that changed while the identity stayed is a behaviour change without a version bump.

After a deliberate change (with the version bumped), write the new fingerprints (entries that still hold are kept
as they are, ``updated_golden``):

    .venv/bin/python tests/identity_sweep.py --update

Floats: the comparison allows float32 noise of another CPU or reduction order (``close``), far below what a
change of behaviour does (a rule picking another update, an attack another scale).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch

from fedarena.config import ExperimentConfig
from fedarena.datasets.partition import PARTITIONERS
from fedarena.errors import ConfigError
from fedarena.methods.aggregators.base import AGGREGATORS, PRE_AGGREGATORS
from fedarena.sections import KINDS
from fedarena.simulation.engine import simulate
from fedarena.simulation.identity import trial_identity
from fedarena.simulation.setup import build_trial

GOLDEN = Path(__file__).parent / "golden" / "identity_sweep.json"
FILE_DATASETS = ("celeba", "cifar10", "femnist", "femnist_skewed", "fmnist", "fmnist_fedtilt", "mnist",
                 "stackoverflow")  # loaders of real files: their own tests read tiny files in the real formats
SYNTHETIC = {"name": "synthetic", "num_clients": 10, "max_samples": 60, "dim": 20}
DIGITS = {"name": "digits", "num_clients": 10}
BASE = {"dataset": SYNTHETIC, "rounds": 4, "eval_every": 2, "clients_per_round": 5, "local_steps": 2, "lr": 0.05}
# pooled accuracies only: a per-device one (worst 10%) over a few test samples jumps with one flipped prediction
ACCURACIES = ("acc_pooled", "val_acc_pooled", "acc_malicious", "asr_pooled")
CONTINUOUS = ("loss_mean", "acc_std", "class_std_mean")
PROJECTIONS = 4


def config(name: str, **patch) -> tuple[str, dict]:
    return name, {**BASE, **patch}


def method_configs(vehicle_dir: str) -> list[tuple[str, dict]]:
    out = []
    for name in KINDS["method"].registry.built_in():
        for backend in ("sequential", "batched"):
            if name == "mocha":
                out.append(config(f"method {name} {backend}", method={"name": name}, backend=backend,
                                  dataset={"name": "vehicle", "data_dir": vehicle_dir, "num_clients": 4}, model={"name": "svm"},
                                  clients_per_round=2, rounds=2, eval_every=1))
            else:
                out.append(config(f"method {name} {backend}", method={"name": name}, backend=backend))
    for name in ("global", "ditto"):  # the batched backend's dense MLP path
        for backend in ("sequential", "batched"):
            out.append(config(f"method {name} mlp {backend}", method={"name": name}, backend=backend,
                              dataset=DIGITS, model={"name": "mlp", "hidden": [16]}))
    return out


def aggregator_configs() -> list[tuple[str, dict]]:
    out = []
    for name in AGGREGATORS.built_in():
        options = [{"attack": {"name": "a1", "level": level}, "clients_per_round": n}
                   for level, n in ((0.2, 5), (0.2, 10), (0.1, 10))]
        out.append((f"aggregator {name}", first_buildable([{**BASE, "aggregator": {"name": name}, **o}
                                                           for o in options])))
    for pre in PRE_AGGREGATORS.built_in():
        out.append(config(f"pre-aggregator {pre}", aggregator={"name": "median", "pre": [pre]},
                          attack={"name": "a2", "level": 0.2}))
    out.append(config("buckets of 3 before median", aggregator={"name": "median", "pre": [{"name": "bucketing", "s": 3}]},
                      attack={"name": "mimic", "level": 0.2}, clients_per_round=10))
    out.append(config("krum at 80% in reference mode", aggregator={"name": "krum", "reference_mode": True},
                      attack={"name": "a1", "level": 0.8}, clients_per_round=10))
    out.append(config("multi_krum at 80% in reference mode",
                      aggregator={"name": "multi_krum", "reference_mode": True},
                      attack={"name": "a1", "level": 0.8}, clients_per_round=10))
    return out


def attack_configs() -> list[tuple[str, dict]]:
    out = []
    for name in KINDS["attack"].registry.built_in():
        if name == "none":
            continue
        candidates = [{**BASE, "attack": {"name": name, "level": 0.2}, "aggregator": {"name": "median"}},
                      {**BASE, "attack": {"name": name, "level": 0.2}, "aggregator": {"name": "median"},
                       "dataset": DIGITS, "model": {"name": "mlp", "hidden": [16]}},
                      {**BASE, "attack": {"name": name, "level": 0.0}}]
        out.append((f"attack {name}", first_buildable(candidates)))
    return out


def data_configs(vehicle_dir: str) -> list[tuple[str, dict]]:
    out = [config("dataset digits", dataset=DIGITS, model={"name": "mlp", "hidden": [16]}),
           config("dataset mnist_5k cnn_fmnist", dataset={"name": "mnist_5k", "num_clients": 10}, rounds=2,
                  eval_every=2, local_steps=1),
           config("dataset point_estimation"), config("dataset fedtilt_toy", dataset={"name": "fedtilt_toy"},
                                                      clients_per_round=2),
           config("dataset vehicle svm", dataset={"name": "vehicle", "data_dir": vehicle_dir, "num_clients": 4},
                  clients_per_round=2)]
    for model in ("cnn_femnist", "cnn_celeba", "cnn_cifar"):
        out.append(config(f"model {model}", dataset={"name": "mnist_5k", "num_clients": 10}, model={"name": model},
                          rounds=2, eval_every=2, local_steps=1))
    for partition in PARTITIONERS.built_in():
        out.append((f"partitioner {partition}", first_buildable(
            [{**BASE, "dataset": {**DIGITS, "partition": partition}, "model": {"name": "mlp", "hidden": [16]}},
             {**BASE, "dataset": {**DIGITS, "partition": partition, "num_clients": 5},
              "model": {"name": "mlp", "hidden": [16]}}])))
    return out


def first_buildable(candidates: list[dict]) -> dict:
    """The first config a trial can be built from (a rule defined at its corruption, an attack for its data)."""
    errors = []
    for data in candidates:
        try:
            build_trial(ExperimentConfig.from_dict(data))
            return data
        except ConfigError as err:
            errors.append(str(err))
    raise AssertionError(f"no buildable config among {candidates}: {errors}")


def sweep_configs(vehicle_dir: str) -> list[tuple[str, dict]]:
    return method_configs(vehicle_dir) + aggregator_configs() + attack_configs() + data_configs(vehicle_dir)


def fingerprint(data: dict) -> dict:
    """The trial's evaluations and final state, as numbers to compare within float tolerance."""
    trial = build_trial(ExperimentConfig.from_dict(data))
    state, _ = simulate(trial)
    history = [{k: round(float(v), 7) for k, v in entry.items()
                if k in ("round", *ACCURACIES, *CONTINUOUS) and isinstance(v, (int, float)) and math.isfinite(v)}
               for entry in state.history]
    tables = {"w": state.w.detach().double().reshape(1, -1)}
    tables.update({k: v.detach().double().reshape(v.shape[0], -1) for k, v in state.clients.items()
                   if v.is_floating_point()})
    return {"history": history, "state": {k: projections(v) for k, v in sorted(tables.items())}}


def projections(table: torch.Tensor) -> list[float]:
    """The table's sum of squares and its sums along fixed random directions (seeded)."""
    flat = table.reshape(-1)
    directions = torch.randn(PROJECTIONS, flat.numel(), generator=torch.Generator().manual_seed(0),
                             dtype=torch.float64)
    values = [float((flat * flat).sum()), *(directions @ flat).tolist()]
    return [round(v, 7) if math.isfinite(v) else str(v) for v in values]


def close(a, b, *, what: str = "") -> bool:
    """Equal up to float32 noise: accuracies within two test samples' worth, other values to 1e-4 relative
    (the two backends, whose reductions differ, agree to 4e-7 on every config of the sweep)."""
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    if what in ACCURACIES:
        return abs(a - b) <= 0.02
    return abs(a - b) <= 1e-6 + 1e-4 * max(abs(a), abs(b))


def differences(expected: dict, got: dict) -> list[str]:
    """What differs between two fingerprints beyond float noise."""
    out = []
    if len(expected["history"]) != len(got["history"]):
        return [f"{len(got['history'])} evaluations instead of {len(expected['history'])}"]
    for old, new in zip(expected["history"], got["history"], strict=True):
        for key in sorted(set(old) | set(new)):
            if key not in old or key not in new or not close(old[key], new[key], what=key):
                out.append(f"round {old.get('round')} {key}: {old.get(key)} -> {new.get(key)}")
    for key in sorted(set(expected["state"]) | set(got["state"])):
        old, new = expected["state"].get(key), got["state"].get(key)
        if old is None or new is None or len(old) != len(new) or not all(map(close, old, new)):
            out.append(f"state {key}: {old} -> {new}")
    return out


def differences_from_golden(entry: dict, got: dict) -> list[str]:
    """``got``'s differences from the nearest of a golden entry's fingerprints: its own and, for a config whose tie
    or chaotic step two CPUs round apart, the other CPU's (``also``)."""
    return min((differences(f, got) for f in [entry["fingerprint"], *entry.get("also", [])]), key=len)


def updated_golden(golden: dict[str, dict], computed: dict[str, dict]) -> dict[str, dict]:
    """The golden file after a deliberate change: an entry whose fingerprint still holds is kept as it is (with the
    other CPU's ``also``: a rewrite from one CPU would drop it), a new or moved one is this CPU's, and an identity
    the sweep no longer computes (a bumped version's old one) is dropped."""
    return {h: golden[h] if h in golden and not differences_from_golden(golden[h], e["fingerprint"]) else e
            for h, e in computed.items()}


def compute(vehicle_dir: str) -> dict[str, dict]:
    """config_hash -> {name, config, fingerprint} of every config of the sweep."""
    out = {}
    for name, data in sweep_configs(vehicle_dir):
        identity = trial_identity(ExperimentConfig.from_dict(data))
        stored = {k: v for k, v in data.items()}
        if "data_dir" in stored["dataset"]:
            stored["dataset"] = {**stored["dataset"], "data_dir": "<tmp>"}
        out[identity.config_hash] = {"name": name, "config": stored, "fingerprint": fingerprint(data)}
    return out


def vehicle_folder(root: Path) -> str:
    sys.path.insert(0, str(Path(__file__).parent))
    from conftest import write_linear_vehicle

    write_linear_vehicle(root)
    return str(root)


def main() -> int:
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="write the fingerprints as the new golden file")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        computed = compute(vehicle_folder(Path(tmp)))
    golden = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    if args.update:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        updated = updated_golden(golden, computed)
        GOLDEN.write_text(json.dumps(updated, indent=1, sort_keys=True) + "\n")
        kept = sum(updated[h] is golden.get(h) for h in updated)
        print(f"wrote {len(updated)} fingerprints to {GOLDEN} ({kept} kept as they were)")
        return 0
    bad = [f"{e['name']}: {d}" for h, e in computed.items() if h in golden
           for d in differences_from_golden(golden[h], e["fingerprint"])]
    print("\n".join(bad) or f"{len(computed)} fingerprints as golden")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
