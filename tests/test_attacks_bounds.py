"""The engine's check of what a trigger attack declares (``attacks.bounds``): each place it stamps is checked (the
data poisoned at set-up, each round's corrupted rows, the success rate's samples), each branch bites (a position
outside the patch, a pixel beyond eps, a value outside the valid box, a changed shape), and a run within its bound
goes through."""

import dataclasses

import numpy as np
import pytest
import torch
from resume import attacked_digits_config

from fedarena.attacks import ATTACKS
from fedarena.attacks.backdoor import Patch
from fedarena.attacks.bounds import BoundExceeded, TriggerBound, check_stamped
from fedarena.datasets.base import Split
from fedarena.simulation.engine import simulate
from fedarena.simulation.setup import build_trial

BOX = (torch.zeros(1, 4, 4), torch.ones(1, 4, 4))


def test_each_branch_of_the_check_bites():
    clean = torch.full((2, 1, 4, 4), 0.5)
    corner = clean.clone()
    corner[:, 0, 0, 0] = 1.0
    bound = TriggerBound(linf=0.6, positions=((0, 0),))
    check_stamped("a", bound, clean, corner, BOX, (4, 4))  # within every bound: passes
    elsewhere = clean.clone()
    elsewhere[:, 0, 3, 3] = 1.0
    with pytest.raises(BoundExceeded, match=r"attack 'a' changed pixel positions \[\[3, 3\]\] outside the 1"):
        check_stamped("a", bound, clean, elsewhere, BOX, (4, 4))
    with pytest.raises(BoundExceeded, match="beyond its declared L-infinity bound 0.4"):
        check_stamped("a", TriggerBound(linf=0.4), clean, corner, BOX, (4, 4))
    beyond_white = clean.clone()
    beyond_white[:, 0, 0, 0] = 1.5
    with pytest.raises(BoundExceeded, match="outside the valid pixel box by 0.5 of the raw range"):
        check_stamped("a", TriggerBound(), clean, beyond_white, BOX, (4, 4))
    with pytest.raises(BoundExceeded, match=r"changed the stamped samples' shape from \[2, 1, 4, 4\] to \[3, 1, 4, 4\]"):
        check_stamped("a", TriggerBound(), clean, torch.cat([clean, clean[:1]]), BOX, (4, 4))


def badnets_stamping_elsewhere(dataset, malicious, rng, *, where: str = "outside"):
    """BadNets whose patch (bottom right) declares the top-left positions (outside) or whose white is pushed past the
    valid box (beyond)."""
    effect = ATTACKS.get("badnets")(dataset, malicious, np.random.default_rng(0), poison_fraction=1.0)
    patch = effect.backdoor.stamp.__self__
    if where == "outside":
        return dataclasses.replace(effect, bound=TriggerBound(positions=((0, 0), (0, 1), (0, 2))))
    louder = Patch(patch.pixels, patch.shape, patch.fill * 2)
    poisoned = [dataclasses.replace(c, train=Split(louder.stamp(c.train.x), c.train.y))
                if bad else c for c, bad in zip(dataset.clients, malicious, strict=True)]
    return dataclasses.replace(effect, dataset=dataclasses.replace(dataset, clients=poisoned))


def iba_louder_in_training(dataset, malicious, rng, *, eps: float = 0.1):
    """IBA whose training stamps move every pixel 1% further than its declared eps, from the first round."""
    effect = ATTACKS.get("iba")(dataset, malicious, rng, eps=eps, test_eps=eps, epochs=1)
    low, high = effect.corrupt.keywords["low"], effect.corrupt.keywords["high"]

    def corrupt(x, y, owner, bad, gen, *, state):
        x = x.clone()
        flat = x.reshape(len(x), -1)
        flat[bad] = (flat[bad] + 1.01 * eps * (high - low)).clamp(low, high)
        return flat.reshape(x.shape), y

    return dataclasses.replace(effect, corrupt=corrupt)


@pytest.fixture
def registered():
    names = []

    def register(name, fn):
        ATTACKS.register(name)(fn)
        names.append(name)

    yield register
    for name in names:
        ATTACKS.remove(name)


@pytest.mark.parametrize("where, message", [
    ("outside", r"attack 'stray_badnets' changed pixel positions \[\[5, 5\]"),
    ("beyond", "attack 'stray_badnets' stamped a sample outside the valid pixel box"),
])
def test_the_data_poisoned_at_set_up_is_checked(registered, where, message):
    registered("stray_badnets", badnets_stamping_elsewhere)
    with pytest.raises(BoundExceeded, match=message):
        build_trial(attacked_digits_config({"name": "stray_badnets", "level": 0.3, "where": where}, 2))


def test_each_rounds_corrupted_rows_are_checked(registered):
    registered("loud_iba", iba_louder_in_training)
    trial = build_trial(attacked_digits_config({"name": "loud_iba", "level": 0.3}, 2))  # set-up passes
    with pytest.raises(BoundExceeded, match=r"attack 'loud_iba' changed a pixel by 0\.101 of the raw range"):
        simulate(trial)


def test_every_shipped_trigger_attack_runs_within_its_declared_bound():
    for name in ("badnets", "dba", "model_replacement", "neurotoxin", "a3fl", "iba"):
        extra = {"steps": 2, "adv_every": 1} if name == "a3fl" else {"epochs": 1} if name == "iba" else {}
        trial = build_trial(attacked_digits_config({"name": name, "level": 0.3, **extra}, 3))
        assert trial.stamp_check is not None and trial.test_stamp_check is not None
        simulate(trial)
