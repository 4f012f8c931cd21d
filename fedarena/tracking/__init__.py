"""MLflow tracking, the one way into MLflow (no module outside this package imports it):

- ``location``: where the store is, its URI parsed once (no MLflow import, so the CLI checks a store in
  milliseconds);
- ``store``: the reachability check, creating or migrating a store once under a lock, the suite's
  experiment, and what a failing store raises;
- ``runs``: the run schema, logging, and the runs of a suite grouped for resuming a benchmark;
- ``reading``: the one reader of a suite's runs for the tables, figures and report;
- ``view``: what ``fedarena ui`` opens; ``labels``: run names, table labels and descriptions.

Import the modules themselves (``from fedarena.tracking.runs import RunStore``): importing this package
loads nothing, so a command that never touches a store never imports MLflow.
"""
