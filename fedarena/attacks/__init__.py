"""Data attacks and model attacks (the threat model of Ditto Definition 1 and beyond).

Importing this package imports every module in it, which registers every attack in ``ATTACKS``: none (``clean``), a1 (``labels``),
a2, a3, sign_flip, alie, ipm (``model``), persistent_random_corruption, persistent_gaussian_noise
(``outliers``).
"""

from fedarena.attacks.base import ATTACKS, Effect, ThreatModel, build_threat
from fedarena.registry import import_submodules

import_submodules(__name__, __path__)

__all__ = ["ATTACKS", "Effect", "ThreatModel", "build_threat"]
