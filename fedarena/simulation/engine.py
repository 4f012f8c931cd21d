"""The round loop: sample clients -> local training -> model attack -> server rule -> evaluate.

``SimState`` is the whole mutable state of a run (round, global model, per-client state, divergence,
history, the server rule's own state); with the trial's config it is all a checkpoint needs, since every
random draw is keyed by (seed, stream, round, client) rather than by a generator's position.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np
import torch

from fedarena.attacks.base import AttackView
from fedarena.attacks.bounds import checked_corrupt
from fedarena.config import SYNCHRONOUS
from fedarena.methods.aggregators.base import EXCLUDED, RoundDraw
from fedarena.methods.base import ServerInfo, StepContext, sgd
from fedarena.round_inputs import computed_inputs
from fedarena.round_stages import StageView
from fedarena.simulation.costs import CostMeter
from fedarena.simulation.data import Pooled, drawn_clients, gather, gather_all, round_plan
from fedarena.simulation.evaluate import evaluate
from fedarena.simulation.metrics import Counts, compute_metrics
from fedarena.simulation.participating import budgets, epoch_steps, of_group, unavailable_or, within_budget
from fedarena.simulation.properties import run_properties
from fedarena.simulation.setup import Trial
from fedarena.simulation.work import ATTACK as ATTACK_WORK
from fedarena.simulation.work import SERVER as SERVER_WORK
from fedarena.streams import (
    ADAPT,
    AGGREGATE,
    CORRUPT,
    DROPOUT,
    DROPOUT_EVAL,
    keyed_seed,
    stream,
    torch_stream,
)

# The version of the round loop, local training, evaluation and the seed streams: bump it with any change of
# the numbers a trial gives (identity: ``simulation.identity``). 2: clients drawn and minibatches planned from
# SplitMix64 keyed uniforms (``streams.keyed_uniforms``; successive size-proportional draws by exponential
# keys), the rules' round seed from the same mixer, and the fused SGD step of plain MLPs (``models.dense``).
# 3: that step's softmax written out on a CPU (``dense._scaled_softmax_minus_one_hot_``; float32 rounding only).
ENGINE_VERSION = 3


@dataclass
class SimState:
    round: int  # rounds completed
    w: torch.Tensor
    clients: dict[str, torch.Tensor]
    diverged_at: int | None = None
    history: list[dict] = field(default_factory=list)
    # each stateful component's part of the run (``fedarena.round_stages``), a dict of tensors by slot: "server" (the
    # server rule's: FoolsGold's history), "attack" (an adaptive attack's: A3FL's trigger), "audit" (a privacy
    # audit's statistics); saved and resumed whole, never read here
    parts: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)

    @property
    def diverged(self) -> bool:
        return self.diverged_at is not None

    def part(self, slot: str) -> dict[str, torch.Tensor]:
        return self.parts.get(slot, {})

    @property
    def server(self) -> dict[str, torch.Tensor]:
        return self.part(SERVER)

    @property
    def attack(self) -> dict[str, torch.Tensor]:
        return self.part(ATTACK_STATE)

    def state_dict(self) -> dict:
        return {"round": self.round, "w": self.w.cpu(), "clients": {k: v.cpu() for k, v in self.clients.items()},
                "diverged_at": self.diverged_at, "history": list(self.history),
                **{slot: {k: v.cpu() for k, v in part.items()} for slot, part in self.parts.items()}}

    @classmethod
    def from_state_dict(cls, data: dict, device: torch.device) -> SimState:
        parts = {slot: {k: v.to(device) for k, v in part.items()} for slot, part in data.items()
                 if slot not in RUN_KEYS}  # a checkpoint from before a part existed has none of it
        return cls(data["round"], data["w"].to(device), {k: v.to(device) for k, v in data["clients"].items()},
                   data["diverged_at"], list(data["history"]), parts)


RUN_KEYS = ("round", "w", "clients", "diverged_at", "history")  # a checkpoint's keys besides the parts
SERVER, ATTACK_STATE = "server", "attack"  # the parts the contracts name: ``RoundDraw.server``, ``Effect.adapt``
SYSTEM = "system"  # a deployment's (``fedarena.system``): rounds skipped, asynchronous aggregation's updates in flight


def initial_state(trial: Trial) -> SimState:
    w = trial.w0.clone()
    return SimState(0, w, trial.method.init_clients(w, trial.train.sizes))


def draw_clients(trial: Trial, round_idx: int, server: dict | None = None) -> np.ndarray:
    """Ditto Algorithm 2: without replacement, probability proportional to training sizes (or uniform);
    the clients in the order drawn, never one the server rule removed (``server[EXCLUDED]``)."""
    cfg = trial.cfg
    excluded = None if server is None or EXCLUDED not in server else server[EXCLUDED].cpu().numpy()
    cached = trial.ahead.drawn(round_idx) if excluded is None and trial.ahead is not None else None
    if cached is not None:  # the same draw, computed with the next rounds' (a cache)
        return cached.copy()
    sizes = trial.population_sizes()
    excluded = unavailable_or(trial.participation.unavailable(np.array([round_idx])), excluded, len(sizes))
    if excluded is not None and excluded.all():  # nobody can be drawn (availability): an empty round
        return np.zeros(0, dtype=np.int64)
    return drawn_clients(cfg.seed, cfg.sampling, sizes, cfg.clients_per_round, round_idx, excluded)


def sample_clients(trial: Trial, round_idx: int, server: dict | None = None) -> np.ndarray:
    """The round's clients in id order (the order of every per-round tensor)."""
    return np.sort(draw_clients(trial, round_idx, server))


