"""A run's description in the MLflow UI (its ``mlflow.note.content`` tag) and the name of its per-client table."""

from __future__ import annotations

from collections.abc import Mapping

NOTE_TAG = "mlflow.note.content"  # MLflow's run description (the runs table's "Description" column)
CLIENTS_ARTIFACT = "clients.csv"


def run_note(tags: Mapping[str, object], params: Mapping[str, object]) -> str:
    """A run's description from its tags and params (plain text; the runs table shows its first ~50
    characters, so the method, aggregator and dataset really run come first; the run name has the rest)::

        method ditto, aggregator mean, dataset digits; attack a1 at level 0.5 (50% of clients malicious);
        seed 1, scale quick. Per-client table: artifact clients.csv.
    """
    level = float(tags.get("level", 0) or 0)
    attack = str(tags.get("attack_label", "clean"))
    setting = (f"attack {attack} at level {level:g} ({level:.0%} of clients malicious)"
               if level > 0 and attack != "clean" else "no attack")
    name, label = str(tags.get("dataset_name", "?")), str(tags.get("dataset_label", ""))
    dataset = name if label in ("", name) else f"{name} (table label {label})"
    return (f"method {params.get('method.name', '?')}, aggregator {params.get('aggregator.name', '?')}, dataset "
            f"{dataset}; {setting}; seed {params.get('seed', '?')}, scale {tags.get('scale', '?')}. Per-client "
            f"table: artifact {CLIENTS_ARTIFACT}.")
