"""Seeded dropout (models.dropout): exact bits, masks independent of grouping, FEMNIST's CNN options, and
the engine's parity between backends with dropout on."""

import dataclasses
import functools
import json

import pytest
import torch
from float32_bounds import assert_counts_agree

from fedarena.config import ExperimentConfig
from fedarena.errors import ConfigError
from fedarena.models import build_model
from fedarena.models.backends import Backend
from fedarena.models.batch import Batch
from fedarena.models.dropout import MASK32, KeyedDropout, hash32, keep_mask, mul32
from fedarena.simulation.engine import simulate
from fedarena.simulation.evaluate import evaluate
from fedarena.simulation.setup import build_trial

REFERENCE_DROPOUT = {"name": "cnn_femnist", "conv_dropout": 0.25, "dropout": 0.5}


def lowbias32(x: int) -> int:
    """Wellons' lowbias32 in plain uint32 arithmetic (the published definition)."""
    x ^= x >> 16
    x = (x * 0x7FEB352D) & MASK32
    x ^= x >> 15
    x = (x * 0x846CA68B) & MASK32
    return x ^ (x >> 16)


def test_mul32_and_hash32_match_plain_uint32_arithmetic_on_tensors_and_ints():
    values = [0, 1, 2, 0xFFFF, 0x10000, 0x7FFFFFFF, 0x80000000, 0xDEADBEEF, MASK32]
    as_tensor = torch.tensor(values, dtype=torch.long)
    assert mul32(as_tensor, 0x846CA68B).tolist() == [(v * 0x846CA68B) % 2**32 for v in values]
    assert hash32(as_tensor).tolist() == [lowbias32(v) for v in values]
    assert [hash32(v) for v in values] == [lowbias32(v) for v in values]


def test_keep_mask_depends_on_key_layer_and_sample_only_and_keeps_one_minus_rate():
    ids = torch.arange(4000)
    mask = keep_mask(7, 0, ids, 100, 0.25)
    assert mask.shape == (4000, 100) and abs(mask.float().mean().item() - 0.75) < 0.01
    assert torch.equal(keep_mask(7, 0, ids[1234:1236], 100, 0.25), mask[1234:1236])  # any grouping of samples
    assert not torch.equal(keep_mask(8, 0, ids[:50], 100, 0.25), mask[:50])  # another step's key
    assert not torch.equal(keep_mask(7, 1, ids[:50], 100, 0.25), mask[:50])  # another layer
    assert bool(keep_mask(7, 0, ids[:50], 100, 0.0).all())


def test_keyed_dropout_zeroes_the_masked_features_and_rescales_the_kept_ones():
    layer = KeyedDropout(0.5, layer=3)
    x = torch.arange(1.0, 13.0).view(2, 2, 3)  # two samples of 2 x 3 features
    assert torch.equal(layer(x), x)  # no key: the identity
    layer.key, layer.ids = 99, torch.tensor([10, 11])
    expected = torch.where(keep_mask(99, 3, layer.ids, 6, 0.5).view(2, 2, 3), 2 * x, torch.zeros(()))
    assert torch.equal(layer(x), expected)


def test_femnist_cnn_refuses_rates_outside_zero_one():
    with pytest.raises(ConfigError, match="conv_dropout is a drop rate in \\[0, 1\\)"):
        build_model("cnn_femnist", {"conv_dropout": 1.0}, (1, 28, 28), 62, "classification", 0, torch.device("cpu"))


def test_femnist_cnn_default_has_no_dropout_and_the_same_initial_parameters():
    dev = torch.device("cpu")
    plain, w_plain = build_model("cnn_femnist", {}, (1, 28, 28), 62, "classification", 3, dev)
    drop, w_drop = build_model("cnn_femnist", {k: v for k, v in REFERENCE_DROPOUT.items() if k != "name"},
                               (1, 28, 28), 62, "classification", 3, dev)
    assert not plain.has_dropout and drop.has_dropout and not drop.eval_dropout
    assert torch.equal(w_plain, w_drop)


