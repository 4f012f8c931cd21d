"""A trial's config is resolved once: ``resolve_config`` fills every section, and trial set-up's builders take
the resolved sections without resolving them again."""

import pytest

from fedarena.bench import trainable
from fedarena.bench.trainable import trial_payload
from fedarena.config import ExperimentConfig, ResolvedConfig
from fedarena.params import SectionKind
from fedarena.sections import resolve_config
from fedarena.simulation.setup import build_trial

RAW = {"dataset": {"name": "digits", "num_clients": 6}, "model": {"name": "mlp", "hidden": [8]},
       "method": {"name": "ditto"}, "attack": {"name": "a1", "level": 0.2}, "aggregator": {"name": "median"},
       "rounds": 1, "clients_per_round": 3}


def count_resolutions(monkeypatch) -> list[str]:
    seen = []
    original = SectionKind.resolve

    def counted(self, section):
        seen.append(self.kind)
        return original(self, section)

    monkeypatch.setattr(SectionKind, "resolve", counted)
    return seen


def test_a_trial_resolves_each_section_once(monkeypatch):
    seen = count_resolutions(monkeypatch)
    trial = build_trial(ExperimentConfig.from_dict(RAW))
    assert sorted(seen) == ["aggregator", "attack", "dataset", "method", "model", "privacy", "system"]
    assert isinstance(trial.cfg, ResolvedConfig) and trial.cfg.method["lam"] == 1.0  # the defaults, filled


def test_a_resolved_config_is_not_resolved_again(monkeypatch):
    resolved = resolve_config(ExperimentConfig.from_dict(RAW))
    seen = count_resolutions(monkeypatch)
    trial = build_trial(resolved)
    assert seen == [] and resolve_config(resolved) is resolved and trial.cfg.legacy_hash() == resolved.legacy_hash()


class StubTune:
    """What the trainable calls of Ray Tune, in process: no checkpoint to restore, reports kept."""

    def __init__(self):
        self.reports = []

    def get_checkpoint(self):
        return None

    def report(self, result, checkpoint=None):
        self.reports.append(result)

    class Checkpoint:
        def __init__(self, path):
            self.path = path

        @classmethod
        def from_directory(cls, path):
            return cls(path)


def test_the_worker_runs_the_drivers_resolved_config_without_parsing_validating_or_resolving_it(monkeypatch):
    # Prepare: the driver's resolved config in a trial payload; the worker's Ray Tune calls stubbed
    cfg = resolve_config(ExperimentConfig.from_dict(RAW))
    payload = trial_payload(cfg, "h", "trial s0", checkpoint_every=0)
    stub = StubTune()
    monkeypatch.setattr(trainable, "tune", stub)
    seen = count_resolutions(monkeypatch)
    parsed = []
    monkeypatch.setattr(ExperimentConfig, "from_dict", classmethod(lambda cls, data: parsed.append(data)))
    monkeypatch.setattr(ExperimentConfig, "check", lambda self: parsed.append("check"))
    # Execute
    trainable.run_trial({"trial": "h"}, trainable.packed_payloads({"h": payload}))
    # Assert: no section resolved, no dict parsed, no config checked; the final report carries the history
    assert seen == [] and parsed == []
    final = stub.reports[-1]
    assert final["done"] and [e["round"] for e in final["history"]] == [1] and final["final"]["round"] == 1


@pytest.mark.parametrize("text, value", [("1e-5", 1e-5), ("1E5", 1e5), ("-2.5e-3", -2.5e-3), (".5e2", 50.0),
                                         ("0.00001", 1e-5), ("1.0e-5", 1e-5), ("12", 12), ("1e5x", "1e5x")])
def test_exponent_numbers_are_numbers_in_set_values_and_yaml_files(text, value, tmp_path):
    # YAML 1.1 (PyYAML) reads 1e-5 as a string: --set privacy.delta=1e-5 was refused as "must be a number"
    from fedarena.config import parse_value, read_yaml_file

    assert parse_value(text) == value and type(parse_value(text)) is type(value)
    path = tmp_path / "x.yaml"
    path.write_text(f"delta: {text}\n")
    assert read_yaml_file(path) == {"delta": value}


def test_privacy_delta_1e_5_on_the_command_line_is_accepted():
    from fedarena.cli import build_parser, config_from_args

    args = build_parser().parse_args(["run", "--dataset", "digits", "--set", "privacy.name=central",
                                      "--set", "privacy.noise_multiplier=1.0", "--set", "privacy.delta=1e-5"])
    assert config_from_args(args).privacy["delta"] == 1e-5
