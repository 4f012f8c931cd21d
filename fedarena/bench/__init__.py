"""Benchmark suites (YAML), grid expansion and validation, the Ray Tune trainable, resume/skip, progress.

``fedarena bench run SUITE`` (``runner.run_bench``) expands a suite (``suite``, ``grid``), checks it
(``validate``, ``preflight``), plans it (``plan``: skips trials already FINISHED in the tracking store), and
runs the rest with Ray Tune (``trainable``), logging every trial to MLflow from the driver (``callback``).

The modules are imported by name (e.g. ``fedarena.bench.parse.load_suite``): importing this package stays
free of torch, Ray and MLflow, so the CLI starts fast.
"""
