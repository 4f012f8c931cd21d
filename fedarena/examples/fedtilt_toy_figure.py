"""FedTilt's toy experiments (FedTilt Section IV-A, Table IV, Figure 3): federated logistic regression on
two clients' Gaussian data, q = 0 and squared Euclidean dist, personal models with mu = 0.01.

    python -m fedarena.examples.fedtilt_toy_figure --out DIR

Experiment 1 (client fairness): tau = lambda = 1. Experiment 2 (client and class fairness, imbalanced
classes): tau = 100 (lambda = 1). Experiment 3 (outliers in the wide class): lambda = -100 (tau = 1), and
lambda = +100 for contrast. Each experiment also runs FedTilt with all tilts 0 (Ditto, Proposition 3).
Writes ``fedtilt_toy.png`` (decision boundaries of every client's personal model over its training data)
and ``fedtilt_toy.json`` / ``fedtilt_toy.md`` (test accuracy per client and per class).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import fedarena.datasets.fedtilt_toy  # noqa: E402, F401  (registers the dataset)
from fedarena.config import ExperimentConfig  # noqa: E402
from fedarena.simulation.engine import simulate  # noqa: E402
from fedarena.simulation.setup import build_trial  # noqa: E402

# experiment -> [(label, FedTilt tilts)]
VARIANTS = {
    1: [("tilts 0 (Ditto)", {"tau": 0.0, "lam": 0.0}), ("tau=1, lambda=1", {"tau": 1.0, "lam": 1.0})],
    2: [("tilts 0 (Ditto)", {"tau": 0.0, "lam": 0.0}), ("tau=100, lambda=1", {"tau": 100.0, "lam": 1.0})],
    3: [("tilts 0 (Ditto)", {"tau": 0.0, "lam": 0.0}), ("tau=1, lambda=-100", {"tau": 1.0, "lam": -100.0}),
        ("tau=1, lambda=100", {"tau": 1.0, "lam": 100.0})],
}
COLORS = ("tab:gray", "tab:green", "tab:red")


def toy_config(experiment: int, tilts: dict, rounds: int, seed: int, lr: float) -> ExperimentConfig:
    return ExperimentConfig.from_dict({
        "dataset": {"name": "fedtilt_toy", "experiment": experiment}, "model": {"name": "logreg"},
        "method": {"name": "fedtilt", "q": 0.0, "mu": 0.01, **tilts}, "rounds": rounds, "clients_per_round": 2,
        "local_epochs": 1, "local_steps": 0, "batch_size": 10, "lr": lr, "seed": seed, "data_seed": seed,
        "eval_every": rounds, "backend": "batched"})


def run_variant(cfg: ExperimentConfig) -> tuple:
    """(trial, personal models [2, d], per-client summary) of one FedTilt run."""
    trial = build_trial(cfg)
    state, counts = simulate(trial)
    per_class = counts.correct / np.maximum(counts.total, 1)
    summary = {"client_acc": counts.client_accuracy().round(4).tolist(), "class_acc": per_class.round(4).tolist(),
               "acc_std": float(counts.client_accuracy().std())}
    return trial, state.clients["personal"], summary


def boundary(ax, trial, params: torch.Tensor, color: str, label: str, box: tuple) -> None:
    """The model's decision boundary (class-probability 1/2 contour) over the plot box."""
    xs, ys = np.meshgrid(np.linspace(box[0], box[1], 200), np.linspace(box[2], box[3], 200))
    grid = torch.tensor(np.stack([xs.ravel(), ys.ravel()], 1), dtype=torch.float32)
    with torch.no_grad():
        out = trial.model.forward(params, grid)
    margin = (out[:, 1] - out[:, 0]).reshape(xs.shape).numpy()
    ax.contour(xs, ys, margin, levels=[0.0], colors=[color])
    ax.plot([], [], color=color, label=label)


def plot_client(ax, trial, client: int, runs: list, title: str) -> None:
    train = trial.dataset.clients[client].train
    x, y = train.x.numpy(), train.y.numpy()
    box = (x[:, 0].min() - 0.5, x[:, 0].max() + 0.5, x[:, 1].min() - 0.5, x[:, 1].max() + 0.5)
    for label, marker in ((0, "o"), (1, "^")):
        ax.scatter(*x[y == label].T, s=8, marker=marker, alpha=0.5, label=f"class {label}")
    for (name, personal), color in zip(runs, COLORS, strict=False):
        boundary(ax, trial, personal[client], color, name, box)
    ax.set_title(title, fontsize=9)
    ax.set_xlim(box[:2])
    ax.set_ylim(box[2:])


def reproduce(out: Path, rounds: int = 100, seed: int = 0, lr: float = 0.1) -> dict:
    """Runs the three experiments, writes the figure and the tables into ``out``; returns the results."""
    out.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(2, 3, figsize=(13, 8))
    results = {}
    for col, (experiment, variants) in enumerate(VARIANTS.items()):
        runs = []
        for name, tilts in variants:
            trial, personal, summary = run_variant(toy_config(experiment, tilts, rounds, seed, lr))
            runs.append((name, personal))
            results[f"experiment {experiment}: {name}"] = summary
        for client in range(2):
            plot_client(axes[client, col], trial, client, runs, f"experiment {experiment}, client {client + 1}")
        axes[0, col].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "fedtilt_toy.png", dpi=120)
    plt.close(fig)
    (out / "fedtilt_toy.json").write_text(json.dumps(results, indent=2))
    (out / "fedtilt_toy.md").write_text(markdown_table(results))
    return results


def markdown_table(results: dict) -> str:
    lines = ["| run | client 1 acc | client 2 acc | client 1 per class | client 2 per class | acc std |",
             "|---|---|---|---|---|---|"]
    for name, s in results.items():
        acc, cls = s["client_acc"], s["class_acc"]
        lines.append(f"| {name} | {acc[0]:.3f} | {acc[1]:.3f} | {cls[0]} | {cls[1]} | {s['acc_std']:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args(argv)
    results = reproduce(args.out, args.rounds, args.seed, args.lr)
    print(markdown_table(results))
    print(f"wrote {args.out / 'fedtilt_toy.png'}")


if __name__ == "__main__":
    main()
