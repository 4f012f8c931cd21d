"""Server-side aggregation rules (defenses), pre-aggregators and the builder the engine calls.

Importing this package imports every module in it, which registers every rule in ``AGGREGATORS``:
mean, weighted_mean, clipping, k_norm, k_loss (``simple``), median, trimmed_mean (``coordinatewise``),
krum, multi_krum, bulyan (``krum``), fedmgda_plus (``mgda``), geometric_median, centered_clipping
(``iterative``), dnc (``dnc``), norm_bound, weak_dp, rlr (``backdoor_defenses``), flame (``flame``),
foolsgold (``foolsgold``), fltrust (``fltrust``), crfl (``crfl``), fldetector (``fldetector``). Each entry (``AggregatorEntry``) carries the rule, its check and the inputs it reads.
"""

from fedarena.methods.aggregators.base import (
    AGGREGATORS,
    EXCLUDED,
    PRE_AGGREGATORS,
    AggregatorEntry,
    RoundDraw,
)
from fedarena.methods.aggregators.builder import (
    Aggregator,
    check_aggregator,
    expected_malicious,
    make_aggregator,
)
from fedarena.methods.aggregators.simple import clip_to_median_norm
from fedarena.registry import import_submodules

import_submodules(__name__, __path__)

__all__ = [
    "AGGREGATORS",
    "AggregatorEntry",
    "EXCLUDED",
    "PRE_AGGREGATORS",
    "Aggregator",
    "RoundDraw",
    "check_aggregator",
    "clip_to_median_norm",
    "expected_malicious",
    "make_aggregator",
]
