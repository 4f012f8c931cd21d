"""fedarena/attacks/clean.py: the attack ``none`` is registered under that name, reads nothing of other devices
(so DP admits it) and changes nothing (make mutants MODULE=fedarena/attacks/clean.py)."""

import numpy as np

from fedarena.attacks.base import ATTACKS, Effect, attack_reads
from fedarena.attacks.clean import no_attack


def test_none_is_clean_training_declared_to_read_nothing_else():
    assert ATTACKS.get("none") is no_attack and ATTACKS.version("none") == 1
    assert attack_reads({"name": "none", "level": 0.0}) == ()


def test_clean_training_keeps_the_dataset_and_tampers_with_nothing():
    dataset = object()  # the effect only carries it
    effect = no_attack(dataset, np.zeros(4, dtype=bool), np.random.default_rng(0))
    assert effect == Effect(dataset) and effect.dataset is dataset
    assert effect.tamper is None and effect.corrupt is None and effect.backdoor is None and effect.adapt is None
