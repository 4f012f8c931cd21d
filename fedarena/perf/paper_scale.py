"""``make perf-paper``: what one paper-scale Fashion-MNIST trial costs, phase by phase.

Writes random Fashion-MNIST-shaped IDX files (70,000 28x28 images, torchvision's layout) into a temporary
data directory, builds trials through the real ``fmnist`` loader and engine at the paper's setting (500
devices, 10 per round, 2 local steps of batch 16, the 3.27M-parameter CNN) and prints, per method and
backend: ms per round, one evaluation of every device, one checkpoint (size, save and load time), peak
memory in training and in evaluation and their ratio, and the projected time of the Fashion-MNIST Table 1
grid (134 trials of 5,000 rounds, evaluated every 10, ten checkpoints each) run one at a time.
Peak memory: on CUDA the allocator's peak in the timed phases; on a CPU, which keeps no such statistics,
the peak of live tensor bytes (``tensor_memory.TensorMemory``, resident tensors included) in one more
round and one more evaluation with personal models forced onto the vmap path (the GPU's).
Figures are measurements of one run, printed and never asserted; on a CPU use a few rounds.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import os
import struct
import tempfile
import time
from pathlib import Path

import numpy as np

from fedarena.bench.budget import DEFAULT_FRACTION
from fedarena.config import ExperimentConfig
from fedarena.perf import concurrent as perf_concurrent
from fedarena.simulation.checkpoint import load_state, save_state
from fedarena.simulation.costs import CostMeter
from fedarena.simulation.engine import evaluate_state, initial_state, run_round
from fedarena.simulation.evaluate import evaluate
from fedarena.simulation.identity import trial_identity
from fedarena.simulation.setup import build_trial, resolve_device
from fedarena.simulation.tensor_memory import TensorMemory

METHODS = {"global": {"name": "global"}, "ditto_lam": {"name": "ditto", "lam": 1.0},
           "ditto_dynamic": {"name": "ditto", "dynamic_lam": True}}
# Table 1's Fashion-MNIST trials at paper scale by cost class: Ditto (dynamic lambda) rows, and the rest,
# which cost about one global round each (robustness suite: 15 rows x 10 columns, less the excluded cells).
GRID = {"ditto_dynamic": 10, "global": 124}
PAPER = {"rounds": 5000, "eval_every": 10, "checkpoints": 10}
MEMORY_NOTE = {"cpu": "train GB / eval GB (CPU): peak live tensor bytes (TensorMemory, resident tensors included) "
                      "of one extra round and one extra evaluation, personal models on the vmap evaluation path",
               "cuda": "train GB / eval GB (CUDA): torch.cuda.max_memory_allocated in the timed rounds and evaluation"}


def write_fmnist_shaped(root: Path, seed: int = 0) -> None:
    """60,000 + 10,000 random images and labels as torchvision's unpacked IDX files."""
    raw = root / "FashionMNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    gen = np.random.default_rng(seed)
    for split, n in (("train", 60000), ("t10k", 10000)):
        images = gen.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        labels = gen.integers(0, 10, n, dtype=np.uint8)
        for kind, arr in (("images-idx3", images), ("labels-idx1", labels)):
            header = bytes([0, 0, 0x08, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape)
            (raw / f"{split}-{kind}-ubyte.gz").write_bytes(gzip.compress(header + arr.tobytes(), compresslevel=1))


def paper_config(method: dict, backend: str, data_dir: Path, device: str) -> ExperimentConfig:
    return ExperimentConfig.from_dict({
        "dataset": {"name": "fmnist", "data_dir": str(data_dir)}, "method": method, "backend": backend,
        "rounds": PAPER["rounds"], "eval_every": PAPER["eval_every"], "clients_per_round": 10,
        "local_steps": 2, "batch_size": 16, "lr": 0.05, "device": device})


def measure(cfg: ExperimentConfig, rounds: int) -> dict:
    """ms per round, seconds per evaluation and per checkpoint, checkpoint GB, peak GB per phase."""
    trial = build_trial(cfg)
    state = run_round(trial, initial_state(trial))  # warm-up
    meter = CostMeter(trial.device)  # each phase: synchronised clock, and the allocator's peak on CUDA
    with meter.phase("rounds"):
        for _ in range(rounds):
            state = run_round(trial, state)
    with meter.phase("eval"):
        evaluate_state(trial, state)
    row = {"ms_round": 1000 * meter.seconds["rounds"] / rounds, "eval_s": meter.seconds["eval"],
           "train_peak_gb": _gb(meter.peak_bytes.get("rounds")), "eval_peak_gb": _gb(meter.peak_bytes.get("eval")),
           "device": trial.device.type}
    if trial.device.type == "cpu":
        row.update(cpu_peaks(trial, state))
    return {**row, **checkpoint_cost(trial, state, trial_identity(cfg).config_hash)}


def _gb(nbytes: int | None) -> float | None:
    return nbytes / 1e9 if nbytes is not None else None


def cpu_peaks(trial, state) -> dict:
    """Peak live tensor GB (resident tensors included) of one more round, and of one evaluation (test and
    validation) with personal models on the vmap path, which a GPU takes and a CPU does not by default."""
    gc.collect()  # tensors already dead must not count as resident
    with TensorMemory(resident=True) as meter:
        run_round(trial, state)
    train = meter.peak
    params = trial.method.eval_params(state.w, state.clients)
    gc.collect()
    with TensorMemory(resident=True) as meter:
        for pooled in (trial.test, trial.val):
            evaluate(trial.model, params, pooled, trial.dataset.num_classes, per_client_loop=False)
    return {"train_peak_gb": train / 1e9, "eval_peak_gb": meter.peak / 1e9}


def checkpoint_cost(trial, state, config_hash: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        save_state(Path(tmp), state, config_hash)
        saved = time.perf_counter() - start
        size = sum(f.stat().st_size for f in Path(tmp).iterdir()) / 1e9
        start = time.perf_counter()
        load_state(Path(tmp), trial, config_hash)
        return {"ckpt_gb": size, "ckpt_save_s": saved, "ckpt_load_s": time.perf_counter() - start}


def checkpoints_per_trial(row: dict) -> int:
    """How many of the trial's (about ten) checkpoints the time budget lets through (``bench.budget``: one
    only after ``save time / fraction`` of training since the last)."""
    train_s = PAPER["rounds"] * row["ms_round"] / 1000
    return min(PAPER["checkpoints"], int(train_s / (row["ckpt_save_s"] / DEFAULT_FRACTION)))


def trial_seconds(row: dict) -> float:
    evals = PAPER["rounds"] // PAPER["eval_every"]
    return (PAPER["rounds"] * row["ms_round"] / 1000 + evals * row["eval_s"]
            + checkpoints_per_trial(row) * row["ckpt_save_s"])


def report(rows: dict[tuple[str, str], dict], backend: str) -> list[str]:
    lines = [f"{'method':<14} {'backend':<10} {'ms/round':>9} {'eval s':>7} {'ckpt GB':>8} {'save s':>7} "
             f"{'load s':>7} {'train GB':>9} {'eval GB':>8} {'eval/train':>10} {'ckpts':>5} {'trial s':>8}"]
    for (name, back), row in rows.items():
        train, ev = row["train_peak_gb"], row["eval_peak_gb"]
        gb = [f"{v:.2f}" if v is not None else "n/a" for v in (train, ev)]
        ratio = f"{ev / train:.2f}" if train and ev is not None else "n/a"
        lines.append(f"{name:<14} {back:<10} {row['ms_round']:9.1f} {row['eval_s']:7.2f} {row['ckpt_gb']:8.3f} "
                     f"{row['ckpt_save_s']:7.2f} {row['ckpt_load_s']:7.2f} {gb[0]:>9} {gb[1]:>8} {ratio:>10} "
                     f"{checkpoints_per_trial(row):5d} {trial_seconds(row):8.0f}")
    grid = sum(count * trial_seconds(rows[(name, backend)]) for name, count in GRID.items())
    lines.append(f"projected Fashion-MNIST Table 1 grid ({sum(GRID.values())} trials, one at a time, {backend}): "
                 f"{grid / 60:.0f} min (checkpoints {sum(c * checkpoints_per_trial(rows[(n, backend)]) * rows[(n, backend)]['ckpt_save_s'] for n, c in GRID.items()) / 60:.1f} min: ckpts per trial as the {DEFAULT_FRACTION:.0%} time budget allows, at most {PAPER['checkpoints']})")
    lines += [MEMORY_NOTE[kind] for kind in sorted({row["device"] for row in rows.values()}) if kind in MEMORY_NOTE]
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per method (a few on a CPU)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--backends", default="batched,sequential")
    parser.add_argument("--together", default="auto", help="comma-separated counts k of trials started together "
                        "(own processes; set-up and rounds timed); auto: 4 on a GPU, min(4, cores) on a CPU; 0: skip")
    parser.add_argument("--together-method", default="global", choices=sorted(METHODS))
    args = parser.parse_args(argv)
    together = _together_counts(args.together, args.device)
    backends = args.backends.split(",")
    with tempfile.TemporaryDirectory() as data_dir:
        write_fmnist_shaped(Path(data_dir))
        rows = {(name, backend): measure(paper_config(method, backend, Path(data_dir), args.device), args.rounds)
                for name, method in METHODS.items() for backend in backends}
        print("\n".join(report(rows, backends[0])), flush=True)
        if together:
            cfg = paper_config(METHODS[args.together_method], backends[0], Path(data_dir), args.device)
            print("\n".join(perf_concurrent.report(cfg, together, args.rounds)))


def _together_counts(text: str, device: str) -> list[int]:
    if text == "auto":
        return [4] if resolve_device(device).type == "cuda" else [min(4, os.cpu_count() or 1)]
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise SystemExit(f"--together: comma-separated whole numbers or 'auto', got {text!r}") from None
    if any(k < 0 for k in counts):
        raise SystemExit(f"--together: counts must be >= 0, got {text!r}")
    return [k for k in counts if k > 0]


if __name__ == "__main__":
    main()
