"""The engine's side of ``attacks.bounds``: a trial's checks of what its attack stamps, and the check of the data it
poisoned once, before the first round."""

from __future__ import annotations

from functools import partial

from fedarena.attacks.base import Effect
from fedarena.attacks.bounds import StampCheck, TriggerBound, check_stamped
from fedarena.datasets import FederatedDataset
from fedarena.datasets.pixels import image_shape, valid_box


def stamp_checks(attack: str, bound: TriggerBound | None,
                 dataset: FederatedDataset) -> tuple[StampCheck | None, StampCheck | None]:
    """(the check of the training samples the attack stamps, the check of its success rate's samples); (None,
    None) where the attack declares no bound."""
    if bound is None:
        return None, None
    where = dict(box=valid_box(dataset), image_hw=image_shape(dataset, attack))
    return (partial(_check, attack, bound, where), partial(_check, attack, bound.at_test(), where))


def _check(attack: str, bound: TriggerBound, where: dict, clean, stamped) -> None:
    check_stamped(attack, bound, clean, stamped, **where)


def check_set_up_stamps(train_check: StampCheck | None, test_check: StampCheck | None, effect: Effect,
                        clean: FederatedDataset) -> None:
    """Before the first round: every device's training samples as the attack left them (data poisoned once, row for
    row) and the success rate's stamped test samples, each against its clean self."""
    if train_check is not None:
        for before, after in zip(clean.clients, effect.dataset.clients, strict=True):
            train_check(before.train.x, after.train.x)
    backdoor = effect.backdoor
    if test_check is not None and backdoor is not None and backdoor.stamp is not None:
        for client in clean.clients:
            x, y = client.test
            eligible = x[y != backdoor.target] if backdoor.source is None else x[y == backdoor.source]
            test_check(eligible, backdoor.stamp(eligible))