def round_draw(trial: Trial, drawn: np.ndarray, round_idx: int, server: dict | None = None,
               model: torch.Tensor | None = None) -> RoundDraw:
    """The server rule's view of the round: each sorted row's position in the draw, the round's seed (from
    the stream AGGREGATE, keyed by the round), the rows' client ids, the server's state, and the round's value of
    every round input the trial's rule reads (``trial.inputs``, computed from the round's global model ``model``)."""
    position = torch.as_tensor(np.argsort(drawn, kind="stable"), device=trial.device)
    ids = torch.as_tensor(np.sort(drawn), device=trial.device)
    inputs = computed_inputs(trial.inputs, trial, round_idx, model, trial.prepared,
                             partial(server_training, trial, model, round_idx), server) if trial.inputs else {}
    return RoundDraw(position, keyed_seed(trial.cfg.seed, AGGREGATE, round_idx), ids, server, inputs)


def server_training(trial: Trial, w: torch.Tensor, round_idx: int, x: torch.Tensor, y: torch.Tensor,
                    plan_seed: int) -> torch.Tensor:
    """The update [d] the server gets by training ``w`` on its own samples (x, y) as one client with the devices'
    local schedule (cfg.local_steps or local_epochs, batch_size, lr) of plain SGD, minibatches planned from
    ``plan_seed`` and the round's dropout keys (``RoundView.train``: FLTrust's root update)."""
    cfg, size = trial.cfg, len(y)
    pool = Pooled(x, y, np.zeros(1, dtype=np.int64), np.array([size], dtype=np.int64),
                  torch.zeros(size, dtype=torch.long, device=x.device))
    index, mask, active = round_plan(pool, np.zeros(1, dtype=np.int64), cfg.local_steps, cfg.local_epochs,
                                     cfg.batch_size, plan_seed, round_idx)
    keys = _dropout_keys(trial, round_idx, index.shape[0])
    local = w[None].clone()
    for s in range(index.shape[0]):
        backend = trial.backend if keys is None else trial.backend.keyed(keys[s])
        batch = gather(pool, index[s], mask[s], active[s])
        local = sgd(local, backend.grad(local, batch)[1], cfg.lr, batch.active)
    return local[0] - w


def _round_data(trial: Trial, ids: np.ndarray, round_idx: int, attack: dict | None = None) -> Pooled:
    """The training pool for this round: persistent-outlier attacks corrupt the selected clients' rows (an
    adaptive attack's with its state ``attack``); after an attack's ``stop_round``, the clean data."""
    effect = trial.threat.effect
    if not effect.active(round_idx):
        return trial.train if trial.clean_train is None else trial.clean_train
    corrupt = effect.corrupt
    if corrupt is None:
        return trial.train
    if effect.adapt is not None:
        corrupt = partial(corrupt, state=attack or {})
    if trial.stamp_check is not None:
        corrupt = checked_corrupt(corrupt, trial.stamp_check)
    corrupt = trial.work.wrapped(ATTACK_WORK, corrupt)
    return trial.train.with_rows_replaced(ids, corrupt, trial.threat.malicious,
                                          torch_stream(trial.cfg.seed, CORRUPT, round_idx, device=trial.device))


