"""Mutation testing of one module (``make mutants MODULE=fedarena/privacy/noise.py``): mutmut's mutations of the
module, each tested in a copy of the working tree (never the tree itself) by only the tests that exercise it
(``tests/mutants.toml``); prints killed / survived / timed out, the score over the non-equivalent mutants and every
surviving mutant's diff. ``docs/testing.md`` records the scores.

    python tests/mutants.py fedarena/privacy/noise.py [--only 3,17] [--tests FILE ...] [--json out.json]

Mutants are mutmut 2's (``list_mutations`` / ``mutate``), numbered as ``mutmut run`` numbers them. Each mutant's
tests run in a child forked from a parent that has imported the heavy libraries (torch, numpy, scipy, pytest) but
not fedarena: the child imports the mutated module fresh, and a mutant costs its tests, not an interpreter and
torch starting again (about 3 s of the 5-8 s a mutant cost under ``mutmut run``).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAPPING = ROOT / "tests" / "mutants.toml"
PYTEST = ["-x", "-q", "-n", "0", "-p", "no:cacheprovider", "-p", "no:randomly"]
WRONG_TREE = 97  # a child that imported fedarena from elsewhere than the copy: the run is invalid, not a kill


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


def mutants_of(module: str, source: str) -> list[str]:
    """Every mutant of ``module``'s source, in mutmut's order (mutant n is ``mutmut run``'s id n)."""
    from mutmut import Context, list_mutations, mutate

    ids = list_mutations(Context(source=source, filename=module))
    return [mutate(Context(source=source, filename=module, mutation_id=i))[0] for i in ids]


def test_in_child(where: Path, module: str, source: str, tests: list[str], limit_s: float) -> tuple[int, float]:
    """(pytest's exit status, or -SIGALRM when the tests ran past ``limit_s``; seconds) with ``source`` as the
    module, in a forked child. No bytecode is written or read for it: two mutants of one size written within a
    second would otherwise load each other's cached bytecode."""
    target = where / module
    target.write_text(source, encoding="utf-8")
    shutil.rmtree(target.parent / "__pycache__", ignore_errors=True)
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child: its output discarded, its exit status the verdict
        status = 1
        try:
            signal.alarm(max(1, int(limit_s)))
            sys.dont_write_bytecode = True
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1), os.dup2(null, 2)
            import pytest

            status = int(pytest.main([*PYTEST, *tests]))
            status = status if sys.modules["fedarena"].__file__.startswith(str(where)) else WRONG_TREE
        finally:
            os._exit(status)
    _, raw = os.waitpid(pid, 0)
    status = -os.WTERMSIG(raw) if os.WIFSIGNALED(raw) else os.WEXITSTATUS(raw)
    if status == WRONG_TREE:
        raise SystemExit(f"the tests imported fedarena from outside the copy {where}: the run is not valid")
    return status, time.perf_counter() - started


def prepare(where: Path) -> None:
    """This process imports the heavy libraries (so every child starts warm) and points every import and every
    subprocess the tests start at the copy."""
    import numpy  # noqa: F401
    import pytest  # noqa: F401
    import scipy.stats  # noqa: F401
    import torch

    assert "fedarena" not in sys.modules, "the parent must not import fedarena: each child imports its mutant"
    torch.set_num_threads(1)
    os.environ.update(PYTHONPATH=str(where), OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    sys.path.insert(0, str(where))
    os.chdir(where)


def run(module: str, only: list[int] | None = None, tests: list[str] | None = None) -> dict:
    mapped, equivalent = tests_of(module)
    tests = tests or mapped
    started = time.perf_counter()
    original = (ROOT / module).read_text(encoding="utf-8")
    mutants = mutants_of(module, original)
    numbers = only or list(range(1, len(mutants) + 1))
    unknown = [n for n in numbers if not 1 <= n <= len(mutants)]
    if unknown:
        raise SystemExit(f"{module} has mutants 1 to {len(mutants)}; no mutant {unknown}")
    verdicts: dict[str, list[int]] = {"killed": [], "survived": [], "timeout": []}
    diffs, seconds = {}, {}
    with tempfile.TemporaryDirectory(prefix="fedarena-mutants-") as tmp:
        where = Path(tmp)
        copy_tree(where)
        prepare(where)
        status, baseline = test_in_child(where, module, original, tests, limit_s=1800)
        if status != 0:
            raise SystemExit(f"the tests fail on the unmutated module (pytest exit {status}): {' '.join(tests)}")
        limit = 10 + 3 * baseline  # a mutant's tests past this hang: caught, so killed
        for number in numbers:
            status, seconds[number] = test_in_child(where, module, mutants[number - 1], tests, limit)
            verdict = "survived" if status == 0 else "timeout" if status == -signal.SIGALRM else "killed"
            verdicts[verdict].append(number)
            print(f"mutant {number}: {verdict} ({seconds[number]:.1f} s)", file=sys.stderr, flush=True)
            if verdict == "survived":
                diffs[number] = "".join(difflib.unified_diff(original.splitlines(True),
                                                             mutants[number - 1].splitlines(True), module, module, n=1))
        os.chdir(ROOT)
    survived = [i for i in verdicts["survived"] if i not in equivalent]
    judged = len(numbers) - (len(verdicts["survived"]) - len(survived))
    killed = len(verdicts["killed"]) + len(verdicts["timeout"])  # a mutant that hangs the tests is caught too
    return {"module": module, "tests": tests, "only": only or [], "mutants": len(numbers), "killed": killed,
            "survived": survived, "equivalent": [i for i in verdicts["survived"] if i in equivalent],
            "timeout": verdicts["timeout"], "score": round(killed / judged, 3) if judged else 1.0,
            "baseline_s": round(baseline, 1), "wall_s": round(time.perf_counter() - started, 1),
            "seconds": {n: round(s, 2) for n, s in seconds.items()}, "diffs": diffs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("module", help="a module path, e.g. fedarena/privacy/noise.py")
    parser.add_argument("--json", help="also write the result here")
    parser.add_argument("--only", help="test just these mutants (comma-separated ids, e.g. a full run's survivors)")
    parser.add_argument("--tests", nargs="+", help="run these test files instead of the mapping's (e.g. new ones)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    only = [int(i) for i in args.only.split(",")] if args.only else None
    result = run(args.module, only, args.tests)
    print(f"{result['module']}{' (only ' + args.only + ')' if only else ''}: {result['mutants']} mutants, "
          f"{result['killed']} killed, {len(result['survived'])} survived, {len(result['equivalent'])} equivalent, "
          f"{len(result['timeout'])} timed out; score {result['score']:.1%} of the non-equivalent ones; "
          f"{result['wall_s']} s (the unmutated tests: {result['baseline_s']} s)")
    for number, diff in result["diffs"].items():
        if number in result["survived"]:
            print(f"--- surviving mutant {number}\n{diff.strip()}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0 if result["score"] >= 0.85 else 2


if __name__ == "__main__":
    raise SystemExit(main())
