"""fedarena: a benchmark harness for fair and robust federated learning.

The Python API (the CLI calls it) and the decorators that register a component, from fedarena's tree or from a
plugin (``fedarena.plugins``)::

    import fedarena
    from fedarena import aggregator, attack, method, dataset, model, round_input

    r = fedarena.run({"dataset": {"name": "digits"}, "method": {"name": "ditto"}}, rounds=50)
    fedarena.benchmark("robustness", scale="quick")
    fedarena.runs("robustness"); fedarena.leaderboard("robustness", format="latex", out="tables/")
    fedarena.site(scale="quick", out="site/", submissions="submissions/")

Importing ``fedarena`` stays light: each name loads its module (torch, Ray, MLflow) when first used.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# name -> the module that defines it (loaded on first use)
_EXPORTS = {
    "run": "fedarena.api", "benchmark": "fedarena.api", "runs": "fedarena.api", "leaderboard": "fedarena.api",
    "RunResult": "fedarena.api", "load_plugins": "fedarena.api", "evaluate": "fedarena.api",
    "tune": "fedarena.api", "site": "fedarena.website.publish",
    "log_uniform": "fedarena.search_space", "uniform": "fedarena.search_space", "choice": "fedarena.search_space",
    "aggregator": "fedarena.methods.aggregators.base", "pre_aggregator": "fedarena.methods.aggregators.base",
    "check_common": "fedarena.methods.aggregators.base", "check_updates": "fedarena.methods.aggregators.base",
    "RoundDraw": "fedarena.methods.aggregators.base", "client_table": "fedarena.methods.aggregators.base",
    "round_input": "fedarena.round_inputs", "RoundView": "fedarena.round_inputs",
    "method": "fedarena.methods.base", "Method": "fedarena.methods.base", "StepContext": "fedarena.methods.base",
    "ServerInfo": "fedarena.methods.base", "scatter_rows": "fedarena.methods.base",
    "attack": "fedarena.attacks.base", "Effect": "fedarena.attacks.base", "with_rows": "fedarena.attacks.base",
    "Backdoor": "fedarena.attacks.base",
    "dataset": "fedarena.datasets.catalog", "FederatedDataset": "fedarena.datasets.base",
    "from_partition": "fedarena.datasets.base", "partitioner": "fedarena.datasets.partition",
    "model": "fedarena.models.zoo", "metric": "fedarena.simulation.metrics",
    "ConfigError": "fedarena.errors",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'fedarena' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value
