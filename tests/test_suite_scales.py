"""A user's suite defines only the scales it uses; asking for another is one error naming the defined ones."""

from pathlib import Path

import pytest
import yaml

from fedarena.cli import main
from fedarena.suites.grid import expand
from fedarena.suites.parse import load_suite
from fedarena.suites.spec import SuiteError

TINY = {"rounds": 2, "eval_every": 1, "clients_per_round": 2, "local_steps": 1}
SYNTHETIC = {"label": "syn", "dataset": {"name": "synthetic", "num_clients": 6, "max_samples": 60, "dim": 5}}
SCALE = {"fixed": TINY, "datasets": [SYNTHETIC], "seeds": [0]}


def write_suite(tmp_path: Path, name: str, scales: dict) -> Path:
    data = {"name": name, "methods": [{"label": "global", "method": {"name": "global"}}],
            "attacks": [{"label": "clean", "attack": {"name": "none"}, "levels": [0.0]}], "scales": scales}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_suite_with_one_scale_loads_and_expands_at_it(tmp_path):
    # Prepare
    path = write_suite(tmp_path, "mine", {"quick": SCALE})
    # Execute
    suite = load_suite(path)
    trials = expand(suite, "quick")
    # Assert
    assert list(suite.scales) == ["quick"]
    assert [t.name for t in trials] == ["global syn clean s0"]


def test_an_undefined_scale_is_an_error_naming_the_defined_ones(tmp_path):
    # Prepare
    suite = load_suite(write_suite(tmp_path, "two", {"smoke": SCALE, "paper": SCALE}))
    # Execute / Assert
    with pytest.raises(SuiteError, match=r"two\.yaml: unknown scale 'quick'; choose one of smoke, paper$"):
        expand(suite, "quick")


def test_bench_run_at_an_undefined_scale_is_one_error_line(tmp_path, capsys):
    # Prepare
    path = write_suite(tmp_path, "only_smoke", {"smoke": SCALE})
    argv = ["bench", "run", str(path), "--scale", "paper", "--dry-run", "--tracking-uri", f"sqlite:///{tmp_path}/m.db"]
    # Execute
    code = main(argv)
    # Assert
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("fedarena: error: ")
    assert err[0].endswith("unknown scale 'paper'; choose one of smoke")


@pytest.mark.parametrize(("scales", "message"), [
    ({}, r"scales: define at least one scale; allowed: smoke, quick, paper"),
    ({"fast": SCALE}, r"scales\.fast: unknown key; allowed: smoke, quick, paper"),
])
def test_no_scale_or_an_unknown_scale_name_is_refused(tmp_path, scales, message):
    # Prepare
    path = write_suite(tmp_path, "bad", scales)
    # Execute / Assert
    with pytest.raises(SuiteError, match=message):
        load_suite(path)
