"""fedarena/attacks/label_flip.py checked against the labels written out by hand or drawn again from the same seed,
one behaviour per test: each task's labels (multi-label sets included), the refusals word for word, and the
registry entry (make mutants MODULE=fedarena/attacks/label_flip.py)."""

import numpy as np
import pytest
import torch

from fedarena.attacks.base import ATTACKS, attack_reads
from fedarena.attacks.label_flip import label_poisoning, poison_dataset, poisoned_labels, random_label_sets
from fedarena.datasets.base import ClientData, FederatedDataset, Split
from fedarena.errors import ConfigError


def dataset(labels, task, num_classes):
    """One client per entry of ``labels`` (train labels as given; val and test a copy of them)."""
    clients = []
    for k, y in enumerate(labels):
        x = torch.full((len(y), 2), float(k))
        clients.append(ClientData(Split(x, y), Split(x, y.clone()), Split(x, y.clone())))
    return FederatedDataset("tiny", clients, num_classes, (2,), "fp", task)


def test_plus_minus_one_labels_are_negated():
    y = torch.tensor([1.0, -1.0, -1.0, 1.0])
    assert poisoned_labels(y, "binary_pm1", 2, np.random.default_rng(0)).tolist() == [-1.0, 1.0, 1.0, -1.0]


def test_two_class_labels_are_one_minus_y():
    y = torch.tensor([0, 1, 1, 0, 1])
    assert poisoned_labels(y, "classification", 2, np.random.default_rng(0)).tolist() == [1, 0, 0, 1, 0]


@pytest.mark.parametrize("num_classes", [3, 10])
def test_more_classes_draw_each_label_uniformly_from_0_to_c_less_one(num_classes):
    # Execute: 40 labels of class 1
    y = torch.ones(40, dtype=torch.long)
    out = poisoned_labels(y, "classification", num_classes, np.random.default_rng(5))
    # Assert: the draws of integers(0, C) from the same seed, in y's dtype (0 among them)
    expected = np.random.default_rng(5).integers(0, num_classes, size=40)
    assert out.tolist() == expected.tolist() and out.dtype == torch.long and 0 in out.tolist()


def test_a_multilabel_sample_gets_as_many_tags_as_it_had_at_random_places():
    # Prepare: 3 samples of 6 tags holding 2, 0 and 6 of them
    y = torch.tensor([[1, 0, 1, 0, 0, 0], [0] * 6, [1] * 6], dtype=torch.float32)
    # Execute
    out = poisoned_labels(y, "multilabel", 6, np.random.default_rng(9))
    # Assert: the places rng.choice(6, count, replace=False) draws, row by row, as 1.0 in y's dtype
    rng, expected = np.random.default_rng(9), np.zeros((3, 6), dtype=np.float32)
    for i, count in enumerate([2, 0, 6]):
        expected[i, rng.choice(6, size=count, replace=False)] = 1.0
    assert out.tolist() == expected.tolist() and out.dtype == torch.float32
    assert out.sum(1).tolist() == [2.0, 0.0, 6.0]


def test_label_sets_of_a_sample_with_many_tags_never_repeat_a_place():
    # Prepare: 5 samples of 4 tags each holding 3 (with replacement, a place would often be drawn twice)
    y = torch.tensor([[1, 1, 1, 0]] * 5, dtype=torch.float64)
    out = random_label_sets(y, np.random.default_rng(1))
    assert out.sum(1).tolist() == [3.0] * 5 and set(out.flatten().tolist()) == {0.0, 1.0}
    assert out.dtype == torch.float64 and out.shape == (5, 4)


def test_a_task_without_classes_is_refused_in_words():
    with pytest.raises(ConfigError) as err:
        poisoned_labels(torch.zeros(3), "regression", 1, np.random.default_rng(0))
    assert str(err.value) == "label poisoning (a1) needs a classification task; this dataset's is 'regression'"
    with pytest.raises(ConfigError) as err:
        poison_dataset(dataset([torch.zeros(3)], "regression", 1), np.array([True]), np.random.default_rng(0))
    assert str(err.value) == ("label poisoning needs a classification dataset; 'tiny' has task 'regression' (use a "
                              "model attack such as a2 or a3 instead)")


@pytest.mark.parametrize("task, labels, poisoned", [
    ("classification", torch.tensor([0, 1]), [1, 0]),
    ("binary_pm1", torch.tensor([1.0, -1.0]), [-1.0, 1.0]),
    ("multilabel", torch.tensor([[1.0, 1.0], [1.0, 1.0]]), [[1.0, 1.0], [1.0, 1.0]]),
])
def test_every_labelled_task_is_poisoned_on_the_malicious_devices_only(task, labels, poisoned):
    # Execute: devices 0 and 2 malicious
    ds = dataset([labels, labels.clone(), labels.clone()], task, 2)
    out = poison_dataset(ds, np.array([True, False, True]), np.random.default_rng(0))
    # Assert: their training labels poisoned, inputs, validation and test kept; device 1 untouched
    for k in (0, 2):
        assert out.clients[k].train.y.tolist() == poisoned
        assert out.clients[k].train.x is ds.clients[k].train.x and out.clients[k].val is ds.clients[k].val
    assert out.clients[1] is ds.clients[1] and out.num_clients == 3 and out.task == task


def test_a1_is_registered_reading_nothing_of_other_devices_and_poisons_before_training():
    assert ATTACKS.get("a1") is label_poisoning and attack_reads({"name": "a1", "level": 0.5}) == ()
    ds = dataset([torch.tensor([0, 1, 1]), torch.tensor([1, 0])], "classification", 2)
    effect = label_poisoning(ds, np.array([False, True]), np.random.default_rng(0))
    assert effect.dataset.clients[1].train.y.tolist() == [0, 1] and effect.dataset.clients[0] is ds.clients[0]
    assert effect.tamper is None and effect.corrupt is None
