"""Differential privacy, the third constraint beside fairness and robustness (``docs/semantics.md``, "Privacy").

``mechanisms``: the ``privacy`` config section (none | central | local); ``accounting``: epsilon by Google's
dp-accounting; ``noise``: clipping, Gaussian noise and the adaptive clip bound on stacked updates; ``plan``: a trial's
checks, its calibrated noise multiplier and the steps the round loop takes.
"""
