"""Targeted attacks (BadNets, DBA, model replacement, Neurotoxin, targeted label flip) and the attack success
rate: hand-checkable triggers and labels, DBA's parts, the boost, Neurotoxin's mask, ASR on a tiny model,
bad input as one error before training, and end to end on digits."""

import json

import numpy as np
import pytest
import torch

from fedarena.attacks import ATTACKS
from fedarena.attacks.backdoor import make_patch
from fedarena.cli import main
from fedarena.config import ExperimentConfig
from fedarena.datasets.base import ClientData, FederatedDataset, Split
from fedarena.datasets.pixels import PIXELS, PixelScale, raw_to_input
from fedarena.errors import ConfigError
from fedarena.simulation.experiment import run_experiment
from fedarena.simulation.metrics import Counts, client_table, compute_metrics
from fedarena.simulation.setup import build_trial


def images(n: int, label: int, size: int = 4) -> Split:
    """n zero 1 x size x size images of one label."""
    return Split(torch.zeros(n, 1, size, size), torch.full((n,), label))


def tiny(labels=(1, 2, 3)) -> FederatedDataset:
    """Three devices of 4 x 4 single-channel images; device k's training and test samples have label k + 1; raw
    pixels 0-10 kept as they are (a raw value v of the range is 10 v in the inputs)."""
    clients = [ClientData(images(4, lab), images(2, lab), images(3, lab)) for lab in labels]
    scale = PixelScale(np.zeros(1, dtype=np.float32), np.ones(1, dtype=np.float32), 10.0, "channel")
    return FederatedDataset("tiny", clients, 4, (1, 4, 4), "fp", "classification", meta={PIXELS: scale})


def effect(name: str, dataset=None, malicious=(False, True, True), **params):
    dataset = dataset or tiny()
    return ATTACKS.get(name)(dataset, np.array(malicious), np.random.default_rng(0), **params)


def test_badnets_stamps_the_patch_on_a_fraction_of_malicious_samples_and_relabels_them():
    # Execute: a 2 x 2 patch of raw value 0.5 (5 in the inputs) in the bottom-right corner, half of each malicious
    # device's 4 samples
    out = effect("badnets", target=0, size=2, value=0.5, poison_fraction=0.5)
    # Assert
    corner = torch.zeros(4, 4)
    corner[2:, 2:] = 5.0
    benign, bad = out.dataset.clients[0].train, out.dataset.clients[1].train
    assert torch.equal(benign.x, torch.zeros(4, 1, 4, 4)) and benign.y.tolist() == [1] * 4
    stamped = [bool(torch.equal(x[0], corner)) for x in bad.x]
    assert sum(stamped) == 2 and all(bool(x.abs().sum() == 0) for x, s in zip(bad.x, stamped, strict=True) if not s)
    assert [int(y) for y, s in zip(bad.y, stamped, strict=True) if s] == [0, 0] and sorted(bad.y.tolist()) == [0, 0, 2, 2]
    assert torch.equal(out.dataset.clients[1].test.x, torch.zeros(3, 1, 4, 4))  # test data stays clean


def test_the_backdoor_test_view_triggers_the_non_target_samples_and_relabels_them():
    out = effect("badnets", target=2, size=1, position=[0, 3], value=0.7)
    view = out.backdoor.test_view(tiny())
    assert [len(c.test) for c in view.clients] == [3, 0, 3]  # device 1's samples are already label 2
    assert view.clients[0].test.y.tolist() == [2, 2, 2]
    assert view.clients[0].test.x[:, 0, 0, 3].tolist() == [7.0] * 3 and float(view.clients[0].test.x.sum()) == 21.0


