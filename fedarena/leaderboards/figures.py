"""Figures as PNG (matplotlib, Agg backend): Ditto Figure 3 and 5, and learning curves.

- Figure 3 (Ditto): robustness, i.e. benign test accuracy (``acc_pooled``), as bars per attack and
  corruption level, for every row of the table that ran under attack (Ditto's figure shows the global
  model, its robust baselines and Ditto; a suite's rows are what it compares, whatever their number).
- Figure 5 (Ditto): accuracy vs fairness of the defenses under data poisoning (A1): x = benign test
  accuracy, y = std of the accuracies across benign devices; lower right is better.
- Learning curves: ``acc_pooled`` per evaluation round (the metric history, step = round), mean over
  the seeds of a cell, one panel per (attack, level), one line per method.

The ``*_data`` functions are pure selections on the aggregated cells; the plotting functions only draw.
"""

from __future__ import annotations

import string
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from fedarena.leaderboards.cells import POSITION  # noqa: E402
from fedarena.leaderboards.tables import label, setting_label, sort_key  # noqa: E402

MAX_ROWS = 20  # the figure's distinct colours (tab20); further rows are left out, in table order
MIN_WIDTH = 6.5  # inches: room for a title naming a stand-in dataset above a single panel
FILE_NAME_CHARACTERS = set(string.ascii_letters + string.digits + "_.-")  # a label's others become _ in file names


def palette(methods) -> dict:
    """One distinct colour per method, in paper order, so a method looks the same in every figure."""
    ordered = sorted(set(methods), key=lambda m: sort_key("method_label", m))
    cmap = plt.get_cmap("tab10" if len(ordered) <= 10 else "tab20")
    return {m: cmap(i % cmap.N) for i, m in enumerate(ordered)}


def ordered_values(frame: pd.DataFrame, key: str) -> list:
    return sorted(frame[key].unique(), key=lambda v: sort_key(key, v))


def figure3_data(cells: pd.DataFrame, dataset: str) -> pd.DataFrame:
    """Finite accuracies under attack (not clean) on one dataset, of the first MAX_ROWS rows in table order."""
    keep = (cells["dataset_label"] == dataset) & (cells["attack_label"] != "clean") & np.isfinite(cells["acc_pooled"])
    return cells[keep & cells["method_label"].isin(shown_methods(cells.loc[keep, "method_label"]))]


def shown_methods(methods) -> list[str]:
    """The rows a figure shows: every method in table order, at most MAX_ROWS (Figure 3, the device plots)."""
    return sorted(set(methods), key=lambda m: sort_key("method_label", m))[:MAX_ROWS]


def figure5_data(cells: pd.DataFrame, dataset: str) -> pd.DataFrame:
    """Accuracy and std of the figure's methods under A1 (else the first attack present)."""
    data = figure3_data(cells, dataset)
    data = data[np.isfinite(data["acc_std"])]
    if data.empty:
        return data
    attack = "a1" if (data["attack_label"] == "a1").any() else ordered_values(data, "attack_label")[0]
    return data[data["attack_label"] == attack]


def plot_figure3(data: pd.DataFrame, title: str, path: Path, colors: dict | None = None) -> Path:
    colors = colors or palette(data["method_label"])
    attacks = ordered_values(data, "attack_label")
    methods = ordered_values(data, "method_label")
    fig, axes = plt.subplots(
        1, len(attacks), figsize=(max(MIN_WIDTH, 4.5 * len(attacks)), 4), squeeze=False, sharey=True, layout="constrained"
    )
    width = 0.8 / len(methods)
    for ax, attack in zip(axes[0], attacks, strict=True):
        part = data[data["attack_label"] == attack]
        levels = ordered_values(part, "level")
        for i, method in enumerate(methods):
            rows = part[part["method_label"] == method].set_index("level").reindex(levels)
            err = rows["acc_pooled_ci"].to_numpy() if "acc_pooled_ci" in rows else None
            xs = np.arange(len(levels)) + i * width
            ax.bar(xs, rows["acc_pooled"].to_numpy(), width, yerr=err, label=method, color=colors[method])
        ax.set_xticks(np.arange(len(levels)) + 0.4 - width / 2, [label("level", lv) for lv in levels])
        ax.set_title(label("attack_label", attack))
        ax.set_xlabel("fraction of adversaries")
    axes[0][0].set_ylabel("benign test accuracy")
    fig.legend(*axes[0][0].get_legend_handles_labels(), loc="outside lower center", ncols=min(len(methods), 8))
    return _save(fig, title, path)


