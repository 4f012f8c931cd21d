"""Evaluation of personal models under a byte budget: the tensor meter, the chunking, unchanged counts, peak memory."""

import numpy as np
import pytest
import torch
from float32_bounds import assert_counts_agree

from fedarena.models.functional import build_model
from fedarena.simulation import evaluate as evaluate_module
from fedarena.simulation.data import Pooled
from fedarena.simulation.engine import simulate
from fedarena.simulation.evaluate import EVAL_CHUNK, _rows, client_chunks, evaluate, shared_chunk, vmap_costs
from fedarena.simulation.setup import build_trial
from fedarena.simulation.tensor_memory import TensorMemory

CPU = torch.device("cpu")


def tiny_pooled(sizes: list[int], features: int = 4, classes: int = 3, seed: int = 0) -> Pooled:
    """Clients with ``sizes`` random samples each, pooled in client order."""
    gen = torch.Generator().manual_seed(seed)
    counts = np.array(sizes, dtype=np.int64)
    x = torch.randn(int(counts.sum()), features, generator=gen)
    y = torch.randint(0, classes, (int(counts.sum()),), generator=gen)
    owner = torch.repeat_interleave(torch.arange(len(sizes)), torch.as_tensor(counts))
    return Pooled(x, y, np.concatenate([[0], np.cumsum(counts)[:-1]]), counts, owner)


def tiny_mlp(features: int = 4, hidden: int = 5, classes: int = 3):
    return build_model("mlp", {"hidden": [hidden]}, (features,), classes, "classification", 0, CPU)[0]


def test_meter_counts_new_storages_once_and_frees_them():
    # Prepare: 1000 float32 = 4000 bytes; 250 float64 = 2000 bytes
    with TensorMemory() as meter:
        # Execute
        a = torch.empty(1000)
        view = a[::2]  # a view: no new storage
        a.add_(1.0)  # in place: no new storage
        b = a + 1  # 4000 more
        at_two = meter.current
        del b
        c = torch.empty(250, dtype=torch.float64)
        del view
        at_end = meter.current
    # Assert
    assert (at_two, at_end, meter.peak, meter.allocated) == (8000, 6000, 8000, 10000)
    assert a.numel() + c.numel() == 1250


def test_meter_counts_resident_tensors_and_their_release():
    # Prepare: a tensor alive before the block
    resident = torch.empty(2500)  # 10,000 bytes
    # Execute
    with TensorMemory(resident=True) as meter:
        at_entry = meter.current
        del resident
        after = meter.current
    # Assert
    assert at_entry - after == 10000


def test_meta_tensors_count_only_when_asked():
    # Prepare / Execute: 100 float32 on the meta device, under a plain meter nested in a meta-counting one
    with TensorMemory(meta=True) as tracing:
        with TensorMemory() as plain:
            shadow = torch.empty(100, device="meta")
    # Assert
    assert (plain.allocated, tracing.allocated) == (0, 400) and shadow.numel() == 100


def test_chunks_respect_the_budget_and_keep_one_client_at_least():
    # Prepare: sizes 3, 1, 2, 5 -> ascending order 1, 2, 0, 3; a gathered client costs 10 bytes, a viewed one 4,
    # a padded sample 1. {1, 2} is a range (view): 2 * (4 + 2) = 12 <= 20; adding 0 breaks it: 3 * (10 + 3) = 39;
    # {0, 3} is not a range: 2 * (10 + 5) = 30 > 20; alone, client 3 costs 1 * (10 + 5) = 15 <= 20.
    sizes = np.array([3, 1, 2, 5])
    # Execute
    chunks = client_chunks(sizes, 10, 4, 1, 20)
    tight = client_chunks(sizes, 10, 4, 1, 1)
    loose = client_chunks(sizes, 10, 4, 1, 10**6)
    # Assert
    assert [c.tolist() for c in chunks] == [[1, 2], [0], [3]]
    assert [c.tolist() for c in tight] == [[1], [2], [0], [3]]  # each alone over the budget still runs
    assert [c.tolist() for c in loose] == [[1, 2, 0, 3]]


def test_a_contiguous_range_of_clients_is_a_view_and_others_a_copy():
    # Prepare
    params = torch.arange(12.0).reshape(6, 2)
    # Execute
    ranged, scattered = _rows(params, np.array([2, 3, 4])), _rows(params, np.array([1, 3]))
    # Assert
    assert ranged.untyped_storage().data_ptr() == params.untyped_storage().data_ptr()
    assert scattered.untyped_storage().data_ptr() != params.untyped_storage().data_ptr()
    assert torch.equal(ranged, params[2:5]) and torch.equal(scattered, params[[1, 3]])