def test_dba_parts_union_to_the_whole_trigger_and_attackers_stamp_their_own():
    dataset = tiny()
    patch = make_patch(dataset, "dba", 2, "top_left", 0.1)
    parts = patch.parts(4)
    assert sorted(p for part in parts for p in part) == sorted(patch.pixels) and all(len(p) == 1 for p in parts)
    out = effect("dba", dataset, size=2, position="top_left", value=0.1, parts=4, poison_fraction=1.0)
    first, second = (out.dataset.clients[k].train.x[0, 0] for k in (1, 2))  # malicious ranks 0 and 1
    assert torch.nonzero(first).tolist() == [[0, 0]] and torch.nonzero(second).tolist() == [[0, 1]]
    assert torch.nonzero(out.backdoor.stamp(torch.zeros(1, 1, 4, 4))[0, 0]).tolist() == [[0, 0], [0, 1], [1, 0],
                                                                                             [1, 1]]


def test_model_replacement_boosts_by_the_round_size_over_its_attackers_or_the_given_factor_within_the_bound():
    updates = torch.tensor([[1.0, 0.0], [0.0, 1.0], [3.0, 4.0]])
    bad = torch.tensor([False, False, True])
    gen = torch.Generator()
    assert effect("model_replacement").tamper(updates, bad, gen)[2].tolist() == [9.0, 12.0]  # x n / k = 3 / 1
    two = torch.tensor([[1.0, 0.0], [3.0, 4.0], [3.0, 4.0], [0.0, 1.0]])
    both = torch.tensor([False, True, True, False])
    # two attackers of four: each boosts by 4 / 2, so together they replace the model once, not twice
    assert effect("model_replacement").tamper(two, both, gen)[1:3].tolist() == [[6.0, 8.0], [6.0, 8.0]]
    assert effect("model_replacement", boost=2.0).tamper(updates, bad, gen)[2].tolist() == [6.0, 8.0]
    bounded = effect("model_replacement", boost=2.0, max_norm=5.0).tamper(updates, bad, gen)
    torch.testing.assert_close(bounded[2], torch.tensor([3.0, 4.0]))
    assert torch.equal(bounded[:2], updates[:2])


def test_neurotoxin_masks_the_benign_mean_largest_coordinates():
    # benign mean (2, -0.1, 0.5, -3): the top half by magnitude are coordinates 3 and 0
    updates = torch.tensor([[2.0, -0.2, 0.5, -3.0], [2.0, 0.0, 0.5, -3.0], [1.0, 1.0, 1.0, 1.0]])
    bad = torch.tensor([False, False, True])
    out = effect("neurotoxin", top_fraction=0.5).tamper(updates, bad, torch.Generator())
    assert out[2].tolist() == [0.0, 1.0, 1.0, 0.0] and torch.equal(out[:2], updates[:2])


def test_targeted_flip_relabels_the_source_class_of_malicious_devices_only():
    out = effect("targeted_flip", tiny((1, 1, 2)), source=1, target=3)
    assert out.dataset.clients[0].train.y.tolist() == [1] * 4  # benign
    assert out.dataset.clients[1].train.y.tolist() == [3] * 4  # malicious, source class
    assert out.dataset.clients[2].train.y.tolist() == [2] * 4  # malicious, other class
    assert out.backdoor.stamp is None and [len(c.test) for c in out.backdoor.test_view(tiny((1, 1, 2))).clients] == [
        3, 3, 0]


def test_asr_is_the_share_of_triggered_benign_samples_predicted_as_the_target():
    # Prepare: test counts of 3 clients (client 2 malicious); the backdoor view: client 0 has 4 eligible
    # samples, 3 predicted as the target; client 1 has 2, 0 predicted; client 2 (malicious) 5 of 5
    test = Counts(np.array([[3.0], [2.0], [1.0]]), np.array([[4.0], [2.0], [5.0]]), np.zeros(3))
    backdoor = Counts(np.array([[3.0], [0.0], [5.0]]), np.array([[4.0], [2.0], [5.0]]), np.zeros(3))
    malicious = np.array([False, False, True])
    # Execute
    metrics = compute_metrics(Counts(test.correct, test.total, test.loss_sum, backdoor), malicious, False)
    # Assert: pooled 3 / 6, mean (0.75 + 0) / 2, worst 10% of 2 benign clients = the highest, 0.75
    assert metrics["asr_pooled"] == 0.5 and metrics["asr_mean"] == 0.375 and metrics["asr_worst10"] == 0.75
    assert np.isnan(compute_metrics(test, malicious, False)["asr_pooled"])
    rows = client_table(Counts(test.correct, test.total, test.loss_sum, backdoor), malicious)
    assert [r["asr"] for r in rows] == [0.75, 0.0, 1.0]


