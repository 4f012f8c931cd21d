"""Measurements, printed and never asserted: ``make perf`` (``__main__``: the small workload in ``small``,
``backend: auto`` in ``backends``, the engine at Fashion-MNIST shapes in ``engine``, server rules in
``aggregators``) and ``make perf-paper`` (``paper``: one paper-scale trial, phase by phase; ``concurrent``:
k trials started together)."""
