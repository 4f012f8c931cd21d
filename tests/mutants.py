"""Mutation testing of one module (``make mutants MODULE=fedarena/privacy/noise.py``): mutmut mutates the module
in a copy of the working tree (never the tree itself) and runs only the tests that exercise it
(``tests/mutants.toml``), one mutant at a time; prints killed / survived / timed out, the score over the
non-equivalent mutants and every surviving mutant's diff. ``docs/testing.md`` records the scores.

    python tests/mutants.py fedarena/privacy/noise.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAPPING = ROOT / "tests" / "mutants.toml"
PYTEST = "-m pytest -x -q -n 0 -p no:cacheprovider -p no:randomly"


def tests_of(module: str) -> tuple[list[str], list[int]]:
    """(the test files that exercise ``module``, the ids of its mutants judged equivalent) from the mapping."""
    table = tomllib.loads(MAPPING.read_text(encoding="utf-8")).get("modules", {})
    if module not in table:
        known = ", ".join(sorted(table))
        raise SystemExit(f"{module}: not in {MAPPING.name}; add it with the tests that exercise it (known: {known})")
    entry = table[module]
    return list(entry["tests"]), [int(i) for i in entry.get("equivalent", [])]


def copy_tree(dest: Path) -> None:
    """The working tree's tracked and untracked (not ignored) files, as they are now, into ``dest``."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout.splitlines()
    for name in listed:
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)


def mutmut(args: list[str], where: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mutmut", *args], cwd=where, env=env, capture_output=True, text=True)


STATUSES = ("killed", "survived", "timeout", "suspicious", "skipped", "untested")


def results(where: Path, env: dict) -> dict[str, list[int]]:
    """mutmut's verdicts: status -> mutant ids (``mutmut result-ids STATUS``)."""
    return {status: [int(i) for i in mutmut(["result-ids", status], where, env).stdout.split() if i.isdigit()]
            for status in STATUSES}


def run(module: str) -> dict:
    tests, equivalent = tests_of(module)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fedarena-mutants-") as tmp:
        where = Path(tmp)
        copy_tree(where)
        env = {**os.environ, "PYTHONPATH": str(where), "OMP_NUM_THREADS": "1"}
        runner = f"{sys.executable} tests/mutants.py --pytest {' '.join(tests)}"  # the copy's own file
        done = mutmut(["run", "--paths-to-mutate", module, "--runner", runner, "--no-progress", "--simple-output"],
                      where, env)
        if done.returncode & 1:
            raise SystemExit(f"mutmut failed on {module}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        verdicts = results(where, env)
        diffs = {i: mutmut(["show", str(i)], where, env).stdout for i in verdicts["survived"]}
    total = sum(len(ids) for ids in verdicts.values())
    survived = [i for i in verdicts["survived"] if i not in equivalent]
    judged = total - len(verdicts["survived"]) + len(survived)
    # a mutant that hangs the tests is caught; mutmut calls a kill "suspicious" when the failing tests took over twice
    # the baseline's time (a loaded machine): the tests failed, so it is killed too
    killed = len(verdicts["killed"]) + len(verdicts["timeout"]) + len(verdicts["suspicious"])
    return {"module": module, "tests": tests, "mutants": total, "killed": killed, "survived": survived,
            "equivalent": [i for i in verdicts["survived"] if i in equivalent], "timeout": verdicts["timeout"],
            "suspicious": verdicts["suspicious"], "untested": verdicts["untested"] + verdicts["skipped"],
            "score": round(killed / judged, 3) if judged else 1.0,
            "wall_s": round(time.perf_counter() - started, 1), "diffs": diffs}


def run_tests(files: list[str]) -> int:
    """The mutant's test run: 1 when the tests fail in any way (a failed test, or a mutant that cannot be imported:
    pytest's exit 2), else 0. mutmut 2 counts only exit 1 as a kill, so an import-breaking mutant would read as
    surviving."""
    return 0 if subprocess.call([sys.executable, *PYTEST.split(), *files]) == 0 else 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--pytest"]:
        return run_tests(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("module", help="a module path, e.g. fedarena/privacy/noise.py")
    parser.add_argument("--json", help="also write the result here")
    args = parser.parse_args(argv)
    result = run(args.module)
    print(f"{result['module']}: {result['mutants']} mutants, {result['killed']} killed, "
          f"{len(result['survived'])} survived, {len(result['equivalent'])} equivalent, {len(result['timeout'])} timed "
          f"out, {len(result['suspicious'])} suspicious; score {result['score']:.1%} of the non-equivalent ones; "
          f"{result['wall_s']} s")
    for number, diff in result["diffs"].items():
        if number in result["survived"]:
            print(f"--- surviving mutant {number}\n{diff.strip()}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0 if result["score"] >= 0.85 else 2


if __name__ == "__main__":
    raise SystemExit(main())
