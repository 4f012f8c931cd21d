"""Run provenance as tables: which code ran (git commit, package versions), on which data (the dataset
fingerprints of every dataset label), with which seeds, at which scale, and how many runs each.

Pure functions on the prepared runs frame (one row per finished run, ``build.prepare_runs``); the report
renders the tables like the leaderboards.
"""

from __future__ import annotations

import pandas as pd

from fedarena.leaderboards.tables import Block, Cell, Table, sort_key

CODE = ("git_sha", "fedarena_version", "torch_version", "numpy_version", "python_version")


def _values(runs: pd.DataFrame, column: str) -> pd.Series:
    if column not in runs:
        return pd.Series(["unknown"] * len(runs), index=runs.index)
    return runs[column].fillna("unknown").astype(str).replace("", "unknown")


def code_versions(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (field, value): how many runs ran with it, e.g. (git_sha, 3486a01, 12)."""
    rows = [(field, value, int(count)) for field in CODE if field in runs
            for value, count in _values(runs, field).value_counts(sort=False).sort_index().items()]
    return pd.DataFrame(rows, columns=["field", "value", "runs"])


def _seeds(values: pd.Series) -> str:
    seeds = sorted({int(float(v)) for v in values.dropna() if str(v) not in ("", "nan")})
    return ", ".join(map(str, seeds)) or "unknown"


def dataset_provenance(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (dataset label, dataset run, fingerprint): its scale(s), seeds and number of runs."""
    frame = runs.assign(_name=_values(runs, "dataset_name"), _fp=_values(runs, "dataset_fingerprint"),
                        _scale=_values(runs, "scale"), _seed=runs["seed"] if "seed" in runs else None)
    rows = []
    for (label, name, fingerprint), part in frame.groupby(["dataset_label", "_name", "_fp"], sort=False):
        rows.append((label, name, fingerprint, ", ".join(sorted(set(part["_scale"]))), _seeds(part["_seed"]),
                     len(part)))
    out = pd.DataFrame(rows, columns=["dataset_label", "dataset_name", "fingerprint", "scale", "seeds", "runs"])
    order = sorted(range(len(out)), key=lambda i: (sort_key("dataset_label", out["dataset_label"].iloc[i]),
                                                   out["fingerprint"].iloc[i]))
    return out.iloc[order].reset_index(drop=True)


def _table(name: str, title: str, frame: pd.DataFrame, header: list[str], notes: list[str]) -> Table:
    rows = [[Cell(str(v)) for v in row] for row in frame.itertuples(index=False)]
    return Table(name, title, [Block(header=header, rows=rows, stub=1)], notes, frame)


def provenance_tables(runs: pd.DataFrame) -> list[Table]:
    """The code-version and dataset tables of the runs behind a report."""
    code = code_versions(runs)
    data = dataset_provenance(runs)
    code_notes = ["Every run records the git commit and package versions it ran with (MLflow tags)."]
    if (code["field"] == "git_sha").sum() > 1:
        code_notes.append("More than one code version: cells whose seeds disagree are marked mixed in the tables.")
    data_notes = ["fingerprint: hash of the partition indices and the data source; one per (dataset, seed)."]
    return [
        _table("provenance_code", "Provenance: code versions", code, ["field", "value", "runs"], code_notes),
        _table("provenance_data", "Provenance: datasets, seeds and scale", data,
               ["dataset label", "dataset run", "fingerprint", "scale", "seeds", "runs"], data_notes),
    ]
