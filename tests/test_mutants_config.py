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
    with pytest.raises(SystemExit, match="fedarena/cli.py: not in mutants.toml.*fedarena/privacy/noise.py"):
        mutants.tests_of("fedarena/cli.py")


def test_mutants_are_numbered_as_mutmut_run_numbers_them():
    # docs/testing.md and the mapping name mutants by mutmut run's ids: noise.py's mutant 4 is judged equivalent
    # as `norms > bound` made `>=`, dnc.py's 45 survives as the unstable sort (mutmut: the `mutation` extra, which
    # `make mutants` installs; CI's offline mirror does not hold it)
    pytest.importorskip("mutmut")
    noise = mutants.mutants_of("fedarena/privacy/noise.py", (ROOT / "fedarena/privacy/noise.py").read_text())
    assert len(noise) == 27 and "torch.where(norms >= bound" in noise[4 - 1]
    dnc = mutants.mutants_of("fedarena/methods/aggregators/dnc.py",
                             (ROOT / "fedarena/methods/aggregators/dnc.py").read_text())
    assert "descending=True, stable=False" in dnc[45 - 1] and "stable=False" not in dnc[44 - 1]


def test_a_mutant_number_past_the_modules_last_is_refused_before_anything_runs():
    pytest.importorskip("mutmut")
    with pytest.raises(SystemExit, match="fedarena/attacks/clean.py has mutants 1 to 2; no mutant \\[3\\]"):
        mutants.run("fedarena/attacks/clean.py", only=[3])