def train_group(trial: Trial, w: torch.Tensor, clients: dict, pool: Pooled, group: np.ndarray, round_idx: int,
                budget: np.ndarray | None = None):
    """Local training of one group of clients (all selected ones when batched): (updates [n, d], clients).
    ``budget`` [n]: client j runs only its first ``budget[j]`` steps (a straggler's, ``fedarena.system``)."""
    cfg, method = trial.cfg, trial.method
    if method.trains_plain_sgd and trial.backend.fuses_local_sgd(tuple(pool.x.shape[1:]), w.device):
        every = within_budget(_batches(trial, pool, group, round_idx, cfg.local_steps, cfg.local_epochs), budget)
        return trial.backend.local_sgd(w, every, cfg.lr), clients  # the numbers of the stepped loop, fused
    local, ids = _local_loop(trial, w, clients, pool, group, round_idx, cfg.local_steps, cfg.local_epochs,
                             method.local_init, method.local_step, budget)
    return method.local_result(local, w, clients, ids)


def _plan(trial: Trial, pool: Pooled, group: np.ndarray, round_idx: int, steps: int, epochs: int):
    """The group's minibatch plan for the round (``data.round_plan``; from the next rounds' cache where it holds)."""
    if trial.ahead is not None:
        return trial.ahead.plan(pool, group, round_idx, steps, epochs)
    return round_plan(pool, group, steps, epochs, trial.cfg.batch_size, trial.cfg.seed, round_idx)


def _batches(trial: Trial, pool: Pooled, group: np.ndarray, round_idx: int, steps: int, epochs: int):
    """The group's minibatches for the round, every step's at once (from the next rounds' cache where it holds)."""
    if trial.ahead is not None:
        return trial.ahead.batches(pool, group, round_idx, steps, epochs)
    return gather(pool, *_plan(trial, pool, group, round_idx, steps, epochs))


def _local_loop(trial: Trial, w: torch.Tensor, clients: dict, pool: Pooled, group: np.ndarray, round_idx: int,
                steps: int, epochs: int, init: Callable, step: Callable,
                budget: np.ndarray | None = None) -> tuple[dict, torch.Tensor]:
    """``init`` then one ``step`` per minibatch of the group's plan for ``round_idx``; returns (local, ids).
    ``budget`` [n]: client j trains only its first ``budget[j]`` steps (the rest are inactive)."""
    cfg = trial.cfg
    ids = torch.as_tensor(group, device=trial.device)
    index, mask, active = _plan(trial, pool, group, round_idx, steps, epochs)
    if budget is not None:
        step_no = torch.arange(index.shape[0], device=active.device)[:, None]
        within = step_no < torch.as_tensor(budget, device=active.device)
        mask, active = mask * within[..., None], active * within
    val = gather_all(trial.val, group) if trial.method.needs_val else None
    train = gather_all(pool, group) if trial.method.needs_train else None
    sizes = torch.as_tensor(pool.sizes[group], device=trial.device)
    ctx = StepContext(trial.backend, cfg.lr, w, ids, val, trial.threat.strong, sizes,
                      epoch_steps(pool, group, cfg.batch_size, trial.device) if epochs else None, train)
    keys = _dropout_keys(trial, round_idx, index.shape[0])
    every = gather(pool, index, mask, active)  # all steps' minibatches in one gather
    local = init(w, clients, ids)
    for s in range(index.shape[0]):
        step_ctx = ctx if keys is None else replace(ctx, backend=ctx.backend.keyed(keys[s]))
        local = step(local, every.step(s), step_ctx)
    return local, ids


def _dropout_keys(trial: Trial, round_idx: int, num_steps: int) -> list[int] | None:
    """One dropout key per step of the round (models with seeded dropout), the same for every group."""
    if not trial.model.has_dropout:
        return None
    return [int(k) for k in stream(trial.cfg.seed, DROPOUT, round_idx).integers(2**32, size=num_steps)]


def finalize(trial: Trial, state: SimState) -> SimState:
    """The method's post-training phase (``finalize_epochs`` > 0, e.g. finetuning from w* on every device):
    all clients, in groups of ``clients_per_round`` (one by one when sequential), run that many epochs
    of ``finalize_step``, or, where ``finalize_steps`` gives each client a step count, that many full
    minibatches. Minibatches (and persistent outliers) are keyed by round = ``cfg.rounds``."""
    method, cfg = trial.method, trial.cfg
    everyone = np.arange(trial.dataset.num_clients)
    pool = _round_data(trial, everyone, cfg.rounds, state.attack)
    clients = state.clients
    for start in range(0, len(everyone), cfg.clients_per_round):
        for group in trial.backend.groups(everyone[start : start + cfg.clients_per_round]):
            budget = method.finalize_steps(pool.sizes[group], cfg.batch_size)
            plan = (0, method.finalize_epochs) if budget is None else (int(budget.max()), 0)
            local, ids = _local_loop(trial, state.w, clients, pool, group, cfg.rounds, *plan,
                                     method.finalize_init, method.finalize_step, budget)
            clients = method.finalize_result(local, state.w, clients, ids)
    finite = _rows_finite(clients, torch.as_tensor(everyone, device=trial.device))
    diverged_at = state.diverged_at if finite or state.diverged else state.round
    return replace(state, clients=clients, diverged_at=diverged_at)


