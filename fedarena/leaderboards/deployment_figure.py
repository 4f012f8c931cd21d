"""The deployment figure: each row's worst-case benign accuracy against the failure rate and against the share of
stragglers, one line per method, one row of panels per attack level (``deployment_<dataset>.png``).

A point is a deployment of the suite's axis that varies one thing from the synchronous lab (``deployment_table``'s
facts): the left panel the deployments that only set a failure rate (the lab at 0), the right one those that only
set stragglers, their partial work dropped (solid) or included (dashed), both lines starting from the lab at 0.
The y value is the row's worst case over the attacks at the level (``worst``), as the deployment table shows it;
asynchronous deployments and declared f's are in the table only.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from fedarena.leaderboards.deployment_table import under_attack  # noqa: E402
from fedarena.leaderboards.figures import MIN_WIDTH, file_stem, ordered_values, palette, run_on  # noqa: E402
from fedarena.leaderboards.tables import WORST, setting_label, sort_key  # noqa: E402

PANELS = (("failure_rate", "failure rate (drawn devices that do not report)"),
          ("stragglers", "share of stragglers (partial local work)"))
LINES = {"drop": "-", "include": "--"}  # a straggler policy's line style


def write_deployment_figures(cells: pd.DataFrame, facts: pd.DataFrame, out_dir: Path) -> list[Path]:
    """deployment_<dataset>.png for every dataset whose cells vary the failure rate or the stragglers."""
    colors = palette(cells["method_label"])
    paths = []
    for dataset in ordered_values(cells, "dataset_label"):
        data = deployment_data(cells, facts, dataset)
        if not data.empty:
            title = f"Deployment under attack on {run_on(cells, dataset)} (worst case over the attacks)"
            paths.append(plot_deployment(data, title, out_dir / f"deployment_{file_stem(dataset)}.png", colors))
    return paths


def deployment_data(cells: pd.DataFrame, facts: pd.DataFrame, dataset: str) -> pd.DataFrame:
    """One dataset's worst-case cells (privacy: none) of the deployments the figure places, with their x
    (``failure_rate``, ``stragglers``) and straggler policy; empty where no deployment varies either."""
    if "deployment_label" not in cells or facts.empty:
        return cells.iloc[0:0]
    part = cells[(cells["dataset_label"] == dataset) & (cells["privacy_label"] == "none")]
    worst = under_attack(part)[0]
    worst = worst[np.isfinite(worst["acc_pooled"].astype(float))] if len(worst) else worst
    placed = facts[(facts["system_name"] == "synchronous") & (facts["f_declared"] == "")
                   & ((facts["failure_rate"] == 0) | (facts["stragglers"] == 0))]
    data = worst.merge(placed, on="deployment_label", how="inner")
    varied = (data["failure_rate"] > 0) | (data["stragglers"] > 0)
    return data if varied.any() else cells.iloc[0:0]


def plot_deployment(data: pd.DataFrame, title: str, path: Path, colors: dict | None = None) -> Path:
    colors = colors or palette(data["method_label"])
    levels = ordered_values(data, "level")
    fig, axes = plt.subplots(len(levels), 2, figsize=(max(MIN_WIDTH, 9.0), 3.6 * len(levels)), squeeze=False,
                             sharey=True, layout="constrained")
    for row, level in zip(axes, levels, strict=True):
        at = data[data["level"] == level]
        for ax, (x, words) in zip(row, PANELS, strict=True):
            other = "stragglers" if x == "failure_rate" else "failure_rate"
            for method, rows in sorted(at[at[other] == 0].groupby("method_label"),
                                       key=lambda mr: sort_key("method_label", mr[0])):
                _draw(ax, rows, x, method, colors[method])
            if not ax.lines:  # the suite varies the other only
                ax.text(0.5, 0.5, "no deployment of the suite varies it", transform=ax.transAxes, ha="center")
            ax.set_xlabel(words)
            ax.set_title(f"{setting_label(WORST, level)} against the {words.split(' (')[0]}")
        row[0].set_ylabel("worst-case benign test accuracy")
    handles = {lab: h for ax in axes.flat for h, lab in zip(*ax.get_legend_handles_labels(), strict=True)}
    ordered = sorted(handles, key=lambda m: sort_key("method_label", m))
    fig.legend([handles[m] for m in ordered], ordered, loc="outside lower center", ncols=min(5, len(ordered)))
    fig.suptitle(f"{title}\nstragglers: their work dropped (solid) or included (dashed)")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _draw(ax, rows: pd.DataFrame, x: str, method: str, color) -> None:
    """A method's worst case against ``x``; against the stragglers one line per policy, each from the lab at 0."""
    if x == "failure_rate":
        line = rows.sort_values(x)
        ax.plot(line[x], line["acc_pooled"], marker="o", color=color, label=method)
        return
    lab = rows[rows["stragglers"] == 0]
    for policy, style in LINES.items():
        line = pd.concat([lab, rows[(rows["stragglers"] > 0) & (rows["straggler_policy"] == policy)]]).sort_values(x)
        if len(line) > len(lab):
            ax.plot(line[x], line["acc_pooled"], marker="o", linestyle=style, color=color,
                    label=method if policy == "drop" else None)
