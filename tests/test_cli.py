"""`fedarena run` end to end on digits, `--set`, and clear errors before any training."""

import json
import subprocess
import sys

import pytest

from fedarena.cli import main

FINAL_KEYS = {"acc_pooled", "acc_mean", "acc_std", "acc_worst10", "class_std_mean", "class_std_std", "diverged"}


def run_cli(tmp_path, *args):
    out = tmp_path / "result.json"
    code = main(["run", "--dataset", "digits", "--rounds", "4", "--clients-per-round", "5", "--eval-every", "2",
                 "--no-progress", "--out", str(out), *args])
    return code, (json.loads(out.read_text()) if out.exists() else None)


def test_run_writes_config_final_metrics_and_client_table(tmp_path):
    code, result = run_cli(tmp_path, "--method", "ditto", "--set", "lam=0.1", "--set", "dataset.num_clients=12",
                           "--backend", "batched", "--seed", "7")
    assert code == 0
    assert result["config"]["method"] == {"name": "ditto", "lam": 0.1, "dynamic_lam": False,
                                          "lam_candidates": None, "lam_candidates_strong": None}
    assert result["config"]["dataset"]["num_clients"] == 12 and result["config"]["seed"] == 7
    assert FINAL_KEYS <= set(result["final"]) and result["final"]["round"] == 4
    assert len(result["clients"]) == 12 and {"client", "accuracy", "malicious"} <= set(result["clients"][0])
    assert [h["round"] for h in result["history"]] == [2, 4]
    assert len(result["config_hash"]) == 16 and result["dataset_fingerprint"]


@pytest.mark.parametrize("args, message", [
    (["--method", "dito"], "available: "),
    (["--set", "lamda=1"], "Settable keys"),
    (["--set", "dataset.num_clientz=3"], "allowed: "),
    (["--clients-per-round", "99"], "exceeds"),
    (["--method", "ditto", "--set", "lam=-0.5"], "lam must be >= 0"),
    (["--lr", "-1"], "lr must be a positive"),
    (["--attack", "a1", "--level", "1.0"], "fraction in [0, 1)"),
])
def test_bad_input_is_a_clear_error_before_training(tmp_path, capsys, args, message):
    code, result = run_cli(tmp_path, *args)
    assert code == 2 and result is None
    assert message in capsys.readouterr().err


@pytest.mark.integration  # the CLI as a process
def test_console_script_runs(tmp_path):
    out = tmp_path / "r.json"
    done = subprocess.run([sys.executable, "-m", "fedarena.cli", "run", "--dataset", "synthetic", "--method", "local",
                           "--rounds", "2", "--no-progress", "--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["config"]["model"]["name"] == "logreg"


@pytest.mark.parametrize("text, message", [
    ("rounds: [1, 2\n", "bad.yaml, line 2, column 1: invalid YAML: expected ',' or ']'"),
    ("rounds: 3\n  lr: 0.1\n", "bad.yaml, line 2, column 5: invalid YAML: mapping values are not allowed here"),
    ("- 1\n- 2\n", "expected a mapping of config keys, got list"),
])  # fmt: skip
def test_a_bad_config_file_is_one_line_naming_file_line_and_column(tmp_path, capsys, text, message):
    (tmp_path / "bad.yaml").write_text(text)
    assert main(["run", "--config", str(tmp_path / "bad.yaml"), "--out", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_fedarena_run_reads_builds_and_resolves_its_config_once(tmp_path, monkeypatch):
    # one path from the command line to a config: the file and flags read once, one build of the whole config (and
    # one more where a bare --set key needs the chosen components' keys), one resolution, none again in fedarena.run
    from fedarena.config import ExperimentConfig

    built, original = [], ExperimentConfig.from_dict.__func__
    monkeypatch.setattr(ExperimentConfig, "from_dict",
                        classmethod(lambda cls, data: built.append(cls.__name__) or original(cls, data)))
    config = tmp_path / "config.yaml"
    config.write_text("dataset: {name: synthetic, num_clients: 10}\nrounds: 1\n")
    code = main(["run", "--config", str(config), "--method", "global", "--set", "eval_every=1", "--set", "lr=0.05",
                 "--set", "dataset.dim=20", "--set", "max_samples=60", "--out", str(tmp_path / "r.json"),
                 "--no-progress"])
    assert code == 0 and built == ["ExperimentConfig", "ExperimentConfig", "ResolvedConfig"]
    saved = json.loads((tmp_path / "r.json").read_text())["config"]
    assert (saved["dataset"]["max_samples"], saved["dataset"]["dim"], saved["lr"]) == (60, 20, 0.05)
