"""Before Ray starts: build every pending trial's plan (data, method, attack, server rule, model) without
training, so that an error no retry can fix stops the benchmark in seconds, and estimate the checkpoints'
disk space.

A dataset is loaded once per dataset section (the first trial's seed partitions it): the checks read its
facts (clients, task, shapes), which no seed changes. A model is built once per (model, shapes, backend).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import torch

from fedarena.errors import ConfigError
from fedarena.privacy.audit import check_size
from fedarena.privacy.base import privacy_from
from fedarena.privacy.dp_trial import check_attack_privacy
from fedarena.registry import UnknownNameError
from fedarena.sections import resolve_config
from fedarena.simulation.setup import assemble, build_trial_model, load_dataset
from fedarena.suites.grid import TrialSpec

CHECKPOINT_COPIES = 4  # per running trial: the two Tune keeps, a newer one until it drops the older, scratch


@dataclass
class Preflight:
    """Trials that cannot be built (spec, one-line error) and each buildable trial's checkpoint bytes."""

    problems: list[tuple[TrialSpec, str]] = field(default_factory=list)
    checkpoint_bytes: dict[str, int] = field(default_factory=dict)  # config hash -> bytes of one checkpoint

    def summary(self, total: int) -> str:
        """One line: how many trials cannot run, the first one's error, and how many other distinct errors."""
        spec, error = self.problems[0]
        same = sum(1 for _, e in self.problems if e == error) - 1
        others = len({e for _, e in self.problems}) - 1
        more = f" (and {same} more with this error)" if same else ""
        rest = f"; {others} other error{'s' if others > 1 else ''} (see --dry-run)" if others else ""
        return f"{len(self.problems)} of {total} trials cannot run: {spec.name}{more}: {error}{rest}"

    def disk_needed(self, concurrent: int) -> int:
        """Bytes the largest ``concurrent`` trials hold in checkpoints at once."""
        sizes = sorted(self.checkpoint_bytes.values(), reverse=True)[:max(1, concurrent)]
        return CHECKPOINT_COPIES * sum(sizes)


def preflight(specs: list[TrialSpec]) -> Preflight:
    """Build every trial's plan as trial set-up would (``assemble``, ``build_trial_model``), without data pools
    or training; collect what fails with a config error."""
    result, datasets, models = Preflight(), {}, {}
    for spec in specs:
        try:
            cfg = resolve_config(spec.config)
            check_attack_privacy(privacy_from(cfg.privacy), cfg.attack)  # from its declaration, before any data
            dataset = _cached(datasets, json.dumps(cfg.dataset, sort_keys=True), lambda c=cfg: load_dataset(c))
            method = assemble(cfg, dataset)[0]  # the privacy plan's calibration too
            key = (json.dumps(cfg.model, sort_keys=True), cfg.backend, dataset.input_shape, dataset.num_classes,
                   dataset.task)
            w0 = _cached(models, key, lambda c=cfg, d=dataset: build_trial_model(c, d, torch.device("cpu"))[1])
            check_size(privacy_from(cfg.privacy).audit, w0.numel())  # a privacy audit's directions fit
        except (ConfigError, UnknownNameError) as err:
            result.problems.append((spec, " ".join(str(err).split())))
            continue
        result.checkpoint_bytes[spec.config_hash] = state_bytes(method, w0, dataset.train_sizes())
    return result


def _cached(cache: dict, key, build):
    if key not in cache:
        cache[key] = build()
    return cache[key]


def state_bytes(method, w0: torch.Tensor, sizes) -> int:
    """Bytes of a checkpoint's tensors: the global model plus the method's per-client state, measured on two
    tiny models (the state is affine in the model size: a + b * P elements) and scaled to ``w0``'s size."""
    sizes = np.asarray(sizes)

    def elements(p: int) -> int:
        clients = method.init_clients(torch.zeros(p, dtype=w0.dtype), sizes)
        return sum(t.numel() for t in clients.values())

    small, large = elements(2), elements(4)
    per_param = (large - small) / 2
    total = w0.numel() + (small - 2 * per_param) + per_param * w0.numel()
    return int(total * w0.element_size())
