"""fedarena/attacks/mimic.py checked against hand computations, one behaviour per test: each device's data summary
(label histogram or mean input, and the pooled one), the ranking by distance to the pooled data (malicious last,
ties to the lower id), the copied row and the registry entry (make mutants MODULE=fedarena/attacks/mimic.py)."""

import numpy as np
import torch

from fedarena.attacks.base import ATTACKS, attack_reads
from fedarena.attacks.mimic import data_summary, mimic, mimicked_updates, outlier_ranking
from fedarena.datasets.base import ClientData, FederatedDataset, Split


def dataset(labels, task="classification", num_classes=2, inputs=None):
    """One client per entry of ``labels``; inputs [n, 2] (``inputs[k]`` where given, else zeros)."""
    clients = []
    for k, y in enumerate(labels):
        y = torch.as_tensor(y, dtype=torch.long if task == "classification" else torch.float32)
        x = torch.zeros(len(y), 2) if inputs is None else torch.as_tensor(inputs[k], dtype=torch.float32)
        clients.append(ClientData(Split(x, y), Split(x, y), Split(x, y)))
    return FederatedDataset("tiny", clients, num_classes, (2,), "fp", task)


def test_a_classification_summary_is_each_label_histogram_then_the_pooled_one():
    # Prepare: 3 classes; devices of 3, 1 and no samples
    ds = dataset([[0, 0, 1], [2], []], num_classes=3)
    # Assert: histograms over the samples (a one-sample device: its one-hot; none: zeros), pooled by sample counts
    expected = [[2 / 3, 1 / 3, 0], [0, 0, 1], [0, 0, 0], [0.5, 0.25, 0.25]]
    np.testing.assert_allclose(data_summary(ds), expected, rtol=1e-15, atol=0)


def test_the_pooled_histogram_of_a_single_sample_is_that_sample():
    assert data_summary(dataset([[1], []], num_classes=3)).tolist() == [[0, 1, 0], [0, 0, 0], [0, 1, 0]]


def test_other_tasks_and_label_sets_summarise_the_mean_input():
    inputs = [[[1.0, 2.0], [3.0, 6.0]], [[-1.0, 0.5]], np.zeros((0, 2))]
    # Assert: the mean input (2 features), zeros without samples, pooled by sample counts
    expected = [[2.0, 4.0], [-1.0, 0.5], [0.0, 0.0], [1.0, 8.5 / 3]]
    regression = dataset([[0.5, 1.5], [2.0], []], task="regression", num_classes=1, inputs=inputs)
    np.testing.assert_allclose(data_summary(regression), expected, rtol=1e-15, atol=0)
    # a classification dataset with label sets (2-D labels) has no histogram either
    sets = dataset([[[1, 0], [0, 1]], [[1, 1]], torch.zeros(0, 2, dtype=torch.long)], inputs=inputs)
    np.testing.assert_allclose(data_summary(sets), expected, rtol=1e-15, atol=0)


def test_devices_rank_by_their_l1_distance_to_the_pooled_histogram_furthest_first():
    # Prepare: histograms [0, 1], [1, 0], [1/3, 2/3], [1/2, 1/2]; pooled (4 of 12 zeros) [1/3, 2/3]: distances
    # 2/3, 4/3, 0, 1/3
    ds = dataset([[1, 1, 1, 1], [0], [0, 1, 1], [0, 0, 1, 1]])
    # Execute / Assert: device 1 first, then 0, 3 and 2
    assert outlier_ranking(ds, np.zeros(4, dtype=bool)).tolist() == [1, 0, 3, 2]


def test_malicious_devices_rank_last_and_ties_go_to_the_lower_id():
    # Prepare: histograms [1, 0], [.5, .5], [0, 1], [.75, .25]; pooled [.7, .3]: distances 0.6, 0.4, 1.4, 0.1
    ds = dataset([[0, 0, 0], [0, 1], [1], [0, 0, 0, 1]])
    # Assert: device 2 (furthest) malicious ranks last; devices 0 and 1 malicious: both last, 0 before 1
    assert outlier_ranking(ds, np.array([False, False, True, False])).tolist() == [0, 1, 3, 2]
    assert outlier_ranking(ds, np.array([True, True, False, False])).tolist() == [2, 3, 0, 1]
    # equal data: every distance 0, the ids' order
    assert outlier_ranking(dataset([[0, 1]] * 3), np.zeros(3, dtype=bool)).tolist() == [0, 1, 2]


def test_every_malicious_row_copies_the_rounds_highest_ranked_honest_device():
    # Prepare: rows of devices 5, 2, 0, 3; rows 0 and 2 malicious; ranks: device 2 is 0, device 3 is 1
    updates = torch.arange(12, dtype=torch.float64).reshape(4, 3)
    bad = torch.tensor([True, False, True, False])
    rank = torch.tensor([4, 3, 0, 1, 5, 2])
    # Execute
    out = mimicked_updates(updates, bad, torch.Generator(), ids=torch.tensor([5, 2, 0, 3]), rank=rank)
    # Assert: rows 0 and 2 become row 1 (device 2); the honest rows stay
    assert out.tolist() == [[3.0, 4.0, 5.0], [3.0, 4.0, 5.0], [3.0, 4.0, 5.0], [9.0, 10.0, 11.0]]
    # one honest row is copied; none leaves the round as it is
    one = mimicked_updates(updates, torch.tensor([True, True, False, True]), torch.Generator(),
                           ids=torch.tensor([5, 2, 0, 3]), rank=rank)
    assert one.tolist() == [[6.0, 7.0, 8.0]] * 4
    assert mimicked_updates(updates, torch.ones(4, dtype=torch.bool), torch.Generator(), ids=torch.arange(4),
                            rank=rank) is updates


def test_mimic_is_registered_reading_honest_updates_and_device_data_and_tampers_by_id():
    assert ATTACKS.get("mimic") is mimic
    assert attack_reads({"name": "mimic", "level": 0.2}) == ("honest_updates", "device_data")
    ds = dataset([[1, 1, 1, 1], [0], [0, 1, 1], [0, 0, 1, 1]])
    effect = mimic(ds, np.array([False, False, False, True]), np.random.default_rng(0))
    assert effect.needs_ids and effect.dataset is ds
    assert effect.tamper.keywords["rank"].tolist() == [1, 0, 2, 3]
    out = effect.tamper(torch.eye(3, dtype=torch.float64), torch.tensor([True, False, False]), torch.Generator(),
                        ids=torch.tensor([3, 0, 2]))
    assert out.tolist() == [[0.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]  # device 0 outranks device 2
