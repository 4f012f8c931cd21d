"""Build a trial from a config: resolve every component, check every setting, before training starts.

Seeds are separate streams (``streams``) derived from the config's seed, so that adding an attack does
not change the partition, and a resumed run draws the same clients and minibatches.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fedarena import methods as _methods  # noqa: F401  (registers methods and aggregators)
from fedarena.attacks import ThreatModel, build_threat
from fedarena.attacks.base import ATTACKS, STRUCTURAL_KEYS, attack_params, level_value
from fedarena.config import ExperimentConfig
from fedarena.datasets import DATASETS, FederatedDataset, build_dataset, dataset_options
from fedarena.methods.aggregators import AGGREGATORS, check_aggregator, expected_malicious, make_aggregator
from fedarena.methods.aggregators.builder import RULE_ARGUMENTS, pre_names
from fedarena.methods.aggregators.builder import STRUCTURAL_KEYS as STRUCTURAL_AGGREGATOR_KEYS
from fedarena.methods.base import METHODS, Aggregate, Method, build_method
from fedarena.models import MODELS, FlatModel, build_model
from fedarena.params import ConfigError, hyperparameters, resolve
from fedarena.simulation.backends import Backend
from fedarena.simulation.data import Pooled

PARTITION, INIT, SAMPLING, ATTACK, TAMPER, CORRUPT = 1, 2, 3, 4, 5, 6  # stream tags


def stream(seed: int, tag: int, *more: int) -> np.random.Generator:
    return np.random.default_rng([seed, tag, *more])


def torch_stream(seed: int, tag: int, *more: int, device: torch.device | str = "cpu") -> torch.Generator:
    gen = torch.Generator(device=device)
    gen.manual_seed(int(stream(seed, tag, *more).integers(2**62)))
    return gen


@dataclass(frozen=True)
class Trial:
    """Everything fixed for one federated run (the mutable part is ``SimState``)."""

    cfg: ExperimentConfig
    dataset: FederatedDataset  # after one-time data poisoning
    model: FlatModel
    w0: torch.Tensor
    method: Method
    threat: ThreatModel
    aggregate: Aggregate | None
    needs_losses: bool
    backend: Backend
    train: Pooled
    val: Pooled
    test: Pooled
    weights: torch.Tensor  # [K] aggregation weights (``aggregation_weights``)
    device: torch.device


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device {name!r} asked for, but CUDA is not available here; use device=cpu or auto")
    try:
        return torch.device(name)
    except RuntimeError as err:
        raise ConfigError(f"invalid device {name!r}: {err}") from None


def model_name(cfg: ExperimentConfig) -> str:
    """The configured model, or the dataset's own (the papers' pairing) for ``auto``."""
    name = cfg.model["name"]
    return DATASETS.get(cfg.dataset["name"]).model if name == "auto" else name


def section_hyperparameters(cfg: ExperimentConfig) -> dict[str, set[str]]:
    """Allowed hyperparameter keys of each chosen component (for bare ``--set key=value``)."""
    out = {}
    for section, registry, fn_of in (("dataset", DATASETS, lambda e: e.build), ("model", MODELS, None),
                                     ("method", METHODS, None), ("attack", ATTACKS, None)):
        name = model_name(cfg) if section == "model" else getattr(cfg, section)["name"]
        entry = registry.get(name)
        out[section] = set(hyperparameters(fn_of(entry) if fn_of else entry))
    out["attack"] |= set(STRUCTURAL_KEYS) - {"name"}
    rule = AGGREGATORS.get(cfg.aggregator["name"])
    out["aggregator"] = set(hyperparameters(rule, exclude=RULE_ARGUMENTS)) | {"pre", "f"}
    return out


def resolve_config(cfg: ExperimentConfig) -> ExperimentConfig:
    """The config with every component's defaults filled in (what gets logged and hashed)."""
    data = cfg.to_dict()
    data["dataset"] = {"name": cfg.dataset["name"],
                       **dataset_options(cfg.dataset["name"], _without_name(cfg.dataset))}
    model = model_name(cfg)
    data["model"] = {"name": model, **resolve("model", model, MODELS.get(model), _without_name(cfg.model))}
    method_fn = METHODS.get(cfg.method["name"])
    data["method"] = {"name": cfg.method["name"], **resolve("method", cfg.method["name"], method_fn, _without_name(cfg.method))}
    data["attack"] = {"name": cfg.attack["name"], "level": level_value(cfg.attack),
                      **attack_params(cfg.attack)}
    data["aggregator"] = _resolved_aggregator(cfg.aggregator)
    return ExperimentConfig.from_dict(data)


