"""The fairness view: how test accuracy is spread over the benign devices, per method, as box plots.

Each run's per-client table (the ``clients.csv`` artifact: client, malicious, accuracy, ...) is read from
the store (``tracking.reading.read_client_tables``); the benign devices of every seed of a cell are pooled
into one distribution. One figure per dataset, one panel per setting (clean, A1 50%, ...), one box per row
of the tables (in their order, at most MAX_ROWS, as in Figure 3). A narrow box high up is accurate and
fair; a long lower whisker is a group of devices the model serves badly.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from fedarena.leaderboards.figures import MIN_WIDTH, file_stem, palette, run_on, shown_methods  # noqa: E402
from fedarena.leaderboards.tables import setting_label, sort_key  # noqa: E402


def device_accuracy_data(runs: pd.DataFrame, clients: pd.DataFrame, dataset: str) -> pd.DataFrame:
    """Benign devices' accuracies (all seeds pooled) of the main methods on one dataset:
    method_label, attack_label, level, accuracy."""
    runs = runs[runs["dataset_label"] == dataset]
    runs = runs[runs["method_label"].isin(shown_methods(runs["method_label"]))]
    merged = clients.merge(runs[["run_id", "method_label", "attack_label", "level"]], on="run_id", how="inner")
    benign = ~merged["malicious"].astype(str).str.lower().isin(("true", "1"))
    return merged.loc[benign, ["method_label", "attack_label", "level", "accuracy"]].reset_index(drop=True)


def plot_device_accuracy(data: pd.DataFrame, title: str, path: Path, colors: dict | None = None) -> Path:
    colors = colors or palette(data["method_label"])
    settings = sorted({(a, lv) for a, lv in zip(data["attack_label"], data["level"], strict=True)},
                      key=lambda s: (sort_key("attack_label", s[0]), s[1]))
    methods = sorted(data["method_label"].unique(), key=lambda m: sort_key("method_label", m))
    ncols = min(3, len(settings))
    nrows = -(-len(settings) // ncols)
    size = (max(MIN_WIDTH, max(4.0, 0.7 * len(methods) + 1.5) * ncols), 3.4 * nrows + 0.4)
    fig, axes = plt.subplots(nrows, ncols, figsize=size, squeeze=False, sharey=True, layout="constrained")
    for ax, (attack, level) in zip(axes.flat, settings, strict=False):
        part = data[(data["attack_label"] == attack) & (data["level"] == level)]
        shown = [m for m in methods if (part["method_label"] == m).any()]
        boxes = ax.boxplot([part.loc[part["method_label"] == m, "accuracy"] for m in shown], patch_artist=True)
        for box, method in zip(boxes["boxes"], shown, strict=True):
            box.set_facecolor(colors[method])
        ax.set_xticks(range(1, len(shown) + 1), shown, rotation=45, ha="right")
        ax.set_title(setting_label(attack, level))
    for ax in list(axes.flat)[len(settings):]:
        ax.set_visible(False)
    for row in axes:
        row[0].set_ylabel("test accuracy per benign device")
    fig.suptitle(title)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_device_figures(cells: pd.DataFrame, runs: pd.DataFrame, clients: pd.DataFrame, out: Path) -> list[Path]:
    """devices_<dataset>.png for every dataset with per-client tables."""
    colors = palette(cells["method_label"])
    paths = []
    for dataset in sorted(cells["dataset_label"].unique(), key=lambda d: sort_key("dataset_label", d)):
        data = device_accuracy_data(runs, clients, dataset)
        if not data.empty:
            title = f"Accuracy across benign devices on {run_on(cells, dataset)}"
            paths.append(plot_device_accuracy(data, title, out / f"devices_{file_stem(dataset)}.png", colors))
    return paths
