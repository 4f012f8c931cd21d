"""The benchmark suites that ship (``fedarena/suites/*.yaml``) and the order their labels are shown in.

A suite names the axes of a grid (methods, attacks, the datasets of each scale), with a label for every
entry; the format is documented in ``fedarena.bench.suite``. The files live below both their readers: the
bench parses, checks and runs them (``fedarena.bench.parse``), the leaderboards show rows, columns and blocks
in the order the suites list the labels (``fedarena.suites.order``).
"""

from __future__ import annotations

from pathlib import Path

from fedarena.registry import Registry

SUITE_DIR = Path(__file__).parent


def _shipped() -> Registry[Path]:
    registry: Registry[Path] = Registry("suite")
    for path in sorted(SUITE_DIR.glob("*.yaml")):
        registry.add(path.stem, path)
    return registry


SUITES = _shipped()  # name -> YAML file; a test or a plugin may add its own (SUITES.add)
