"""The deployment figure: each row's worst-case benign accuracy against the failure rate and against the share of
stragglers, one line per method, one row of panels per attack level (``deployment_<dataset>.png``).

A point is a deployment of the suite's axis that varies one thing from the synchronous lab (``deployment_table``'s
facts): the left panel the deployments that only set a failure rate (the lab at 0), the right one those that only
set stragglers, their partial work dropped (solid) or included (dashed), both lines starting from the lab at 0.
The y value is the row's worst case over the attacks at the level (``worst``), as the deployment table shows it;
asynchronous deployments and declared f's are in the table only. A deployment's control, where attackers fail or
straggle alike (``attackers_fail``, ``attackers_straggle``: the _all labels), is its own line from the lab, with square
markers; a point whose rule aggregated fewer than half its rounds (``deployment_table.undertrained``) is crossed: its
accuracy is a nearly untrained model's, not a robustness number; a point whose rounds held fewer than
``deployment_table.FEW_HONEST`` honest reports on average is ringed with a hollow diamond: an attack that crafts
its update from the honest updates' spread had none to measure, so the point is the attack void, not beaten. Each
x tick carries the attackers' share of the reports the rules aggregated there (median over the rows), attackers
online / alike (and per straggler policy), as the table's ``att`` does.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from fedarena.leaderboards.deployment_table import FEW_HONEST, under_attack, undertrained, with_rounds  # noqa: E402
from fedarena.leaderboards.figures import MIN_WIDTH, file_stem, ordered_values, palette, run_on  # noqa: E402
from fedarena.leaderboards.tables import WORST, setting_label, sort_key  # noqa: E402

PANELS = (("failure_rate", "failure rate (drawn devices that do not report)"),
          ("stragglers", "share of stragglers (partial local work)"))
LINES = {"drop": "-", "include": "--"}  # a straggler policy's line style
CONTROL = {"failure_rate": "attackers_fail", "stragglers": "attackers_straggle"}  # each panel's control flag
MARKERS = {False: "o", True: "s"}  # attackers stay online; they fail or straggle alike (the control)
KEY = [Line2D([], [], color="black", marker="o", label="attackers stay online"),
       Line2D([], [], color="black", marker="s", alpha=0.6, label="attackers fail / straggle alike (_all)"),
       Line2D([], [], color="black", marker="x", linestyle="", markersize=10,
              label="undertrained (< T / 2 rounds aggregated)"),
       Line2D([], [], color="black", marker="D", linestyle="", markersize=11, markerfacecolor="none",
              label=f"attack void (< {FEW_HONEST} honest reports a round)")]


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


def _numbers(data: pd.DataFrame, column: str) -> pd.Series:
    """A column as numbers, NaN throughout where the runs recorded none (a store of synchronous runs only)."""
    if column not in data:
        return pd.Series(np.nan, index=data.index, dtype=float)
    return pd.to_numeric(data[column], errors="coerce")


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
    data = with_rounds(worst, facts).merge(placed.drop(columns="rounds"), on=["deployment_label", "dataset_label"],
                                           how="inner")
    honest = _numbers(data, "reports_mean") * (1 - _numbers(data, "attacker_share"))
    data = data.assign(undertrained=[undertrained(row) for row in data.itertuples(index=False)],
                       void=(honest < FEW_HONEST).to_numpy())
    varied = (data["failure_rate"] > 0) | (data["stragglers"] > 0)
    return data if varied.any() else cells.iloc[0:0]


def plot_deployment(data: pd.DataFrame, title: str, path: Path, colors: dict | None = None) -> Path:
    colors = colors or palette(data["method_label"])
    levels = ordered_values(data, "level")
    fig, axes = plt.subplots(len(levels), 2, figsize=(max(MIN_WIDTH, 9.0), 4.4 * len(levels)), squeeze=False,
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
            else:
                _share_ticks(ax, at[at[other] == 0], x)
            ax.set_xlabel(words)
            ax.set_title(f"{setting_label(WORST, level)} against the {words.split(' (')[0]}")
        row[0].set_ylabel("worst-case benign test accuracy")
    handles = {lab: h for ax in axes.flat for h, lab in zip(*ax.get_legend_handles_labels(), strict=True)}
    ordered = sorted(handles, key=lambda m: sort_key("method_label", m))
    fig.legend([handles[m] for m in ordered] + KEY, ordered + [h.get_label() for h in KEY], loc="outside lower center",
               ncols=min(4, len(ordered) + len(KEY)))
    fig.suptitle(f"{title}\nstragglers: their work dropped (solid) or included (dashed)\nunder each x, att: the "
                 f"attackers' share of the reports aggregated, attackers online / alike")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _draw(ax, rows: pd.DataFrame, x: str, method: str, color) -> None:
    """A method's worst case against ``x``, one line per straggler policy (against the stragglers) and per control
    (attackers online: circles; failing or straggling alike: squares), each from the lab at 0; undertrained points
    crossed."""
    lab = rows[rows[x] == 0]
    control = rows[CONTROL[x]].astype(bool)
    for policy, style in (LINES.items() if x == "stragglers" else [(None, "-")]):
        kept = rows["straggler_policy"] == policy if policy else True
        for alike, marker in MARKERS.items():
            line = pd.concat([lab, rows[(rows[x] > 0) & kept & (control == alike)]]).sort_values(x)
            if len(line) > len(lab):
                ax.plot(line[x], line["acc_pooled"], marker=marker, linestyle=style, color=color,
                        alpha=0.6 if alike else 1.0, label=method if policy != "include" and not alike else None)
    crossed = rows[rows["undertrained"].astype(bool)]
    if len(crossed):
        ax.plot(crossed[x], crossed["acc_pooled"], marker="x", linestyle="", color="black", markersize=10)
    void = rows[rows["void"].astype(bool) & ~rows["undertrained"].astype(bool)]
    if len(void):
        ax.plot(void[x], void["acc_pooled"], marker="D", linestyle="", color="black", markersize=11,
                markerfacecolor="none")


def _share_ticks(ax, rows: pd.DataFrame, x: str) -> None:
    """x ticks that carry, at each deployment, the attackers' share of the reports aggregated (median over the
    rows): attackers online / alike, per straggler policy against the stragglers; the lab's as drawn."""
    share = pd.to_numeric(rows.get("attacker_share", pd.Series(np.nan, index=rows.index)), errors="coerce")
    rows = rows.assign(share=share, alike=rows[CONTROL[x]].astype(bool))
    ticks, labels = [], []
    for value in sorted(rows[x].unique()):
        at = rows[rows[x] == value]
        if value == 0:
            ticks.append(value)
            labels.append("0 (lab)")
            continue
        lines = []
        for policy in (LINES if x == "stragglers" else [None]):
            kept = at[at["straggler_policy"] == policy] if policy else at
            online, alike = (_percent(kept.loc[kept["alike"] == flag, "share"]) for flag in (False, True))
            if online or alike:
                name = {"drop": "drop ", "include": "incl "}.get(policy, "")
                lines.append(f"{name}att {online or '?'} / {alike or '?'}")
        ticks.append(value)
        labels.append("\n".join([f"{value:g}", *lines]))
    ax.set_xticks(ticks, labels, fontsize="small")


def _percent(shares: pd.Series) -> str:
    """The median share as a whole percentage ('' where none was recorded)."""
    shares = shares.dropna()
    return f"{100 * shares.median():.0f}%" if len(shares) else ""