@pytest.mark.parametrize("sizes", [[3, 1, 4, 1, 5, 9, 2, 6, 5, 3], [4] * 10], ids=["gathered", "contiguous"])
@pytest.mark.parametrize("budget", [1, 3000, 10**9])
def test_vmap_chunks_give_the_per_client_loop_counts(sizes, budget):
    # Prepare
    model, pooled = tiny_mlp(), tiny_pooled(sizes)
    params = torch.randn(len(sizes), model.dim, generator=torch.Generator().manual_seed(1))
    # Execute
    loop = evaluate(model, params, pooled, 3, per_client_loop=True)
    chunked = evaluate(model, params, pooled, 3, per_client_loop=False, budget_bytes=budget)
    # Assert: both are the exact (float64) counts up to float32 rounding, in any summation order (float32_bounds);
    # no sample of these inputs is near a tie, so the correct counts are equal
    assert assert_counts_agree([loop, chunked], model, params, pooled, 3) == 0


def test_trained_personal_models_score_the_same_in_small_chunks(small_config):
    # Prepare: Ditto's personal models after a few rounds on digits
    trial = build_trial(small_config(method={"name": "ditto", "lam": 0.1}, rounds=2, eval_every=2))
    state, _ = simulate(trial)
    personal = state.clients["personal"]
    # Execute: a budget of a few clients' rows per chunk
    loop = evaluate(trial.model, personal, trial.test, 10, per_client_loop=True)
    chunked = evaluate(trial.model, personal, trial.test, 10, per_client_loop=False,
                       budget_bytes=3 * personal[0].nbytes)
    # Assert: both are the exact counts up to float32 rounding; correct counts may differ only by the samples
    # within rounding of a tie, a few of these barely trained models' test samples (float32_bounds)
    near_ties = assert_counts_agree([loop, chunked], trial.model, personal, trial.test, 10)
    assert near_ties <= 0.05 * len(trial.test.y)


def test_evaluation_peak_stays_within_the_budget():
    # Prepare: 300 clients of 1,283-parameter MLPs (5,132-byte rows, a 1.5 MB table); 1-8 samples each
    model = tiny_mlp(features=16, hidden=64)
    pooled = tiny_pooled([1 + k % 8 for k in range(300)], features=16)
    params = torch.randn(300, model.dim, generator=torch.Generator().manual_seed(2))
    budget = 2**18
    sums_bytes = 8 * (2 * 300 * 3 + 300)  # the float64 counts, allocated once beside the chunks
    # Execute
    with TensorMemory() as meter:
        evaluate(model, params, pooled, 3, per_client_loop=False, budget_bytes=budget)
    # Assert: the budget holds (it would not with one chunk of every client: the gathered rows alone are 1.5 MB)
    assert meter.peak <= budget + sums_bytes
    assert params.nbytes > 5 * (budget + sums_bytes)


def test_shared_chunk_is_the_most_samples_under_the_budget_within_eval_chunk():
    # Execute / Assert: hand-computed (budget 1,000 bytes)
    assert shared_chunk(300, 1000) == 3
    assert shared_chunk(5000, 1000) == 1  # one sample over the budget still runs
    assert shared_chunk(1, 1000) == 1000
    assert shared_chunk(0, 2**40) == EVAL_CHUNK


def test_one_shared_model_in_budgeted_passes_scores_as_in_one_pass(monkeypatch):
    # Prepare: 40 clients, 2-9 samples each, one shared MLP
    model = tiny_mlp(features=16, hidden=64)
    pooled = tiny_pooled([2 + k % 8 for k in range(40)], features=16)
    params = torch.randn(model.dim, generator=torch.Generator().manual_seed(3))
    whole = evaluate(model, params, pooled, 3)
    # Execute: a budget of a few samples per forward pass
    monkeypatch.setattr(evaluate_module, "SHARED_EVAL_BYTES", 4 * vmap_costs(model, params, pooled, 3, None).per_sample)
    with TensorMemory() as meter:
        passes = evaluate(model, params, pooled, 3)
    # Assert: the same counts up to float32 rounding (float32 sums of other batchings differ in their last bits
    # on some CPUs; float32_bounds), no sample near a tie; the working set stays within the budget (+ the counts)
    assert assert_counts_agree([passes, whole], model, params, pooled, 3) == 0
    assert meter.peak <= evaluate_module.SHARED_EVAL_BYTES + 8 * (2 * 40 * 3 + 40)


def test_models_of_one_architecture_share_their_measured_vmap_costs(monkeypatch):
    # Prepare: count the meta-device traces; two models built alike (other seeds), one of another width
    traces = []
    real_trace = evaluate_module._traced_bytes
    monkeypatch.setattr(evaluate_module, "_traced_bytes", lambda *args: traces.append(args[0]) or real_trace(*args))
    monkeypatch.setattr(evaluate_module, "_COSTS", {})
    pooled = tiny_pooled([3, 4], features=4)
    first, second = (build_model("mlp", {"hidden": [6]}, (4,), 3, "classification", s, CPU)[0] for s in (1, 2))
    other = tiny_mlp(hidden=7)
    # Execute
    costs = [vmap_costs(m, torch.zeros(m.dim), pooled, 3, None) for m in (first, second, other)]
    # Assert: the second model reuses the first one's three traces; the wider one is measured anew, and costs more
    assert traces == [first] * 3 + [other] * 3
    assert costs[1] == costs[0] and costs[2].per_sample > costs[0].per_sample
