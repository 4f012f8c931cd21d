"""The two readings a baseline of Ditto's Table 2 can follow: the papers' text, or the code that produced
the published numbers (litian96/ditto, TF1; ``docs/fidelity_personalization.md`` lists the differences).

A method with both offers ``mode``: ``paper`` (the default, what the method's paper describes) or
``reference`` (what Ditto's reference code computes). The reference finetunes every device, before the
final evaluation, for ``max(int(finetune_iters * n_k / B), finetune_iters)`` full minibatches (n_k the
device's training samples, B the batch size), its run scripts setting finetune_iters = 40.
"""

from __future__ import annotations

import numpy as np

from fedarena.errors import ConfigError

MODES = ("paper", "reference")
REFERENCE_FINETUNE_ITERS = 40  # run.sh / run_*.sh: --finetune_iters=40 ("finetune for how many epochs")


def check_mode(name: str, mode: str) -> str:
    if mode not in MODES:
        raise ConfigError(f"{name} mode must be one of {', '.join(MODES)}; got {mode!r}")
    return mode


def finetune_epochs(name: str, epochs: int | None, mode: str, paper_default: int) -> int:
    """``epochs`` as given, or the mode's default (``paper_default`` / the reference's 40) when None."""
    if epochs is None:
        return paper_default if mode == "paper" else REFERENCE_FINETUNE_ITERS
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 0:
        raise ConfigError(f"{name} epochs must be a whole number >= 0 (or null for the mode's default), got {epochs!r}")
    return epochs


def reference_finetune_steps(sizes: np.ndarray, batch_size: int, iters: int) -> np.ndarray:
    """Per device, the reference's finetuning steps: max(int(iters * n_k / B), iters)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    return np.maximum(iters * sizes // batch_size, iters)
