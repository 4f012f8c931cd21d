"""Benchmark suites (YAML), grid expansion and validation, the Ray Tune trainable, resume/skip, progress.

``fedarena bench run SUITE`` (``runner.run_bench``) expands a suite (``suite``, ``grid``), checks it
(``validate``), skips trials already FINISHED in the tracking store, and runs the rest with Ray Tune
(``trainable``), logging every trial to MLflow from the driver (``callback``).
"""

from fedarena.bench.parse import SUITES, load_suite
from fedarena.bench.suite import SCALES, Suite, SuiteError

__all__ = ["SCALES", "SUITES", "Suite", "SuiteError", "load_suite"]
