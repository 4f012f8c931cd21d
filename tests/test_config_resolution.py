"""A trial's config is resolved once: ``resolve_config`` fills every section, and trial set-up's builders take
the resolved sections without resolving them again."""

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
    assert sorted(seen) == ["aggregator", "attack", "dataset", "method", "model"]
    assert isinstance(trial.cfg, ResolvedConfig) and trial.cfg.method["lam"] == 1.0  # the defaults, filled


def test_a_resolved_config_is_not_resolved_again(monkeypatch):
    resolved = resolve_config(ExperimentConfig.from_dict(RAW))
    seen = count_resolutions(monkeypatch)
    trial = build_trial(resolved)
    assert seen == [] and resolve_config(resolved) is resolved and trial.cfg.legacy_hash() == resolved.legacy_hash()
