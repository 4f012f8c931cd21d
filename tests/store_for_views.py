"""A real MLflow SQLite store filled the way the benchmark fills it, without Ray (for the UI and report tests).

The suite ``viewgrid`` (global, median, ditto x clean, A1 at 50% x seeds 0, 1 on 6 synthetic clients) is
expanded by the real grid; every trial is opened, logged and closed through ``RunStore`` with the bench's
identity tags, its description and its ``clients.csv`` artifact. Accuracies are hand-chosen:

    final acc_pooled = BASE[method] - 0.2 (under A1) + 0.01 * seed, logged at rounds 2 and 4 (half, then all)

and the per-client table holds six clients with accuracies ``acc - 0.1, acc, acc + 0.1`` (twice).
"""

from __future__ import annotations

import csv
from pathlib import Path

import yaml
from mlflow.tracking import MlflowClient

from fedarena.bench.callback import identity_tags
from fedarena.suites.grid import TrialSpec, expand
from fedarena.suites.parse import load_suite
from fedarena.tracking.notes import NOTE_TAG, run_note
from fedarena.tracking.runs import RunStore, run_params
from fedarena.tracking.store import suite_experiment

NAME = "viewgrid"
BASE = {"global": 0.7, "median": 0.6, "ditto": 0.8}
VERSIONS = {"git_sha": "abc1234", "fedarena_version": "0.1.0", "torch_version": "2.0"}
FINGERPRINT = "fp-synthetic-6"
SUITE = {
    "name": NAME,
    "methods": [{"label": "global", "method": {"name": "global"}},
                {"label": "median", "aggregator": {"name": "median"}},
                {"label": "ditto", "method": {"name": "ditto", "lam": 0.1}}],
    "attacks": [{"label": "clean", "attack": {"name": "none"}, "levels": [0.0]},
                {"label": "a1", "attack": {"name": "a1"}, "levels": [0.5]}],
    "scales": {"smoke": {"fixed": {"rounds": 4, "eval_every": 2, "clients_per_round": 4, "local_steps": 1},
                         "seeds": [0, 1],
                         "datasets": [{"label": "syn", "dataset": {"name": "synthetic", "num_clients": 6}}]}},
}


def final_accuracy(spec: TrialSpec) -> float:
    return BASE[spec.method_label] - (0.2 if spec.attack_label == "a1" else 0.0) + 0.01 * spec.seed


def metrics(acc: float) -> dict[str, float]:
    return {"acc_pooled": acc, "acc_mean": acc, "acc_std": 0.1, "acc_worst10": acc - 0.1,
            "class_std_mean": 0.05, "class_std_std": 0.01, "val_acc_pooled": acc, "loss_mean": 1 - acc}


def write_clients(path: Path, acc: float, asr: float | None = None) -> Path:
    """Six clients' rows; with ``asr``, a targeted attack's column (every client at that rate)."""
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["client", "malicious", "test_samples", "accuracy", "loss", "class_std",
                         *(["asr"] if asr is not None else [])])
        for client in range(6):
            writer.writerow([client, False, 30, round(acc + 0.1 * (client % 3 - 1), 4), 1.0, 0.1,
                             *([asr] if asr is not None else [])])
    return path


def fill_store(folder: Path, described: bool = True, status: str = "FINISHED", ran: str | None = None,
               extra=None) -> str:
    """The suite's runs in ``folder/mlflow.db`` (artifacts in ``folder/mlartifacts``); returns the URI.
    ``described=False``: runs without a description (as tracked by older versions); ``ran``: the dataset the
    runs say they ran and are labelled with (e.g. ``fmnist``, a paper's dataset), instead of ``synthetic``;
    ``extra(spec)``: more final metrics of a run (an ``asr_pooled`` also goes into its clients.csv)."""
    path = folder / f"{NAME}.yaml"
    path.write_text(yaml.safe_dump(SUITE))
    uri = f"sqlite:///{folder}/mlflow.db"
    client = MlflowClient(tracking_uri=uri)
    store = RunStore(client, suite_experiment(client, uri, NAME))
    for spec in expand(load_suite(path), "smoke"):
        tags = {**identity_tags(spec, VERSIONS), "dataset_fingerprint": FINGERPRINT}
        params = run_params(spec.config.flat())
        if ran:
            tags.update(dataset_label=ran, dataset_name=ran)
            params["dataset.name"] = ran
        if described:
            tags[NOTE_TAG] = run_note(tags, spec.config.flat())
        run_id = store.open(spec.name, params, tags, spec.config.to_dict())
        acc, more = final_accuracy(spec), extra(spec) if extra else {}
        clients = write_clients(folder / "clients.csv", acc, more.get("asr_pooled"))
        store.finish(run_id, status, [clients], {"diverged": False},
                     {2: metrics(acc / 2), 4: {**metrics(acc), **more}})
    return uri