def _resolved_aggregator(section: dict) -> dict:
    """name, pre-aggregators, f (None: computed from the attack level) and the rule's hyperparameters."""
    name = section["name"]
    given = {k: v for k, v in section.items() if k not in STRUCTURAL_AGGREGATOR_KEYS}
    params = resolve("aggregator", name, AGGREGATORS.get(name), given, exclude=RULE_ARGUMENTS)
    return {"name": name, "pre": list(pre_names(section)), "f": section.get("f"), **params}


def _without_name(section: dict) -> dict:
    return {k: v for k, v in section.items() if k != "name"}


def build_trial(cfg: ExperimentConfig) -> Trial:
    cfg = resolve_config(cfg)
    device = resolve_device(cfg.device)
    data_seed = cfg.seed if cfg.data_seed is None else cfg.data_seed
    dataset = build_dataset(cfg.dataset["name"], _without_name(cfg.dataset), stream(data_seed, PARTITION))
    if cfg.clients_per_round > dataset.num_clients:
        raise ConfigError(f"clients_per_round={cfg.clients_per_round} exceeds the {dataset.num_clients} clients "
                          f"of dataset {dataset.name!r}")
    method = build_method(cfg.method)
    if dataset.task not in method.tasks:
        raise ConfigError(f"method {method.name!r} is defined for {', '.join(method.tasks)} tasks; dataset "
                          f"{dataset.name!r} is a {dataset.task} task")
    threat = build_threat(cfg.attack, dataset, stream(cfg.seed, ATTACK))
    aggregate, needs_losses = _server_rule(cfg, method, threat, dataset.num_clients)
    seed_init = int(stream(cfg.seed, INIT).integers(2**62))
    model, w0 = build_model(cfg.model["name"], _without_name(cfg.model), dataset.input_shape,
                            dataset.num_classes, dataset.task, seed_init, device)
    if model.has_batch_norm and cfg.backend == "batched":
        raise ConfigError(f"model {cfg.model['name']!r} has batch norm, whose statistics would include the batched "
                          "backend's padding; use backend=sequential")
    poisoned = threat.effect.dataset
    pools = [Pooled.from_dataset(poisoned, split, device) for split in ("train", "val", "test")]
    weights = aggregation_weights(cfg.sampling, poisoned.train_sizes()).to(dtype=w0.dtype, device=device)
    return Trial(cfg, poisoned, model, w0, method, threat, aggregate, needs_losses,
                 Backend(model, cfg.backend == "batched"), *pools, weights, device)


def aggregation_weights(sampling: str, train_sizes) -> torch.Tensor:
    """[K] weights the server rule sees, so that every client's size counts exactly once: the sample counts
    under uniform sampling (FedAvg's weighted mean), all ones under size-proportional sampling, which already
    drew clients in proportion to their sizes (Ditto Algorithm 2, whose mean is therefore uniform)."""
    sizes = torch.as_tensor(train_sizes, dtype=torch.float64)
    return torch.ones_like(sizes) if sampling == "proportional" else sizes


def check_server_rule(cfg: ExperimentConfig, method: Method, num_malicious: int, num_clients: int) -> int:
    """The method and the aggregator fit together and the rule is defined for this corruption; returns f.

    A method without global aggregation takes only the plain mean. f = int(clients_per_round * malicious /
    clients) (semantics.md), unless the aggregator section overrides it.
    """
    if not method.uses_aggregator:
        if cfg.aggregator["name"] != "mean" or cfg.aggregator.get("pre"):
            raise ConfigError(f"method {method.name!r} has no global aggregation; it cannot use aggregator "
                              f"{cfg.aggregator['name']!r} (leave the aggregator at 'mean')")
        return 0
    f = expected_malicious(cfg.clients_per_round, num_malicious, num_clients)
    check_aggregator(cfg.aggregator, n=cfg.clients_per_round, f=f)
    return f


def _server_rule(cfg: ExperimentConfig, method: Method, threat: ThreatModel, num_clients: int):
    f = check_server_rule(cfg, method, int(threat.malicious.sum()), num_clients)
    if not method.uses_aggregator:
        return None, False
    aggregate = make_aggregator(cfg.aggregator, f=f)
    return aggregate, method.needs_losses or aggregate.needs_losses
