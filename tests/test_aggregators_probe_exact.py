"""DeepSight's probe, exactly (the mutation score of ``methods/aggregators/probe.py``: docs/testing.md): the noise
sets recomputed from their keys in the stream AGGREGATE (2**31 - 16 + index) and the box, the forward passes of
4096 inputs, the least class count accepted and the one below, and each refusal word for word."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fedarena.datasets.pixels import PIXELS, PixelScale
from fedarena.errors import ConfigError
from fedarena.methods.aggregators.probe import Probe, digest
from fedarena.models.functional import FlatModel

CPU = torch.device("cpu")
F64 = torch.float64


def tiny_dataset(classes=3, shape=(2, 3), std=None, mode="channel"):
    """What ``Probe.of`` reads of a dataset: its classes, input shape, name and pixel scale (raw 0..16)."""
    std = np.full(shape, 2.0, dtype=np.float32) if std is None else np.asarray(std, dtype=np.float32)
    mean = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    scale = PixelScale(mean=mean, std=std, white=16.0, mode=mode)
    return SimpleNamespace(name="tiny", num_classes=classes, input_shape=shape, meta={PIXELS: scale}, clients=[])


def linear(classes=3, inputs=6):
    return FlatModel(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(inputs, classes)), "classification")


def expected_noise(seed, index, samples, shape):
    """The index-th noise set by hand: torch.rand seeded from numpy's stream [seed, AGGREGATE = 7, 2**31 - 16 +
    index], spread over [black, white] = [(0 - mean) / std, (16 - mean) / std] pixel by pixel."""
    gen = torch.Generator().manual_seed(int(np.random.default_rng([seed, 7, 2**31 - 16 + index]).integers(2**62)))
    noise = torch.rand(samples, int(np.prod(shape)), generator=gen)
    mean = torch.arange(np.prod(shape), dtype=torch.float32)
    low, high = (0.0 - mean) / 2.0, (16.0 - mean) / 2.0
    return (low + (high - low) * noise).reshape(samples, *shape)


@pytest.mark.parametrize("index", [0, 5])
def test_each_noise_set_is_drawn_from_its_own_key_in_the_stream_aggregate(index):
    probe = Probe.of(linear(), tiny_dataset(), seed=11, device=CPU, rule="deepsight")
    x = probe.inputs(index, 4)
    assert x.shape == (4, 2, 3)
    torch.testing.assert_close(x, expected_noise(11, index, 4, (2, 3)), rtol=0, atol=0)
    assert probe.inputs(index, 4) is x  # drawn once, then kept


def test_the_probabilities_are_the_softmax_of_the_model_on_the_noise_set():
    model = linear()
    probe = Probe.of(model, tiny_dataset(), seed=2, device=CPU, rule="deepsight")
    params = torch.linspace(-1.0, 1.0, model.dim, dtype=F64)
    weight, bias = params[:18].reshape(3, 6), params[18:]
    x = expected_noise(2, 1, 5, (2, 3)).reshape(5, 6).double()
    logits = x @ weight.T + bias
    by_hand = logits.exp() / logits.exp().sum(1, keepdim=True)
    torch.testing.assert_close(probe.probabilities(params, 1, 5), by_hand)


class Recorder:
    """A model that notes how many inputs each forward pass gets (and answers 1/2, 1/2)."""

    def __init__(self):
        self.passes = []

    def forward(self, params, x):
        self.passes.append(len(x))
        return torch.zeros(len(x), 2, dtype=params.dtype)


@pytest.mark.parametrize("samples, passes", [(4096, [4096]), (4097, [4096, 1]), (8193, [4096, 4096, 1])])
def test_the_probe_runs_at_most_4096_inputs_per_forward_pass(samples, passes):
    model = Recorder()
    probe = Probe(model, (1,), torch.zeros(1), torch.ones(1), seed=0, device=CPU)
    p = probe.probabilities(torch.zeros(3, dtype=F64), 0, samples)
    assert model.passes == passes
    assert p.shape == (samples, 2) and bool((p == 0.5).all())


def test_two_classes_are_enough():
    probe = Probe.of(linear(classes=2), tiny_dataset(classes=2), seed=0, device=CPU, rule="deepsight")
    assert probe.shape == (2, 3) and probe.seed == 0


@pytest.mark.parametrize("module, task, classes", [
    (torch.nn.Linear(6, 1), "classification", 1),
    (torch.nn.Linear(6, 2), "binary_pm1", 2),
])
def test_one_class_or_another_task_is_refused_in_words(module, task, classes):
    with pytest.raises(ConfigError) as err:
        Probe.of(FlatModel(module, task), tiny_dataset(classes=classes), 0, CPU, "deepsight")
    assert str(err.value) == ("aggregator 'deepsight' compares the models' class probabilities: it needs a "
                              f"classification task of 2 or more classes; got a {task} task of {classes} classes")


@pytest.mark.parametrize("module, end", [
    (torch.nn.Linear(6, 4, bias=False), "[(4, 6)]"),  # one parameter: no weight and bias to read
    (torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.LayerNorm(4)), "[(4,), (4,)]"),  # a 1-D "weight"
    (torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4, bias=False)), "[(4,), (4, 4)]"),
    (torch.nn.Linear(6, 5), "[(5, 6), (5,)]"),  # five outputs for four classes
])
def test_a_model_without_the_output_layer_is_refused_naming_its_last_two_shapes(module, end):
    with pytest.raises(ConfigError) as err:
        Probe.of(FlatModel(module, "classification"), tiny_dataset(classes=4), 0, CPU, "deepsight")
    assert str(err.value) == ("aggregator 'deepsight' reads the output layer's weight [4, inputs] and bias [4], the "
                              f"model's last two parameters; this model's end in {end}")


def test_a_pixel_that_never_varies_is_refused_naming_the_probe():
    data = tiny_dataset(shape=(3,), std=[2.0, 1e-8, 2.0], mode="pixel")
    with pytest.raises(ConfigError) as err:
        Probe.of(linear(inputs=3), data, 0, CPU, "deepsight")
    assert str(err.value) == ("aggregator 'deepsight''s probe of uniform noise images changes raw pixels, but 1 of the "
                              "values it touches never vary in dataset 'tiny', standardised pixel by pixel (normalize: "
                              "pixel): a raw change there is ~2e+09 input units. Use normalize: channel, or a trigger "
                              "elsewhere")


def test_the_digest_tells_tensors_apart_by_their_values_dtype_and_shape():
    a = torch.arange(6, dtype=F64)
    one_ulp = a.clone()
    one_ulp[5] = torch.nextafter(a[5], torch.tensor(10.0, dtype=F64))
    assert digest(a) == digest(a.clone()) and len(digest(a)) == 20
    assert len({digest(t) for t in (a, one_ulp, a.float(), a.reshape(2, 3))}) == 4
    assert digest(a[::2]) == digest(a[::2].contiguous())  # a strided view: its values, not its storage


def test_the_memo_is_kept_for_one_global_model_and_emptied_when_it_changes():
    probe = Probe(Recorder(), (1,), torch.zeros(1), torch.ones(1), seed=0, device=CPU)
    w = torch.zeros(3, dtype=F64)
    probe.memo(w)["kept"] = 1
    assert probe.memo(w.clone()) == {"kept": 1}  # the same model, by its values
    assert probe.memo(w + 1) == {} and probe.memo(w) == {}  # a new round's model: only its own results
