"""What each side of a run pays beyond honest training, in every run's ``cost``: the server rule's time per round,
the attacker's time and model passes (a tailored attack's search, A3FL's trigger search, IBA's generator), and the
bytes a device sends and receives per round. Timing reads clocks and counters only: it never changes a number."""

from __future__ import annotations

import contextlib
import math
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from fedarena.models.passes import counting
from fedarena.simulation.costs import synchronized

SERVER, ATTACK = "server", "attack"


@dataclass
class Work:
    """Seconds and model passes per role (``SERVER``: the method's server step with its rule; ``ATTACK``: the
    attacker's tampering, adaptation and per-round corruption), accumulated over a run."""

    seconds: defaultdict = field(default_factory=lambda: defaultdict(float))
    forward: defaultdict = field(default_factory=lambda: defaultdict(int))
    backward: defaultdict = field(default_factory=lambda: defaultdict(int))

    steps: defaultdict = field(default_factory=lambda: defaultdict(int))  # the rounds each role's step ran

    @contextlib.contextmanager
    def measured(self, role: str, step: bool = False):
        """Times the block as ``role``'s work (``step``: it is one round's step of the role, the server's per-round
        cost divides by these). The clock is read after the device's queued kernels (``costs.synchronized``)."""
        synchronized()
        start = time.perf_counter()
        with counting() as passes:
            try:
                yield
            finally:
                synchronized()
                self.seconds[role] += time.perf_counter() - start
                self.forward[role] += passes.forward
                self.backward[role] += passes.backward
                self.steps[role] += step

    def wrapped(self, role: str, fn: Callable) -> Callable:
        """``fn`` measured as ``role``'s work at every call."""
        def measured_call(*args, **kwargs):
            with self.measured(role):
                return fn(*args, **kwargs)
        return measured_call

    def summary(self, rounds: int) -> dict[str, float]:
        """``server_ms`` (the server step per round it ran: a round skipped, too few reports for the rule, costs the
        server nothing and is not counted; NaN where it never ran), ``attack_s``, ``attack_ms`` (per round of the
        ``rounds`` run: the attacker adapts in skipped rounds too), ``attack_forward`` and ``attack_backward`` (model
        passes in all)."""
        per_round = 1000.0 / max(rounds, 1)
        ran = self.steps[SERVER]
        server_ms = 1000.0 * self.seconds[SERVER] / ran if ran else math.nan
        return {"server_ms": server_ms, "attack_s": self.seconds[ATTACK],
                "attack_ms": self.seconds[ATTACK] * per_round, "attack_forward": float(self.forward[ATTACK]),
                "attack_backward": float(self.backward[ATTACK])}


def bytes_per_round(parameters: int, element_size: int, sends_loss: bool, aggregates: bool) -> dict[str, float]:
    """What one drawn device receives (the global model) and sends (its update, and its training loss where the
    method or the rule reads it) in a round; nothing for a method without global aggregation (local training). A
    personal model (Ditto's) never leaves its device."""
    if not aggregates:
        return {"bytes_sent": 0.0, "bytes_received": 0.0}
    return {"bytes_sent": float((parameters + int(sends_loss)) * element_size),
            "bytes_received": float(parameters * element_size)}
