"""``fedarena.privacy.stages`` exactly: which rows an audit appends as canaries (ids from the number of devices on,
the first canary included) and that the stages' plans cannot be swapped mid-run (frozen)."""

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fedarena.privacy.audit import CANARY_SCALE, CanaryAudit
from fedarena.privacy.stages import Audited, Private
from fedarena.round_stages import StageView

DEVICES = 4


def audited() -> Audited:
    directions = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])  # canaries 4, 5, 6
    audit = CanaryAudit(spec=None, devices=DEVICES, directions=directions, delta=1e-5, seed=0)
    return Audited(plan=SimpleNamespace(bound_now=lambda server: 0.5), audit=audit)


def view(senders) -> StageView:
    return StageView(trial=None, round=0, senders=np.asarray(senders), rule=None, weights=torch.ones(len(senders)),
                     losses=None, server={})


def test_the_first_canary_is_the_one_numbered_as_the_devices():
    updates = torch.full((2, 3), 7.0)
    out = audited().with_canaries(updates, view([1, 3, DEVICES]))  # exactly one canary: the first
    assert torch.equal(out, torch.cat([updates, torch.tensor([[CANARY_SCALE * 0.5, 0.0, 0.0]])]))


def test_each_drawn_canary_sends_its_direction_at_the_scaled_bound_after_the_devices_rows():
    updates = torch.full((2, 3), 7.0, dtype=torch.float64)
    out = audited().with_canaries(updates, view([0, 2, DEVICES + 1, DEVICES + 2]))
    expected = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64) * (CANARY_SCALE * 0.5)
    assert out.dtype == torch.float64 and torch.equal(out, torch.cat([updates, expected]))


def test_a_round_without_canaries_sends_the_devices_rows_alone():
    updates = torch.full((3, 3), 7.0)
    assert audited().with_canaries(updates, view([0, 1, DEVICES - 1])) is updates


@pytest.mark.parametrize("stage", [Private(plan=None), audited()])
def test_a_stages_plan_cannot_be_replaced_mid_run(stage):
    with pytest.raises(dataclasses.FrozenInstanceError):
        stage.plan = None