def adapted(trial: Trial, state: SimState, ids: np.ndarray, round_idx: int) -> dict:
    """An adaptive attack's state for this round (``Effect.adapt``), or the state as it is: the attack adapts in
    rounds that hold a malicious device, before they train, from the global model and their own clean data."""
    effect = trial.threat.effect
    if effect.adapt is None or not effect.active(round_idx):  # every other attack: nothing to do, every round
        return state.attack
    bad = ids[trial.threat.malicious[ids]]
    if len(bad) == 0:
        return state.attack
    source = trial.train if trial.clean_train is None else trial.clean_train
    rows = source.rows(bad)
    view = AttackView(state.w.detach(), trial.model, source.x[rows], source.y[rows], round_idx)
    adapt = trial.work.wrapped(ATTACK_WORK, effect.adapt)  # the attacker's own work (``simulation.work``)
    return adapt(dict(state.attack), view, torch_stream(trial.cfg.seed, ADAPT, round_idx, device="cpu"))


def run_round(trial: Trial, state: SimState) -> SimState:
    """One round, the trial's pipeline (``fedarena.round_stages``): draw, local work, device stages, server stages,
    the method's server step, after-round stages; returns the new state (per-client tables updated in place)."""
    t = state.round
    drawn = draw_clients(trial, t, state.server)
    senders = np.sort(drawn)  # the devices drawn, then an audit's canaries (ids from the number of devices on)
    ids = senders[senders < trial.dataset.num_clients]
    attack = adapted(trial, state, ids, t)
    pool = _round_data(trial, ids, t, attack)
    rows = torch.as_tensor(ids, device=trial.device)
    saved = _snapshot(state.clients, rows)
    updates, clients = [], state.clients
    budget = budgets(trial, pool, ids, t)
    for group in trial.backend.groups(ids) if len(ids) else ():  # a round may draw only an audit's canaries
        upd, clients = train_group(trial, state.w, clients, pool, group, t, of_group(budget, ids, group))
        updates.append(upd)
    stacked, trained = _stacked(state.w, updates), rows
    reporting = trial.participation.reporting(ids, t)  # who fails to report (None: every drawn device reports)
    if reporting is not None:  # the rounds of a deployment (``fedarena.system``): only the reports go on
        senders = ids = ids[reporting]
        drawn = drawn[np.isin(drawn, ids)]
        keep = torch.as_tensor(reporting, device=stacked.device)
        stacked, rows = stacked[keep], rows[keep.to(rows.device)]
    rule = trial.participation.rule_for(trial.aggregate, len(senders), trial.cfg.clients_per_round)  # f follows n
    if rule is not None and trial.participation.undefined(rule, len(senders)):
        return _skipped(state, clients, attack)
    tally = trial.participation.tallied(state.part(SYSTEM), ids)  # what the rule aggregates (the lab's: nothing)
    if tally:
        state = replace(state, parts={**state.parts, SYSTEM: tally})
    losses = _global_losses(trial, state.w, ids) if trial.needs_losses else None
    who = rows if len(senders) == len(ids) else torch.as_tensor(senders, device=trial.device)
    info = ServerInfo(trial.weights[who], losses, who, trial.cfg.lr, t)  # a tensor index: numpy's costs 15 us
    server = dict(state.server)  # the rule replaces entries, never in place: a dropped round keeps the old ones
    aggregate = round_rule(trial, drawn, t, server, state.w, rule)
    view = StageView(trial, t, senders, aggregate, info.weights, info.losses, server)
    for stage in trial.pipeline.device:  # what the devices send: canaries join, local DP, tampering
        stacked = stage(stacked, view)
    w_new, clients = server_update(trial, state.w, clients, stacked, info, view)
    if not _kept(trial, w_new, clients, trained):  # drop the whole round: global model and the per-client rows it touched
        _restore(clients, saved, trained)
        parts = {**state.parts, ATTACK_STATE: attack}  # the attacker's own state is its, whatever is dropped
        return SimState(t + 1, state.w, clients, state.diverged_at if state.diverged else t, state.history, parts)
    parts = {**state.parts, SERVER: server, ATTACK_STATE: attack}
    for slot, stage in trial.pipeline.after_round:  # what observes the released model (a privacy audit)
        parts[slot] = stage(parts.get(slot, {}), w_new - state.w, view)
    return SimState(t + 1, w_new, clients, state.diverged_at, state.history, parts)


