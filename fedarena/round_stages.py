"""The round as one fixed pipeline, and what a component adds to it.

    draw -> local work -> device stages -> server stages -> the method's server step -> after-round stages
    (and at each evaluation: the evaluation metrics)

- a **device stage** ``stage(rows [n, d], view) -> rows`` changes what the round's senders send: an audit's canaries
  join (their rows appended), local DP clips and noises every row, a model attack tampers with its devices' rows;
- a **server stage** ``stage(rule, view) -> rule`` wraps what the method's server step calls as its rule: central
  DP clips, weights uniformly and noises it (``rule`` is None for a method without global aggregation);
- an **after-round stage** ``stage(part, change [d], view) -> part`` reads the released model's change of a kept
  round into its part of the run's state (the privacy audit's statistics);
- an **evaluation metric** ``metric(trial, state) -> {name: value}`` adds run properties at each evaluation from the
  run's state (CRFL's certified radius, the audit's measured epsilons).

A component's state across rounds is a **part** of the run's state: a dict of tensors under its slot (``server``:
the server rule's, which it replaces entries of through ``round.server``; ``attack``: an adaptive attack's;
``audit``: the audit's), made empty, stepped where its stage runs, saved in every checkpoint and resumed with
it by the engine, which never looks inside. A trial lists its stages in order (``simulation.setup``); the engine
runs the lists and knows no stage by name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fedarena.streams import torch_stream


@dataclass(frozen=True)
class StageView:
    """What a stage sees of the round: the trial (``simulation.setup.Trial``), the round's index, each row's sender
    (a device's id, or an audit's canary: ids from the number of devices on), the round's rule (the trial's
    ``Aggregator`` for the round; None without global aggregation), the senders' aggregation weights and losses, and
    the round's server state (a stage replaces entries; they are kept only if the round is)."""

    trial: Any
    round: int
    senders: np.ndarray
    rule: Any
    weights: torch.Tensor
    losses: torch.Tensor | None
    server: dict

    def generator(self, tag: int, *keys: int, device: torch.device | str | None = None) -> torch.Generator:
        """The round's generator of stream ``tag`` (``fedarena.streams``), keyed by (seed, tag, round, keys)."""
        return torch_stream(self.trial.cfg.seed, tag, self.round, *keys, device=device or self.trial.device)


DeviceStage = Callable[[torch.Tensor, StageView], torch.Tensor]
ServerStage = Callable[[Any, StageView], Any]
AfterRound = Callable[[dict, torch.Tensor, StageView], dict]
EvaluationMetric = Callable[[Any, Any], dict]


@dataclass(frozen=True)
class Pipeline:
    """A trial's stages, in the order they run; ``after_round`` as (the state part's slot, the stage)."""

    device: tuple[DeviceStage, ...] = ()
    server: tuple[ServerStage, ...] = ()
    after_round: tuple[tuple[str, AfterRound], ...] = ()
    evaluation: tuple[EvaluationMetric, ...] = ()

    def __add__(self, other: Pipeline) -> Pipeline:
        return Pipeline(self.device + other.device, self.server + other.server,
                        self.after_round + other.after_round, self.evaluation + other.evaluation)
