"""Running suites: preflight, the plan (resume/skip), the Ray Tune trainable, logging, progress.

``fedarena bench run SUITE`` (``runner.run_bench``) reads and expands a suite (``fedarena.suites``: the suite
language's ``parse``, ``validate`` and ``grid``), checks every trial (``preflight``), plans it (``plan``: skips trials already FINISHED in the tracking store), and
runs the rest with Ray Tune (``trainable``), logging every trial to MLflow from the driver (``callback``).

The modules are imported by name (e.g. ``fedarena.bench.runner``): importing this package stays
free of torch, Ray and MLflow, so the CLI starts fast.
"""