def round_rule(trial: Trial, drawn: np.ndarray, round_idx: int, server: dict, w: torch.Tensor, rule=None):
    """The trial's rule for the round (``rule``: with the f that follows the round's reports, ``Participation.
    rule_for``): with its view of the round (``round_draw``; the others never read the draw), whose round inputs
    (FLTrust's root update) are the server's work too."""
    aggregate = trial.aggregate if rule is None else rule
    if aggregate is None or not aggregate.needs_round:
        return aggregate
    with trial.work.measured(SERVER_WORK):
        return aggregate.for_round(round_draw(trial, drawn, round_idx, server, w))


def server_update(trial: Trial, w: torch.Tensor, clients: dict, stacked: torch.Tensor, info: ServerInfo,
                  view: StageView) -> tuple[torch.Tensor, dict]:
    """(the new global model, clients): the server stages wrap the round's rule (central DP), then the method's server
    step runs it on what the senders sent (the server's work, ``simulation.work``)."""
    rule = view.rule
    for stage in trial.pipeline.server:
        rule = stage(rule, view)
    with trial.work.measured(SERVER_WORK, step=True):  # a round the rule ran: server_ms is per such round
        return trial.method.server_step(w, clients, stacked, info, rule)


def _skipped(state: SimState, clients: dict, attack: dict) -> SimState:
    """A round whose reports are too few for the server rule (``system.on_undefined: skip``): the global model and
    the server's state stay; the devices keep what they trained; the skip is counted (``SYSTEM`` part)."""
    part = state.part(SYSTEM)
    skipped = part.get("skipped", torch.zeros(1, dtype=torch.long)) + 1
    parts = {**state.parts, ATTACK_STATE: attack, SYSTEM: {**part, "skipped": skipped}}
    return SimState(state.round + 1, state.w, clients, state.diverged_at, state.history, parts)


def _kept(trial: Trial, w_new: torch.Tensor, clients: dict, rows: torch.Tensor) -> bool:
    """Whether the round's result is finite. Under DP only the released model decides (its clipping zeroed
    non-finite updates): a device's own tables never leave it, so they cannot drop a round."""
    return _all_finite(w_new) and (trial.privacy is not None or _rows_finite(clients, rows))


def _stacked(w: torch.Tensor, updates: list[torch.Tensor]) -> torch.Tensor:
    """The devices' updates [n, d] in id order (one group, batched: no copy; none: no row)."""
    if not updates:
        return w.new_zeros((0, w.numel()))
    return updates[0] if len(updates) == 1 else torch.cat(updates)


def _snapshot(clients: dict, rows: torch.Tensor) -> dict:
    """The round's clients' rows of every per-client table (vectors of one number per client: whole)."""
    return {k: v.clone() if v.dim() == 1 else v[rows].clone() for k, v in clients.items()}


def _restore(clients: dict, saved: dict, rows: torch.Tensor) -> None:
    for key, old in saved.items():
        if clients[key].dim() == 1:
            clients[key].copy_(old)
        else:
            clients[key].index_copy_(0, rows, old)


def _global_losses(trial: Trial, w: torch.Tensor, ids: np.ndarray) -> torch.Tensor:
    """Each selected client's training loss at the current global model (k-loss, TERM, q-FFL)."""
    # per backend group: the sequential backend then sees each client's data unpadded (batch norm statistics)
    return torch.cat([trial.backend.loss(w.expand(len(g), -1), gather_all(trial.train, g))
                      for g in trial.backend.groups(ids)])


def _rows_finite(clients: dict, rows: torch.Tensor) -> bool:
    return all(_all_finite(table[rows]) for table in clients.values())