def plot_figure5(data: pd.DataFrame, title: str, path: Path, colors: dict | None = None) -> Path:
    colors = colors or palette(data["method_label"])
    levels = ordered_values(data, "level")
    fig, axes = plt.subplots(
        1, len(levels), figsize=(max(MIN_WIDTH, 4.2 * len(levels)), 3.8), squeeze=False, layout="constrained"
    )
    for ax, level in zip(axes[0], levels, strict=True):
        part = data[data["level"] == level]
        ax.scatter(part["acc_pooled"], part["acc_std"], c=[colors[m] for m in part["method_label"]])
        for row in part.itertuples(index=False):
            ax.annotate(row.method_label, (row.acc_pooled, row.acc_std), fontsize="small")
        ax.set_title(setting_label(part["attack_label"].iloc[0], level))
        ax.set_xlabel("benign test accuracy")
        ax.set_ylabel("std across benign devices")
    return _save(fig, title, path)


def curves_data(runs: pd.DataFrame, history: pd.DataFrame, dataset: str) -> pd.DataFrame:
    """Mean over seeds of the metric history per (position, step) for one dataset's runs."""
    keys = [key for key in POSITION if key in runs]
    runs = runs[runs["dataset_label"] == dataset][["run_id", *keys]]
    merged = history.merge(runs, on="run_id", how="inner")
    return merged.groupby([*keys, "step"], as_index=False)["value"].mean()


def plot_curves(data: pd.DataFrame, title: str, path: Path, colors: dict | None = None) -> Path:
    colors = colors or palette(data["method_label"])
    settings = sorted(
        {(a, lv) for a, lv in zip(data["attack_label"], data["level"], strict=True)},
        key=lambda s: (sort_key("attack_label", s[0]), s[1]),
    )
    ncols = min(4, len(settings))
    nrows = -(-len(settings) // ncols)
    size = (4 * ncols, 3.2 * nrows + 0.6)
    fig, axes = plt.subplots(nrows, ncols, figsize=size, squeeze=False, sharey=True, layout="constrained")
    for ax, (attack, level) in zip(axes.flat, settings, strict=False):
        part = data[(data["attack_label"] == attack) & (data["level"] == level)]
        for method in ordered_values(part, "method_label"):
            line = part[part["method_label"] == method].sort_values("step")
            ax.plot(line["step"], line["value"], label=method, color=colors[method])
        ax.set_title(setting_label(attack, level))
        ax.set_xlabel("round")
    for ax in list(axes.flat)[len(settings) :]:
        ax.set_visible(False)
    axes[0][0].set_ylabel("benign test accuracy")
    handles = {lab: h for ax in axes.flat for h, lab in zip(*ax.get_legend_handles_labels(), strict=True)}
    ordered = sorted(handles, key=lambda m: sort_key("method_label", m))
    fig.legend([handles[m] for m in ordered], ordered, loc="outside lower center", ncols=min(8, len(ordered)))
    return _save(fig, title, path)


def _save(fig, title: str, path: Path) -> Path:
    fig.suptitle(title)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_figures(
    cells: pd.DataFrame, runs: pd.DataFrame, history: pd.DataFrame, out_dir: Path
) -> list[Path]:
    """Every figure that has data, per dataset: figure3_<ds>.png, figure5_<ds>.png, curves_<ds>.png, of the
    runs without differential privacy in the synchronous lab (a suite's privacy and deployment axes have their own
    figures, ``privacy_figure`` and ``deployment_figure``)."""
    colors = palette(cells["method_label"])
    cells, runs = in_the_lab(without_privacy(cells)), in_the_lab(without_privacy(runs))
    paths = []
    for dataset in ordered_values(cells, "dataset_label"):
        stem = file_stem(dataset)
        shown = run_on(cells, dataset)
        jobs = [
            (
                plot_figure3,
                figure3_data(cells, dataset),
                f"Robustness on {shown} (Ditto Figure 3)",
                "figure3",
            ),
            (
                plot_figure5,
                figure5_data(cells, dataset),
                f"Accuracy vs fairness on {shown} (Ditto Figure 5)",
                "figure5",
            ),
            (plot_curves, curves_data(runs, history, dataset), f"Learning curves on {shown}", "curves"),
        ]
        for plot, data, title, kind in jobs:
            if not data.empty:
                paths.append(plot(data, title, out_dir / f"{kind}_{stem}.png", colors))
    return paths


def without_privacy(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of the privacy axis's ``none`` entry (all rows of a suite without the axis)."""
    return frame[frame["privacy_label"] == "none"] if "privacy_label" in frame else frame


def in_the_lab(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of the deployment axis's ``synchronous`` entry (all rows of a suite without the axis)."""
    return frame[frame["deployment_label"] == "synchronous"] if "deployment_label" in frame else frame


def file_stem(dataset: str) -> str:
    """A dataset label as a file-name part."""
    return "".join(c if c in FILE_NAME_CHARACTERS else "_" for c in str(dataset))


def run_on(cells: pd.DataFrame, dataset: str) -> str:
    """The dataset label, with the dataset really run when the label names none ("my_mix (run on digits)")."""
    names = cells.loc[cells["dataset_label"] == dataset, "dataset_names"] if "dataset_names" in cells else []
    used = sorted({n for joined in names for n in str(joined).split(",") if n and n != dataset})
    return f"{dataset} (run on {', '.join(used)})" if used else str(dataset)
