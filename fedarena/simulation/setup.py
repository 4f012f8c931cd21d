"""Build a trial from a config: resolve every component (``fedarena.sections``), check every setting,
before training starts.

Seeds are separate streams (``streams.py``) derived from the config's seed, so that adding an attack does
not change the partition, and a resumed run draws the same clients and minibatches.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from fedarena.attacks.base import ThreatModel, check_benign_in_every_round, threat_from
from fedarena.attacks.bounds import StampCheck
from fedarena.config import ExperimentConfig, ResolvedConfig
from fedarena.datasets import FederatedDataset
from fedarena.datasets.catalog import dataset_from
from fedarena.errors import ConfigError
from fedarena.methods.base import Aggregate, Method, method_from
from fedarena.models import FlatModel
from fedarena.models.backends import Backend, make_backend
from fedarena.models.functional import model_from
from fedarena.privacy.audit import CanaryAudit, with_canaries
from fedarena.privacy.base import privacy_from
from fedarena.privacy.dp_trial import PrivacyPlan, check_privacy, privacy_plan
from fedarena.privacy.stages import privacy_pipeline
from fedarena.round_inputs import prepared_inputs
from fedarena.round_stages import Pipeline
from fedarena.sections import check_clients_per_round, check_method_model, check_server_rule, resolve_config
from fedarena.simulation.ahead import RoundsAhead
from fedarena.simulation.data import Pooled, most_participation, plan_schedule
from fedarena.simulation.heap import keep_freed_pages
from fedarena.simulation.stamps import check_set_up_stamps, stamp_checks
from fedarena.simulation.work import ATTACK as ATTACK_WORK
from fedarena.simulation.work import Work
from fedarena.streams import ATTACK, AUDIT, INIT, PARTITION, stream, torch_stream
from fedarena.system.base import system_from
from fedarena.system.participation import LAB, Participation
from fedarena.system.requirements import check_asynchronous, check_system_privacy


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
    backend: Backend
    train: Pooled
    val: Pooled
    test: Pooled
    weights: torch.Tensor  # [K] aggregation weights (``aggregation_weights``)
    device: torch.device
    backdoor_test: Pooled | None = None  # a targeted attack's triggered test samples (its success rate)
    clean_train: Pooled | None = None  # the unpoisoned training data, for rounds after the attack stops
    privacy: PrivacyPlan | None = None  # differential privacy's mechanism (None: none)
    # the registered round inputs the trial's rule reads (``fedarena.round_inputs``), and what each one's
    # ``prepare`` made for the trial (FLTrust's root set, DeepSight's probe)
    inputs: tuple[str, ...] = ()
    prepared: Mapping[str, Any] = field(default_factory=dict)
    pipeline: Pipeline = Pipeline()  # its stages in the round, in order (``fedarena.round_stages``)
    ahead: RoundsAhead | None = None  # the next rounds' draws and plans, computed several at a time (a cache)
    stamp_check: StampCheck | None = None  # the attack's declared trigger bound, checked on what it stamps
    test_stamp_check: StampCheck | None = None  # the same for its success rate's samples
    audit: CanaryAudit | None = None  # a privacy audit's canary clients (ids from the number of devices on)
    # the deployment's availability, stragglers and failures (``fedarena.system``; LAB: every drawn device reports)
    participation: Participation = LAB
    work: Work = field(default_factory=Work)  # what the server's rule and the attacker paid (``simulation.work``)

    @property
    def needs_losses(self) -> bool:
        """Whether a round computes each drawn device's training loss at the global model: the method's server step
        or its rule reads them (a method without global aggregation reads none)."""
        return self.aggregate is not None and (self.method.needs_losses or self.aggregate.needs_losses)

    def population_sizes(self) -> np.ndarray:
        """The training sizes of everyone the sampling draws from: the devices, then an audit's canaries."""
        return with_canaries(self.audit and self.audit.spec, self.train.sizes)

    def local_steps(self) -> np.ndarray:
        """The local SGD steps each device with training data runs in a round it is drawn in, as the engine plans
        them (``data.plan_schedule``; CRFL's tau)."""
        sizes = self.train.sizes[self.train.sizes > 0]  # a device without data never steps
        return plan_schedule(sizes, self.cfg.local_steps, self.cfg.local_epochs, self.cfg.batch_size)[3]


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device {name!r} asked for, but CUDA is not available here; use device=cpu or auto")
    try:
        return torch.device(name)
    except RuntimeError as err:
        raise ConfigError(f"invalid device {name!r}: {err}") from None


