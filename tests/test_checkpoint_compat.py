"""Checkpoints an earlier release wrote resume to the numbers an uninterrupted run of today's code gives
(``tests/checkpoint_compat.py``: one per kind of state a component keeps across rounds, written by the release
before the round became a pipeline of stages and the run's state a set of parts)."""

import dataclasses
import math

import pytest
import torch
from checkpoint_compat import CONFIGS, FOLDER, STOP, config

from fedarena.simulation.checkpoint import load_state
from fedarena.simulation.engine import simulate
from fedarena.simulation.identity import AUDIT, trial_identity
from fedarena.simulation.setup import build_trial

PART = {"foolsgold": "server", "fldetector": "server", "crfl": "server", "a3fl": "attack", "iba": "attack",
        "adaptive_clipping": "server", "audit": "audit"}  # the part each one's state is in (fltrust keeps none)


def before_bumps(cfg) -> tuple[str, ...]:
    """The config hash the checkpoint was written under where a version bumped since changed what is computed from
    the state, not the state: the privacy audit's (v2: its estimates and flag at evaluation, the same directions
    and running maximum)."""
    identity = trial_identity(cfg)
    if AUDIT not in identity.versions:
        return ()
    return (dataclasses.replace(identity, versions={k: v for k, v in identity.versions.items() if k != AUDIT})
            .config_hash,)


def close(a, b) -> bool:  # another CPU: equal to a float32 tolerance, not bit for bit
    return (isinstance(a, float) and math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-3, abs=1e-3)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_checkpoint_written_before_the_pipeline_resumes_to_the_uninterrupted_numbers(name):
    cfg = config(name)
    trial = build_trial(cfg)
    loaded = load_state(FOLDER / name, trial, trial_identity(cfg).config_hash, before_bumps(cfg))
    assert loaded.round == STOP
    if name in PART:  # the state it kept is read into its part
        assert loaded.part(PART[name]) and all(isinstance(v, torch.Tensor) for v in loaded.part(PART[name]).values())
    resumed, _ = simulate(trial, loaded)
    straight, _ = simulate(build_trial(cfg))
    torch.testing.assert_close(resumed.w, straight.w, rtol=1e-3, atol=1e-5)
    kept = {slot for slot, part in straight.parts.items() if part}  # an old checkpoint also holds empty parts
    assert kept == {slot for slot, part in resumed.parts.items() if part}
    for slot in kept:
        part = straight.parts[slot]
        assert resumed.parts[slot].keys() == part.keys()
        for key, value in part.items():
            torch.testing.assert_close(resumed.parts[slot][key].double(), value.double(), rtol=1e-3, atol=1e-5,
                                       equal_nan=True)  # FLDetector: NaN where a device has no score yet
    last, again = straight.history[-1], resumed.history[-1]
    assert last.keys() == again.keys() and all(close(last[k], again[k]) for k in last if k != "round")
