"""Data attacks and model attacks (the threat model of Ditto Definition 1 and beyond).

Importing this package registers every attack in ``ATTACKS``: none (``base``), a1 (``labels``),
a2, a3, sign_flip, alie, ipm (``model``), persistent_random_corruption, persistent_gaussian_noise
(``outliers``).
"""

from fedarena.attacks import labels, model, outliers  # noqa: F401  (registers)
from fedarena.attacks.base import ATTACKS, Effect, ThreatModel, build_threat

__all__ = ["ATTACKS", "Effect", "ThreatModel", "build_threat"]
