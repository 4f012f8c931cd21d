"""Asynchronous buffered aggregation (FedBuff, Nguyen et al. AISTATS 2022) on a virtual clock.

``concurrency`` devices train at once, each on the model it received. A server step takes the ``buffer`` earliest
arrivals, lets the attackers among them tamper (the device stages, as in a synchronous round), scales each update by
1 / sqrt(1 + staleness) (staleness: server steps since its device received its model), and applies the trial's rule
(the mean: FedBuff's) through the method's server step; then it dispatches as many new devices, drawn among those not
in flight (the sampling's draw keyed by the step), which train on the new model at once (together: the batched
backend runs them). A trial's ``rounds`` count server steps. Everything in flight (devices, their model versions,
arrival times, updates) and the clock are the run's ``system`` part: saved in every checkpoint and resumed as they
were. Latencies: ``fedarena.system.latency``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from fedarena.methods.aggregators.base import EXCLUDED
from fedarena.methods.base import ServerInfo
from fedarena.round_stages import StageView
from fedarena.simulation.data import drawn_clients
from fedarena.simulation.engine import (
    ATTACK_STATE,
    ROUND_STEPS,
    SERVER,
    SYSTEM,
    SimState,
    _global_losses,
    _kept,
    _round_data,
    _skipped,
    _stacked,
    adapted,
    round_rule,
    server_update,
    train_group,
)
from fedarena.simulation.setup import Trial
from fedarena.system.base import ASYNCHRONOUS
from fedarena.system.latency import first_arrivals, latencies, staleness_weight


def concurrency(trial: Trial) -> int:
    return trial.participation.spec.concurrency or trial.cfg.clients_per_round


def dispatch(trial: Trial, state: SimState, w: torch.Tensor, clients: dict, step: int, count: int,
             busy: np.ndarray, clock: float) -> tuple[dict, dict, dict]:
    """Draw ``count`` devices neither ``busy`` nor removed by the rule (the sampling's draw keyed by ``step``), train them on ``w`` (round key
    ``step``) and give their arrival times: (their in-flight entries, the clients' tables, the attack's state)."""
    cfg, spec = trial.cfg, trial.participation.spec
    excluded = np.zeros(trial.dataset.num_clients, dtype=bool)
    excluded[busy] = True
    if EXCLUDED in state.server:  # a rule removed them (FLDetector; its table covers the ids it has seen)
        removed = state.server[EXCLUDED].cpu().numpy()[: len(excluded)]
        excluded[: len(removed)] |= removed
    if excluded.all() or count < 1 or step >= cfg.rounds:  # nobody left to dispatch, or the run's last step done
        return _nobody(w), clients, state.attack
    ids = np.sort(drawn_clients(cfg.seed, cfg.sampling, trial.train.sizes, count, step, excluded))
    attack = adapted(trial, state, ids, step)
    pool = _round_data(trial, ids, step, attack)
    updates = []
    for group in trial.backend.groups(ids):
        upd, clients = train_group(trial, w, clients, pool, group, step)
        updates.append(upd)
    arrival = clock + latencies(spec, cfg.seed, trial.participation.latency_means, trial.threat.malicious, ids, step)
    entries = {"ids": torch.as_tensor(ids, dtype=torch.long), "version": torch.full((len(ids),), step),
               "arrival": torch.as_tensor(arrival, dtype=torch.float64), "updates": _stacked(w, updates)}
    return entries, clients, attack


def _nobody(w: torch.Tensor) -> dict:
    return {"ids": torch.zeros(0, dtype=torch.long), "version": torch.zeros(0, dtype=torch.long),
            "arrival": torch.zeros(0, dtype=torch.float64), "updates": w.new_zeros((0, w.numel()))}


def _joined(a: dict, b: dict) -> dict:
    return {key: torch.cat([a[key], b[key].to(a[key].device, a[key].dtype)]) for key in a}


def _taken(flight: dict, rows: np.ndarray) -> dict:
    index = torch.as_tensor(rows, dtype=torch.long)
    return {key: value[index.to(value.device)] for key, value in flight.items()}


def in_flight(trial: Trial, state: SimState) -> tuple[dict, float, SimState]:
    """(the updates in flight, the clock, the state): at the first step, ``concurrency`` devices dispatched on the
    initial model at time 0."""
    part = state.part(SYSTEM)
    if "ids" in part:
        flight = {key: part[key] for key in ("ids", "version", "arrival", "updates")}
        return flight, float(part["clock"]), state
    flight, clients, attack = dispatch(trial, state, state.w, state.clients, 0, concurrency(trial),
                                       np.zeros(0, dtype=np.int64), 0.0)
    state = SimState(state.round, state.w, clients, state.diverged_at, state.history,
                     {**state.parts, ATTACK_STATE: attack})
    return flight, 0.0, state




def buffered_round(trial: Trial, state: SimState) -> SimState:
    """One server step: the buffer of the earliest arrivals aggregated, as many devices dispatched."""
    t, spec = state.round, trial.participation.spec
    flight, clock, state = in_flight(trial, state)
    arrival, flown = flight["arrival"].cpu().numpy(), flight["ids"].cpu().numpy()
    first = first_arrivals(arrival, flown, spec.buffer)
    clock = max(clock, float(arrival[first].max()))
    buffer = _taken(flight, first[np.argsort(flown[first], kind="stable")])  # per-round rows in id order
    waiting = _taken(flight, np.setdiff1d(np.arange(len(flown)), first))
    ids = buffer["ids"].cpu().numpy()
    rule = trial.participation.rule_for(trial.aggregate, len(ids), trial.cfg.clients_per_round)  # f follows K
    if rule is not None and trial.participation.undefined(rule, len(ids)):
        # a buffer the rule cannot aggregate (a rule removed devices): discarded, the step counted as skipped
        return _refilled(trial, _skipped(state, state.clients, state.attack), waiting, len(ids), clock)
    state = replace(state, parts={**state.parts, SYSTEM: trial.participation.tallied(state.part(SYSTEM), ids)})
    staleness = t - buffer["version"].cpu().numpy()
    stacked = buffer["updates"].to(state.w.device)
    rows = torch.as_tensor(ids, device=trial.device)
    losses = _global_losses(trial, state.w, ids) if trial.needs_losses else None
    info = ServerInfo(trial.weights[rows], losses, rows, trial.cfg.lr, t)
    server = dict(state.server)
    arrived = ids[np.argsort(buffer["arrival"].cpu().numpy(), kind="stable")]  # the rule's "draw": arrival order
    view = StageView(trial, t, ids, round_rule(trial, arrived, t, server, state.w, rule), info.weights, info.losses, server)
    for stage in trial.pipeline.device:  # what the senders send: an attack tampers with its devices' rows
        stacked = stage(stacked, view)
    scale = torch.as_tensor(staleness_weight(staleness), dtype=stacked.dtype, device=stacked.device)
    stacked = stacked * scale[:, None]  # the server's scaling of late updates
    w_new, clients = server_update(trial, state.w, state.clients, stacked, info, view)
    kept = _kept(trial, w_new, clients, rows)
    parts = {**state.parts, SERVER: server} if kept else dict(state.parts)
    w_next = w_new if kept else state.w
    diverged_at = state.diverged_at if kept or state.diverged else t
    stepped = SimState(t + 1, w_next, clients, diverged_at, state.history, parts)
    return _refilled(trial, stepped, waiting, len(ids), clock)


def _refilled(trial: Trial, stepped: SimState, waiting: dict, count: int, clock: float) -> SimState:
    """The state after a server step (``stepped``: its round counted) with ``count`` devices dispatched on its model
    beside those still ``waiting`` (keyed by the step they start at), and the clock."""
    new, clients, attack = dispatch(trial, stepped, stepped.w, stepped.clients, stepped.round, count,
                                    waiting["ids"].cpu().numpy(), clock)
    system = {**stepped.part(SYSTEM), **_joined(waiting, new), "clock": torch.tensor(clock, dtype=torch.float64)}
    return replace(stepped, clients=clients, parts={**stepped.parts, ATTACK_STATE: attack, SYSTEM: system})



ROUND_STEPS[ASYNCHRONOUS] = buffered_round