def test_keyed_backends_draw_the_same_masks_for_any_grouping():
    model, w = build_model("cnn_femnist", {"conv_dropout": 0.25, "dropout": 0.5}, (1, 28, 28), 62,
                           "classification", 0, torch.device("cpu"))
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(3, 4, 1, 28, 28, generator=gen), torch.randint(0, 62, (3, 4), generator=gen)
    batch = Batch(x, y, torch.ones(3, 4), torch.ones(3), torch.arange(12).view(3, 4))
    params = w.expand(3, -1).clone()
    seq, bat = Backend(model, False).keyed(5), Backend(model, True).keyed(5)
    seq_loss, seq_grad = seq.grad(params, batch)
    bat_loss, bat_grad = bat.grad(params, batch)
    torch.testing.assert_close(bat_grad, seq_grad, rtol=1e-5, atol=1e-6)
    plain_loss, _ = Backend(model, False).grad(params, batch)
    assert not torch.allclose(seq_loss, plain_loss)  # dropout acted
    torch.testing.assert_close(seq.loss(params, batch), Backend(model, False).loss(params, batch))  # eval: off


@functools.cache
def femnist_like_trial():
    """Ditto on 10 mnist_5k devices (28x28 images) with the FEMNIST CNN, built once (loading is the cost)."""
    cfg = ExperimentConfig.from_dict({
        "dataset": {"name": "mnist_5k", "num_clients": 10}, "model": {"name": "cnn_femnist"},
        "method": {"name": "ditto"}, "rounds": 2, "clients_per_round": 3, "local_steps": 2, "batch_size": 8,
        "eval_every": 2, "seed": 3})
    return build_trial(cfg)


def tiny_femnist_run(model: tuple, backend: str = "sequential"):
    """(trial, final state) of that trial with the CNN's options ``model`` (items) on ``backend``."""
    trial = femnist_like_trial()
    options = {k: v for k, v in model if k != "name"}
    flat, _ = build_model("cnn_femnist", options, trial.dataset.input_shape, trial.dataset.num_classes,
                          trial.dataset.task, 0, trial.device)
    cfg = dataclasses.replace(trial.cfg, backend=backend, model=dict(model))
    variant = dataclasses.replace(trial, cfg=cfg, model=flat, backend=Backend(flat, backend == "batched"))
    return variant, simulate(variant)[0]


REFERENCE_RUN = tuple(REFERENCE_DROPOUT.items())


@pytest.mark.slow  # FEMNIST's CNN trained on mnist_5k
def test_dropout_runs_agree_between_backends_and_repeat_exactly():
    _, seq = tiny_femnist_run(REFERENCE_RUN, "sequential")
    _, bat = tiny_femnist_run(REFERENCE_RUN, "batched")
    _, again = tiny_femnist_run(REFERENCE_RUN, "sequential")
    _, plain = tiny_femnist_run((("name", "cnn_femnist"),), "sequential")
    torch.testing.assert_close(bat.w, seq.w, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(bat.clients["personal"], seq.clients["personal"], rtol=1e-4, atol=1e-5)
    assert torch.equal(again.w, seq.w) and json.dumps(seq.history) == json.dumps(again.history)  # (NaN == NaN)
    assert not torch.allclose(plain.w, seq.w)


@pytest.mark.slow  # FEMNIST's CNN trained on mnist_5k
def test_eval_dropout_changes_evaluation_only_and_every_evaluation_path_agrees():
    trial, standard = tiny_femnist_run(REFERENCE_RUN)
    _, reference = tiny_femnist_run((*REFERENCE_RUN, ("eval_dropout", True)))
    assert torch.equal(reference.w, standard.w)  # training draws the same masks
    assert reference.history[-1]["loss_mean"] != standard.history[-1]["loss_mean"]
    personal = standard.clients["personal"]
    loop = evaluate(trial.model, personal, trial.test, 10, per_client_loop=True, key=123)
    batched = evaluate(trial.model, personal, trial.test, 10, per_client_loop=False, key=123)
    shared = evaluate(trial.model, standard.w, trial.test, 10, key=123)
    shared_rows = evaluate(trial.model, standard.w.expand(10, -1), trial.test, 10, per_client_loop=True, key=123)
    # each the exact (float64) evaluation with the same masks, up to float32 rounding (float32_bounds): correct
    # counts differ at most by the samples within rounding of a tie (~7% of this 2-round CNN's test samples)
    n = len(trial.test.y)
    assert assert_counts_agree([loop, batched], trial.model, personal, trial.test, 10, key=123) <= 0.12 * n
    assert assert_counts_agree([shared, shared_rows], trial.model, standard.w, trial.test, 10, key=123) <= 0.12 * n