@pytest.mark.parametrize("params,message", [
    ({"size": 3, "position": [2, 2]}, r"a 3x3 trigger at \[2, 2\] leaves the 4x4 image"),
    ({"target": 4}, r"target must be a label in \[0, 3\] of dataset 'tiny', got 4"),
    ({"position": "middle"}, "position must be one of bottom_right, top_left, top_right, bottom_left or"),
    ({"poison_fraction": 0.0}, r"poison_fraction must be a fraction in \(0, 1\]"),
])
def test_bad_trigger_options_are_one_error_line(params, message):
    with pytest.raises(ConfigError, match=message):
        effect("badnets", **params)


def test_a_pixel_trigger_on_non_image_data_is_refused_with_what_to_use():
    flat = FederatedDataset("flat", tiny().clients, 4, (16,), "fp", "classification")
    with pytest.raises(ConfigError, match="not images; use targeted_flip"):
        effect("badnets", flat)
    assert effect("targeted_flip", flat, source=1, target=0).backdoor.source == 1


DIGITS = {"dataset": {"name": "digits", "num_clients": 30}, "model": {"name": "mlp", "hidden": [64]}, "rounds": 30,
          "eval_every": 10, "clients_per_round": 10, "local_steps": 2, "batch_size": 16, "lr": 0.2, "seed": 0}


def run(attack: dict, aggregator: str = "mean", method: str = "global") -> dict:
    cfg = ExperimentConfig.from_dict({**DIGITS, "method": {"name": method}, "attack": attack,
                                      "aggregator": {"name": aggregator}})
    return run_experiment(cfg)["final"]


@pytest.mark.parametrize("name,white", [("digits", (16 - 4.884165) / 6.016788), ("mnist_5k", (255 - 33.486506) / 78.680325)])
def test_the_default_trigger_is_a_white_pixel_under_the_datasets_per_channel_normalisation(name, white):
    # Prepare: the offline datasets standardise per channel; their raw pixels (digits 0-16, MNIST 0-255) have the
    # mean and std over all pixels written above (checked against the raw data below)
    cfg = ExperimentConfig.from_dict({"dataset": {"name": name, "num_clients": 10},
                                      "attack": {"name": "badnets", "level": 0.2}})
    trial = build_trial(cfg)
    # Execute: a triggered test sample
    stamped = trial.threat.effect.backdoor.stamp(trial.dataset.clients[0].test.x[:1])
    # Assert: the bottom-right 3 x 3 patch holds (max - mean) / std, about 1.85 on digits and 2.82 on MNIST
    image = stamped.reshape(-1, *trial.dataset.meta.get("image_shape", stamped.shape[-2:]))
    assert image[0, -3:, -3:].flatten().tolist() == pytest.approx([white] * 9, rel=1e-5)


def test_under_per_pixel_normalisation_each_trigger_pixel_is_that_pixels_white():
    from sklearn.datasets import load_digits

    raw = load_digits().data
    cfg = ExperimentConfig.from_dict({"dataset": {"name": "digits", "num_clients": 10, "normalize": "pixel"},
                                      "attack": {"name": "badnets", "level": 0.2}})
    trial = build_trial(cfg)
    stamped = trial.threat.effect.backdoor.stamp(trial.dataset.clients[0].test.x[:1])[0].reshape(8, 8)
    expected = ((16 - raw.mean(0)) / np.maximum(raw.std(0), 1e-8)).reshape(8, 8)
    assert stamped[-3:, -3:].flatten().tolist() == pytest.approx(expected[-3:, -3:].flatten().tolist(), rel=1e-5)


