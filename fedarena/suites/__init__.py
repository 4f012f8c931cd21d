"""The suite language in one home, and the suites that ship (``fedarena/suites/*.yaml``).

A suite names the axes of a grid (methods, attacks, the datasets of each scale), with a label for every
entry; the format is documented in ``spec`` (its types). ``parse`` reads a file into a ``Suite``, ``select`` its
chosen variants, ``deployment`` its deployment axis (the system section and the declared f), ``validate`` its names against the registries, ``grid`` its trials, ``tuned`` a frozen tuning's
values, ``tuned_labels`` and ``dataset_labels`` the label rules, ``published`` the paper tables it may reproduce, and
``order`` the order the tables show the labels in. The bench runs suites, the battery and the tuner build theirs,
the leaderboards read their order: all from here. A file is read once (``suite_data``), whoever reads it.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path

from fedarena.config import read_yaml_file
from fedarena.registry import Registry

SUITE_DIR = Path(__file__).parent


def _shipped() -> Registry[Path]:
    registry: Registry[Path] = Registry("suite")
    for path in sorted(SUITE_DIR.glob("*.yaml")):
        registry.add(path.stem, path)
    return registry


SUITES = _shipped()  # name -> YAML file; a test or a plugin may add its own (SUITES.add)


def suite_data(path: Path):
    """A suite file's YAML (a copy: the caller may change it), read once per version of the file: the bench's
    parser and the tables' order share one read."""
    path = Path(path).resolve()
    try:
        stat = path.stat()
    except OSError:
        return read_yaml_file(path)  # its own error says what is wrong with the path
    return copy.deepcopy(_read(path, stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=64)
def _read(path: Path, modified: int, size: int):
    return read_yaml_file(path)
