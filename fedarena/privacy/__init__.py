"""Differential privacy, the third constraint beside fairness and robustness (``docs/semantics.md``, "Privacy").

``base``: the ``privacy`` config section's contract (its spec, the registry of mechanisms, ``privacy_from``);
``mechanisms``: the registered mechanisms (none | central | local); ``accounting``: epsilon by Google's dp-accounting;
``noise``: clipping, Gaussian noise and the adaptive clip bound on stacked updates; ``dp_trial``: a trial's checks,
its calibrated noise multiplier and the steps the round takes; ``stages``: those steps as stages of the round;
``audit`` and ``empirical``: the measured epsilon. Importing the package registers every mechanism.
"""

from fedarena.registry import import_submodules

import_submodules(__name__, __path__)