def test_the_datasets_pixel_scale_recovers_the_raw_pixels():
    from sklearn.datasets import load_digits

    raw = load_digits().data
    ds = build_trial(ExperimentConfig.from_dict({"dataset": {"name": "digits"}})).dataset
    scale = ds.meta[PIXELS]
    assert scale.white == 16.0 and float(scale.mean[0]) == pytest.approx(raw.mean(), rel=1e-6)
    assert float(scale.std[0]) == pytest.approx(raw.std(), rel=1e-6)
    x = ds.clients[0].train.x
    back = x.numpy() * scale.std + scale.mean  # raw values again: whole numbers 0-16
    assert np.abs(back - np.round(back)).max() < 1e-4 and back.min() > -1e-4 and back.max() < 16 + 1e-4
    assert torch.allclose(raw_to_input(ds, 0.0)[0], torch.tensor(-raw.mean() / raw.std(), dtype=torch.float32))


def test_a_trigger_value_outside_the_raw_range_is_one_error_line():
    with pytest.raises(ConfigError, match=r"value is a raw pixel value as a fraction of the raw range, in \[0, 1\]"):
        effect("badnets", value=3.0)


@pytest.mark.slow  # seven 40-round digits runs (about 6 s)
def test_at_defaults_on_digits_some_backdoor_defense_lowers_badnets_success_by_a_tenth():
    # Prepare: digits, 30 devices, 40 rounds of 10, BadNets at 20%, every other setting at its default
    def asr(rule: str) -> float:
        cfg = ExperimentConfig.from_dict({"dataset": {"name": "digits", "num_clients": 30}, "rounds": 40,
                                          "attack": {"name": "badnets", "level": 0.2}, "aggregator": {"name": rule}})
        return run_experiment(cfg)["final"]["asr_pooled"]

    # Execute
    undefended = asr("mean")
    defended = {rule: asr(rule) for rule in ("norm_bound", "weak_dp", "flame", "foolsgold", "fltrust", "rlr")}
    # Assert: the backdoor works undefended, and at least one defense (here FoolsGold, FLTrust, RLR) cuts it
    assert undefended > 0.8
    assert max(undefended - value for value in defended.values()) >= 0.1, defended


@pytest.mark.slow  # three 30-round digits runs
def test_badnets_on_digits_backdoors_fedavg_keeps_its_accuracy_and_krum_stops_it():
    # Execute: 20% attackers, a white 3 x 3 patch
    clean = run({"name": "none", "level": 0.0})
    attacked = run({"name": "badnets", "level": 0.2})
    defended = run({"name": "badnets", "level": 0.2}, aggregator="krum")
    # Assert: a high ASR at clean accuracy within a few points; Krum lowers it (here to almost nothing)
    assert attacked["asr_pooled"] > 0.9 and clean["acc_pooled"] - attacked["acc_pooled"] < 0.05
    assert defended["asr_pooled"] < 0.5 * attacked["asr_pooled"]


@pytest.mark.slow
def test_the_attack_stops_at_stop_round_and_the_backdoor_fades():
    lasting = run({"name": "badnets", "level": 0.2})
    stopped = run({"name": "badnets", "level": 0.2, "stop_round": 5})
    assert stopped["asr_pooled"] < lasting["asr_pooled"] - 0.2


def test_fedarena_run_records_the_attack_success_rate_and_refuses_a_bad_trigger(tmp_path, capsys):
    out = tmp_path / "r.json"
    rc = main(["run", "--dataset", "digits", "--attack", "badnets", "--level", "0.2", "--set", "value=1.0",
               "--set", "target=7", "--rounds", "3", "--no-progress", "--out", str(out)])
    result = json.loads(out.read_text())
    assert rc == 0 and result["config"]["attack"]["target"] == 7
    assert 0 <= result["final"]["asr_pooled"] <= 1 and "asr" in result["clients"][0]
    bad = tmp_path / "bad.json"
    assert main(["run", "--dataset", "digits", "--attack", "badnets", "--level", "0.2", "--set", "size=9",
                 "--rounds", "3", "--no-progress", "--out", str(bad)]) == 2
    assert "size must be a whole number of pixels in [1, 8] for the 8x8 images of dataset 'digits', got 9" in (
        capsys.readouterr().err) and not bad.exists()