def build_trial(cfg: ExperimentConfig) -> Trial:
    """Every part of a trial, from the config resolved once (a ``ResolvedConfig`` is taken as it is): every
    builder below takes its resolved section."""
    cfg = resolve_config(cfg)
    device = resolve_device(cfg.device)
    if device.type == "cpu":  # a round's large tensors reuse the last round's pages
        keep_freed_pages()
    dataset = load_dataset(cfg)
    method, threat, aggregate, privacy = assemble(cfg, dataset)
    model, w0 = build_trial_model(cfg, dataset, device)
    poisoned = threat.effect.dataset
    stamp_check, test_stamp_check = stamp_checks(threat.name, threat.effect.bound, dataset)
    check_set_up_stamps(stamp_check, test_stamp_check, threat.effect, dataset)
    pools = [Pooled.from_dataset(poisoned, split, device) for split in ("train", "val", "test")]
    audit = canary_audit(cfg, privacy, dataset.num_clients, w0)
    sizes = with_canaries(audit and audit.spec, poisoned.train_sizes())
    weights = aggregation_weights(cfg.sampling, sizes, privacy is not None)
    spec, work = system_from(cfg.system), Work()
    participation = LAB if spec.default else Participation.of(spec, cfg.seed, threat.malicious)
    ahead = None if audit is not None else RoundsAhead(  # its draws are the devices' alone
        pools[0], cfg.seed, cfg.sampling, cfg.clients_per_round, cfg.local_steps, cfg.local_epochs, cfg.batch_size,
        unavailable=participation.unavailable if participation.spec.availability else None)
    trial = Trial(cfg, poisoned, model, w0, method, threat, aggregate,
                  make_backend(cfg.backend, model, device), *pools, weights.to(dtype=w0.dtype, device=device), device,
                  *targeted_pools(threat, dataset, device), privacy=privacy, ahead=ahead, stamp_check=stamp_check,
                  test_stamp_check=test_stamp_check, audit=audit, participation=participation,
                  pipeline=round_pipeline(aggregate, threat, privacy, audit, work) + participation_pipeline(participation),
                  work=work)
    return with_inputs(trial)


def round_pipeline(aggregate: Aggregate | None, threat: ThreatModel, privacy: PrivacyPlan | None,
                   audit: CanaryAudit | None, work: Work | None = None) -> Pipeline:
    """The trial's stages, in the order they run: privacy's (an audit's canaries join and local DP noises what the
    devices send; central DP wraps the rule; the audit observes), the threat's (an attack tampers with its devices'
    rows after the devices' own noise), the rule's; at each evaluation the rule's certificate, then the audit's
    measures (the order they were reported in before the pipeline)."""
    rule = Pipeline() if aggregate is None else aggregate.pipeline()
    private, threatening = privacy_pipeline(privacy, audit), threat.pipeline()
    if work is not None:  # the attacker's tampering is its work (``simulation.work``)
        threatening = replace(threatening, device=tuple(work.wrapped(ATTACK_WORK, s) for s in threatening.device))
    staged = private + threatening + rule
    return replace(staged, evaluation=rule.evaluation + private.evaluation + threatening.evaluation)


def participation_pipeline(participation: Participation) -> Pipeline:
    """A deployment's evaluation metric: the rounds skipped so far (too few reports for the rule)."""
    if participation.spec.default:
        return Pipeline()
    return Pipeline(evaluation=(participation_metrics,))


def participation_metrics(trial: Trial, state) -> dict[str, float]:
    """``rounds_skipped`` (too few reports for the rule), ``reports_mean`` (reports a round aggregated, or a server
    step's buffer) and ``attacker_share`` (the attackers' share of all reports: failures and stragglers leave the
    honest devices out, attackers choose to report)."""
    part = state.parts.get("system", {})
    skipped, tally = part.get("skipped"), part.get("tally")
    rounds, reports, bad = (0, 0, 0) if tally is None else (int(v) for v in tally)
    return {"rounds_skipped": 0.0 if skipped is None else float(skipped.sum()),
            "reports_mean": reports / rounds if rounds else float("nan"),
            "attacker_share": bad / reports if reports else float("nan")}


def with_inputs(trial: Trial) -> Trial:
    """The trial with the round inputs its rule reads, each prepared (its ``prepare``, once, before training)."""
    names = () if trial.aggregate is None else trial.aggregate.inputs
    return replace(trial, inputs=names, prepared=prepared_inputs(trial, names)) if names else trial