def _all_finite(values: torch.Tensor) -> bool:
    """Whether every value is finite. A finite sum says so in one pass (a NaN or an infinity makes the sum one);
    a sum that is not (those, or an overflow of finite values) is settled by the largest magnitude (max propagates
    a NaN): two passes where ``isfinite(values).all()`` takes five."""
    if not values.is_floating_point() or values.numel() == 0:
        return True
    return math.isfinite(values.sum().item()) or math.isfinite(values.abs().max().item())  # a tensor's isfinite: 4 kernels


def evaluate_state(trial: Trial, state: SimState) -> tuple[Counts, dict[str, float]]:
    """The test counts of every client and the metrics (test, and benign validation accuracy)."""
    params = trial.method.eval_params(state.w, state.clients)
    keys = [None, None]
    if trial.model.eval_dropout:  # a model that drops at evaluation too (seeded per evaluated round)
        keys = [int(k) for k in stream(trial.cfg.seed, DROPOUT_EVAL, state.round).integers(2**32, size=2)]
    counts = evaluate(trial.model, params, trial.test, trial.dataset.num_classes, key=keys[0])
    if trial.backdoor_test is not None:  # a targeted attack: its triggered test samples, scored as "target"
        backdoor = evaluate(trial.model, params, _triggered(trial, state), trial.dataset.num_classes, key=keys[0])
        counts = replace(counts, backdoor=backdoor)
    val = evaluate(trial.model, params, trial.val, trial.dataset.num_classes, key=keys[1])
    metrics = compute_metrics(counts, trial.threat.malicious, state.diverged, val)
    for metric in trial.pipeline.evaluation:  # a certificate (CRFL's radius), an audit's measured epsilons
        metrics.update(metric(trial, state))
    return counts, metrics


def _triggered(trial: Trial, state: SimState) -> Pooled:
    """The backdoor's test samples, stamped with the attack's current trigger where it changes (A3FL)."""
    restamp = trial.threat.effect.backdoor.restamp
    if restamp is None:
        return trial.backdoor_test
    stamped = restamp(trial.backdoor_test.x, state.attack)
    if trial.test_stamp_check is not None:
        trial.test_stamp_check(trial.backdoor_test.x, stamped)
    return replace(trial.backdoor_test, x=stamped)


# what a round is, by the trial's system (``fedarena.system``): the synchronous round here; asynchronous aggregation's
# server step registers itself from ``simulation.buffered`` (which reads this module's parts of a round)
ROUND_STEPS: dict[str, Callable] = {SYNCHRONOUS: run_round}


def round_kind(trial: Trial) -> Callable[[Trial, SimState], SimState]:
    name = trial.participation.spec.name
    step = ROUND_STEPS.get(name)
    if step is None:
        raise RuntimeError(f"system {name!r} has no round registered here: import fedarena.simulation.buffered "
                           f"(run_experiment does)")
    return step


def _no_phase(name: str):
    return contextlib.nullcontext()


def simulate(trial: Trial, state: SimState | None = None,
             on_round: Callable[[SimState, dict | None], None] | None = None,
             meter: CostMeter | None = None, step: Callable[[Trial, SimState], SimState] | None = None
             ) -> tuple[SimState, Counts]:
    """Run the remaining rounds; evaluate every ``eval_every`` rounds and after the last one (after the
    method's ``finalize`` phase, if it has one).

    ``on_round(state, metrics_or_None)`` is called after every round (progress bars, checkpoints, Ray).
    A diverged run stops (``on_divergence=stop``) or goes on without the non-finite update (``continue``).
    ``meter`` times the training rounds (``round``) and evaluations (``eval``). ``step``: what a round is (None: the
    trial's system's, ``round_kind``: ``run_round``, or a server step of asynchronous aggregation).
    """
    cfg = trial.cfg
    state = state or initial_state(trial)
    step = step or round_kind(trial)
    phase = meter.phase if meter is not None else _no_phase
    counts = None
    while state.round < cfg.rounds:
        with phase("round"):
            state = step(trial, state)
        stop = state.diverged and cfg.on_divergence == "stop"
        if state.round == cfg.rounds and trial.method.finalize_epochs and not stop:
            with phase("finalize"):
                state = finalize(trial, state)
        metrics = None
        if state.round % cfg.eval_every == 0 or state.round == cfg.rounds or stop:
            with phase("eval"):
                counts, metrics = evaluate_state(trial, state)
            metrics = {**metrics, **run_properties(trial, state.round)}
            state.history.append({"round": state.round, **metrics})
        if on_round is not None:
            on_round(state, metrics)
        if stop:
            break
    if counts is None:  # resumed after the last evaluation, or zero rounds left
        counts, _ = evaluate_state(trial, state)
    return state, counts
