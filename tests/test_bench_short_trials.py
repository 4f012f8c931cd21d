"""Short trials (a scale's ``checkpoint_every: 0``) through real Ray Tune into real MLflow: no checkpoint and
no report before a trial's end, yet every evaluation round in the store, and the variant tags of a select."""

import pytest
import yaml
from mlflow.tracking import MlflowClient

from fedarena.bench.progress import Printer
from fedarena.bench.runner import BenchOptions, run_bench
from fedarena.config import SCALES

pytestmark = pytest.mark.integration  # real processes: Ray

FIXED = {"rounds": 6, "eval_every": 2, "clients_per_round": 4, "local_steps": 2}
DATASET = {"label": "synthetic", "dataset": {"name": "synthetic", "num_clients": 8, "max_samples": 60, "dim": 10}}
SUITE = {
    "name": "shortgrid",
    "methods": [{"label": "global", "method": {"name": "global"}},
                {"label": "mgda", "aggregator": {"name": "fedmgda_plus"},
                 "select": {"by": "val_acc_pooled", "over": {"aggregator.eps": [0.0, 1.0]}}}],
    "attacks": [{"label": "clean", "attack": {"name": "none"}, "levels": [0.0]}],
    "scales": {scale: {"fixed": FIXED, "datasets": [DATASET], "seeds": [0], "checkpoint_every": 0}
               for scale in SCALES},
}


def test_short_trials_log_every_round_at_their_end(ray_cluster, tmp_path):
    # Prepare
    path = tmp_path / "shortgrid.yaml"
    path.write_text(yaml.safe_dump(SUITE))
    lines = []
    options = BenchOptions(str(path), "smoke", tracking_uri=f"sqlite:///{tmp_path}/mlflow.db", storage=tmp_path / "ray")
    # Execute
    summary = run_bench(options, Printer(lines.append))
    # Assert: 3 runs (global, mgda at eps 0 and 1), all rounds logged, no intermediate checkpoint or report
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("shortgrid").experiment_id])
    assert (summary.finished, summary.failed) == (3, 0)
    for run in runs:
        assert run.info.status == "FINISHED" and "checkpoint" not in run.data.tags
        assert [m.step for m in client.get_metric_history(run.info.run_id, "acc_pooled")] == [2, 4, 6]
        assert "val_acc_pooled" in run.data.metrics and run.data.tags["dataset_fingerprint"]
    variants = sorted((r.data.tags["method_label"], r.data.tags.get("select_group"), r.data.tags.get("variant"))
                      for r in runs)
    assert variants == [("global", None, None), ("mgda_eps0", "mgda", "eps=0"), ("mgda_eps1", "mgda", "eps=1")]
    assert not any(": round " in line for line in lines)
    assert sum(": finished at round 6" in line for line in lines) == 3
