"""The privacy-utility figure: benign test accuracy (solid) and the worst 10% of devices' accuracy (dashed)
against the privacy spent, epsilon (log scale), one line per method, one panel per setting (clean, A1 20%, ...).

A cell's epsilon is what its runs report (``epsilon``, at their ``delta``, which the x axis names: "ε at δ =
1e-05"). Two positions right of the finite ones
have no finite epsilon: ``∞`` (clipped, no noise) and ``no DP`` (the privacy axis's ``none``). A method that
shares nothing (local training: epsilon 0) is a dotted horizontal line, the reference a private method
should stay above. Audited cells (``privacy.audit``: canary clients drawn beside the devices) are left out: the
``privacy_audit`` table shows them.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from fedarena.leaderboards.figures import MIN_WIDTH, file_stem, in_the_lab, ordered_values, palette, run_on  # noqa: E402
from fedarena.leaderboards.tables import delta_text, setting_label, sort_key  # noqa: E402

NO_DP = "none"
AUDITED = "epsilon_empirical_final"  # a privacy audit's measure (``privacy.audit``): its cells are left out
WORST10 = "acc_worst10"


def write_privacy_figures(cells: pd.DataFrame, out_dir: Path) -> list[Path]:
    """privacy_<dataset>.png for every dataset whose cells report an epsilon."""
    colors = palette(cells["method_label"])
    paths = []
    for dataset in ordered_values(cells, "dataset_label"):
        data = privacy_data(cells, dataset)
        if not data.empty:
            title = f"Privacy vs accuracy on {run_on(cells, dataset)} (dashed: worst 10% of devices)"
            paths.append(plot_privacy(data, title, out_dir / f"privacy_{file_stem(dataset)}.png", colors))
    return paths


def privacy_data(cells: pd.DataFrame, dataset: str) -> pd.DataFrame:
    """One dataset's cells of a suite with a privacy axis (empty where no cell reports an epsilon)."""
    if "epsilon" not in cells or "privacy_label" not in cells:
        return cells.iloc[0:0]
    cells = in_the_lab(cells)  # a suite that also varies the deployment: the privacy axis in the synchronous lab
    part = cells[(cells["dataset_label"] == dataset) & np.isfinite(cells["acc_pooled"])]
    if AUDITED in part:  # an audited cell is another setting (its rounds count the canaries): its own table
        part = part[pd.to_numeric(part[AUDITED], errors="coerce").isna()]
    if not pd.to_numeric(part["epsilon"], errors="coerce").notna().any():
        return cells.iloc[0:0]
    return part


def x_positions(data: pd.DataFrame) -> tuple[pd.Series, dict[float, str]]:
    """Each cell's x: its epsilon where finite; the two places right of them for ∞ and no DP; NaN for a method
    that ran without DP only (a reference line). And the extra ticks {x: label}."""
    eps = pd.to_numeric(data["epsilon"], errors="coerce")
    finite = eps[np.isfinite(eps)]
    top = float(finite.max()) if len(finite) else 1.0
    infinite, none = top * 4, top * 16
    private = data.groupby("method_label")["privacy_label"].transform(lambda s: (s != NO_DP).any())
    x = eps.where(np.isfinite(eps), infinite)
    x = x.where(data["privacy_label"] != NO_DP, none).where(private, np.nan)
    return x, {infinite: "∞", none: "no DP"}


def plot_privacy(data: pd.DataFrame, title: str, path: Path, colors: dict | None = None) -> Path:
    colors = colors or palette(data["method_label"])
    data = data.assign(x=x_positions(data)[0])
    ticks = x_positions(data)[1]
    settings = sorted({(a, lv) for a, lv in zip(data["attack_label"], data["level"], strict=True)},
                      key=lambda s: (sort_key("attack_label", s[0]), s[1]))
    fig, axes = plt.subplots(1, len(settings), figsize=(max(MIN_WIDTH, 4.2 * len(settings)), 3.6), squeeze=False)
    for ax, (attack, level) in zip(axes[0], settings, strict=True):
        part = data[(data["attack_label"] == attack) & (data["level"] == level)]
        for method, rows in sorted(part.groupby("method_label"), key=lambda mr: sort_key("method_label", mr[0])):
            _draw(ax, rows.sort_values("x"), method, colors[method])
        ax.set_xscale("log")
        finite = sorted(float(v) for v in part["x"].dropna() if v not in ticks)
        ax.set_xticks(finite + sorted(ticks), [f"{v:g}" for v in finite] + [ticks[k] for k in sorted(ticks)],
                      fontsize="small")
        ax.minorticks_off()
        ax.set_title(setting_label(attack, level))
        ax.set_xlabel(epsilon_axis(part))
        ax.set_ylabel("benign test accuracy")
    axes[0][-1].legend(fontsize="x-small", loc="lower right")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def epsilon_axis(part: pd.DataFrame) -> str:
    """The x label of a panel: epsilon at the delta of its private cells ("ε at δ = 1e-05 (privacy spent)")."""
    private = part.loc[part["privacy_label"] != NO_DP, "delta"] if "delta" in part else []
    at = delta_text(private)
    return f"ε at {at} (privacy spent)" if at else "ε (privacy spent)"


def _draw(ax, rows: pd.DataFrame, method: str, color) -> None:
    """A method's accuracy (solid) and worst-10% accuracy (dashed) against x; a dotted line where it has no x."""
    if rows["x"].isna().all():  # shares nothing (local training): the reference
        ax.axhline(float(rows["acc_pooled"].mean()), color=color, linestyle=":", label=f"{method} (ε = 0)")
        return
    ax.plot(rows["x"], rows["acc_pooled"], marker="o", color=color, label=method)
    if WORST10 in rows and np.isfinite(rows[WORST10]).any():
        ax.plot(rows["x"], rows[WORST10], marker=".", linestyle="--", color=color, alpha=0.7)
