"""Shared fixtures: tiny, fast experiment configs on offline data."""

import pytest

from fedarena.config import ExperimentConfig


@pytest.fixture
def small_config():
    """A digits run that takes about a second: 20 clients, 5 per round, 3 local steps."""

    def make(**overrides) -> ExperimentConfig:
        data = {"dataset": {"name": "digits", "num_clients": 20}, "rounds": 8, "clients_per_round": 5,
                "local_steps": 3, "batch_size": 16, "lr": 0.05, "eval_every": 4, "seed": 3}
        data.update(overrides)
        return ExperimentConfig.from_dict(data)

    return make


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread():
    """Tiny models on 2 cores: intra-op threads only add contention (tests ran 10x slower under load)."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