def canary_audit(cfg: ResolvedConfig, privacy: PrivacyPlan | None, devices: int, w0: torch.Tensor) -> CanaryAudit | None:
    """A private trial's canaries, where its privacy section asks for an audit (directions from the stream AUDIT)."""
    if privacy is None or privacy.spec.audit is None:
        return None
    return CanaryAudit.of(privacy.spec.audit, devices, w0.numel(), privacy.delta, torch_stream(cfg.seed, AUDIT, 0),
                          int(stream(cfg.seed, AUDIT, 1).integers(2**62)), w0.device, w0.dtype)


def targeted_pools(threat: ThreatModel, clean: FederatedDataset, device: torch.device) -> tuple:
    """(the backdoor's test view, the clean training data where the attack stops before the last round)."""
    effect = threat.effect
    backdoor = effect.backdoor and Pooled.from_dataset(effect.backdoor.test_view(clean), "test", device)
    stops = effect.stop_round is not None and effect.dataset is not clean
    return backdoor, Pooled.from_dataset(clean, "train", device) if stops else None


def load_dataset(cfg: ResolvedConfig) -> FederatedDataset:
    """The trial's federated dataset (partitioned with the data seed, or the seed)."""
    data_seed = cfg.seed if cfg.data_seed is None else cfg.data_seed
    return dataset_from(cfg.dataset, stream(data_seed, PARTITION))


def assemble(cfg: ResolvedConfig, dataset: FederatedDataset):
    """(method, threat, server rule, privacy plan) of a resolved config on its dataset, with every
    check that needs the data (``fedarena bench run`` runs it for every trial before any starts), a target
    epsilon's calibration included."""
    spec = privacy_from(cfg.privacy)
    check_clients_per_round(cfg.clients_per_round, dataset.num_clients, spec.canaries, dataset.name)
    method = method_from(cfg.method)
    check_method_model(cfg, method)
    everyone = dataset.num_clients + spec.canaries  # whom the sampling draws from
    method.check_schedule(cfg.clients_per_round, cfg.local_epochs, everyone)
    if dataset.task not in method.tasks:
        raise ConfigError(f"method {method.name!r} is defined for {', '.join(method.tasks)} tasks; dataset "
                          f"{dataset.name!r} is a {dataset.task} task")
    threat = threat_from(cfg.attack, dataset, stream(cfg.seed, ATTACK))
    check_benign_in_every_round(threat, cfg.clients_per_round)
    aggregate = check_server_rule(cfg, method, int(threat.malicious.sum()), everyone)
    if aggregate is not None and aggregate.entry.tasks and dataset.task not in aggregate.entry.tasks:
        raise ConfigError(f"aggregator {aggregate.name!r} is defined for {', '.join(aggregate.entry.tasks)} tasks; "
                          f"dataset {dataset.name!r} is a {dataset.task} task")
    check_privacy(spec, cfg.sampling, method, aggregate, cfg.attack)
    system = system_from(cfg.system)
    check_system_privacy(system, spec.private, spec.secure_aggregation)
    check_asynchronous(system, aggregate, cfg.clients_per_round, dataset.num_clients)
    sizes = with_canaries(spec.audit, dataset.train_sizes())
    most = most_participation(cfg.seed, cfg.sampling, sizes, cfg.clients_per_round, cfg.rounds,
                              dataset.num_clients) if spec.local else None
    return method, threat, aggregate, privacy_plan(spec, len(sizes), cfg.clients_per_round, cfg.rounds, most)


def build_trial_model(cfg: ResolvedConfig, dataset: FederatedDataset, device: torch.device):
    """(model, initial weights) for the dataset's shapes, seeded by the config's init stream."""
    seed_init = int(stream(cfg.seed, INIT).integers(2**62))
    model, w0 = model_from(cfg.model, dataset.input_shape, dataset.num_classes, dataset.task, seed_init, device)
    if model.has_batch_norm and cfg.backend == "batched":
        raise ConfigError(f"model {cfg.model['name']!r} has batch norm, whose statistics would include the batched "
                          "backend's padding; use backend=sequential")
    return model, w0


def aggregation_weights(sampling: str, train_sizes, private: bool = False) -> torch.Tensor:
    """[K] weights the server rule sees, so that every client's size counts exactly once: the sample counts
    under uniform sampling (FedAvg's weighted mean), all ones under size-proportional sampling, which already
    drew clients in proportion to their sizes (Ditto Algorithm 2, whose mean is therefore uniform). Under
    differential privacy all ones: a device's sample count is private too (DP-FedAvg's fixed denominator)."""
    sizes = torch.as_tensor(train_sizes, dtype=torch.float64)
    return torch.ones_like(sizes) if sampling == "proportional" or private else sizes
