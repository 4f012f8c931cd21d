"""The tuning figure: each row's best-so-far curve (the best worst-case validation accuracy among the configurations
drawn so far, against how many were drawn), one panel per dataset, from the ``choice`` runs of the store's
``tune`` experiment for a suite (``search.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from fedarena.leaderboards.figures import file_stem, palette  # noqa: E402
from fedarena.tracking.reading import all_runs  # noqa: E402
from fedarena.tracking.store import mlflow_client  # noqa: E402


def tuning_curves(tracking_uri: str, suite: str) -> pd.DataFrame:
    """One row per finished search of ``suite``: row, dataset, scale, budget (trials) and curve (newest first
    where a search was repeated with other settings)."""
    client = mlflow_client(tracking_uri)
    experiment = client.get_experiment_by_name("tune")
    if experiment is None:
        return pd.DataFrame(columns=["row", "dataset", "scale", "trials", "curve"])
    runs = all_runs(client, experiment.experiment_id, f"tags.tune_choice = 'true' and tags.tune_suite = '{suite}'")
    rows = [{"row": r.data.tags["tune_row"], "dataset": r.data.tags["tune_dataset"], "scale": r.data.tags["tune_scale"],
             "trials": int(r.data.metrics.get("trials", 0)), "curve": json.loads(r.data.tags["tune_curve"]),
             "start": r.info.start_time} for r in runs]
    frame = pd.DataFrame(rows, columns=["row", "dataset", "scale", "trials", "curve", "start"])
    return frame.sort_values("start", ascending=False).drop_duplicates(["row", "dataset", "scale"])


def write_tuning_figures(curves: pd.DataFrame, out_dir: Path) -> list[Path]:
    """tuning_<dataset>.png per dataset with a finished search."""
    paths = []
    if curves.empty:
        return paths
    colors = palette(curves["row"])
    for (dataset, scale), part in curves.groupby(["dataset", "scale"], sort=True):
        fig, ax = plt.subplots(figsize=(7, 4))
        for _, run in part.iterrows():
            ax.plot(range(1, len(run["curve"]) + 1), run["curve"], marker="o", ms=3, label=run["row"],
                    color=colors.get(run["row"]))
        ax.set_xlabel("configurations drawn")
        ax.set_ylabel("best worst-case validation accuracy")
        ax.set_title(f"Tuning on {dataset} ({scale}): best so far per row")
        ax.legend(fontsize=7, ncol=2, loc="lower right")
        fig.tight_layout()
        path = out_dir / f"tuning_{file_stem(dataset)}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths
