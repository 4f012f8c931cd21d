"""``make mutants``' mapping (tests/mutants.toml) names modules and test files that exist, and an unknown module
is refused in one line listing the known ones (the mutation run itself is never part of ``make test``)."""

import tomllib
from pathlib import Path

import mutants
import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_every_mapped_module_and_test_file_exists():
    modules = tomllib.loads(mutants.MAPPING.read_text(encoding="utf-8"))["modules"]
    assert modules
    for module, entry in modules.items():
        assert (ROOT / module).is_file(), module
        assert entry["tests"] and all((ROOT / t).is_file() for t in entry["tests"]), module
        assert set(entry) <= {"tests", "equivalent"}, module


def test_an_unmapped_module_is_refused_naming_the_known_ones():
    with pytest.raises(SystemExit, match="fedarena/privacy/empirical.py: not in mutants.toml.*fedarena/privacy/noise.py"):
        mutants.tests_of("fedarena/privacy/empirical.py")
