"""Submissions written as a hostile submitter would write them (issue 69), as plugin sources.

Each is a plain-mean rule (``mean_of(updates)``) that first tries one way to cheat or reach outside its sandbox;
what it reaches changes its numbers (``CAUGHT`` is added to every coordinate) or leaves a mark the test can see,
so a test tells from the numbers alone whether the attempt worked. ``plugin(kind, **paths)`` fills in the paths
of the builder's files the test wants it to try.
"""

from __future__ import annotations

import os

import pytest

CAUGHT = 1.0  # what a rule adds to its aggregate when it found what it looked for

HEADER = '''
import gc, os, socket, sys, time
import torch
from fedarena import aggregator, check_updates

CAUGHT = {caught}


def mean_of(updates, found):
    return updates.mean(0) + (CAUGHT if found else 0.0)
'''

BODIES = {
    "honest": '''
@aggregator("{name}")
def rule(updates, *, weights, losses, f, factor: float = 1.0):
    check_updates(updates, f)
    return factor * updates.mean(0)
''',
    # writes the card the site would read, then ends its process before anything is measured
    "forged_card": '''
for folder in ("card", os.path.join(os.getcwd(), "card"), {card_dir!r}):
    try:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "card.json"), "w") as out:
            out.write({forged!r})
    except OSError:
        pass
os._exit(0)

@aggregator("{name}")
def rule(updates, *, weights, losses, f):
    return updates.mean(0)
''',
    # walks its callers' frames, then every live object, then the loaded modules, for the trial's threat model
    "oracle_stack": '''
def malicious_rows(n):
    ids, threat = None, None
    frame = sys._getframe(1)
    while frame is not None:
        for value in list(frame.f_locals.values()):
            candidate = getattr(value, "threat", None)
            if threat is None and hasattr(candidate, "malicious"):
                threat = candidate
            if ids is None and type(value).__name__ == "RoundDraw" and value.ids is not None:
                ids = value.ids
        frame = frame.f_back
    if threat is None:
        threat = next((o for o in gc.get_objects() if type(o).__name__ == "ThreatModel"), None)
    if threat is None:
        for module in list(sys.modules.values()):
            threat = threat or next((v for v in vars(module).values() if type(v).__name__ == "ThreatModel"), None)
    if threat is None or ids is None or len(ids) != n or int(ids.max()) >= len(threat.malicious):
        return None
    return torch.as_tensor(threat.malicious)[ids.cpu()]


@aggregator("{name}", reads=("round",))
def rule(updates, *, weights, losses, f, round):
    check_updates(updates, f)
    bad = malicious_rows(updates.shape[0])
    if bad is None or bool(bad.all()):
        return updates.mean(0)
    return updates[~bad.to(updates.device)].mean(0)
''',
    # redraws the malicious devices with fedarena's own code from the public seeds, checked against the round's seed
    "oracle_redraw": '''
from fedarena.attacks.base import draw_malicious
from fedarena.streams import AGGREGATE, ATTACK, keyed_seed, stream


def trial_seed(round_seed):
    for seed in range(5):
        for r in range(60):
            if keyed_seed(seed, AGGREGATE, r) == round_seed:
                return seed
    return None


@aggregator("{name}", reads=("round",))
def rule(updates, *, weights, losses, f, round):
    check_updates(updates, f)
    seed = trial_seed(int(round.seed))
    if seed is None or round.ids is None:
        return updates.mean(0)
    clients = 10  # the smoke battery's devices
    for count in range(1, clients):  # the level is not given: the first count whose draw fits f
        bad = torch.as_tensor(draw_malicious(clients, count, stream(seed, ATTACK), []))[round.ids.cpu()]
        if int(bad.sum()) >= max(f, 1) and not bool(bad.all()):
            return updates[~bad.to(updates.device)].mean(0) + CAUGHT
    return updates.mean(0) + CAUGHT
''',
    # reads the builder's store, another submission's folder and the builder's environment; writes into the site
    "reader": '''
def reach():
    found = bool(os.environ.get("FEDARENA_TEST_SECRET"))
    for path in ({store!r}, {other!r}):
        try:
            with open(path, "rb") as data:
                found = found or bool(data.read(1))
        except OSError:
            pass
    for folder in ({site!r},):
        try:
            with open(os.path.join(folder, "index.html"), "w") as out:
                out.write("defaced")
            found = True
        except OSError:
            pass
    return found


@aggregator("{name}")
def rule(updates, *, weights, losses, f):
    check_updates(updates, f)
    return mean_of(updates, reach())
''',
    # opens a connection to a server the test listens with
    "socket": '''
def call_home():
    try:
        with socket.create_connection(("127.0.0.1", {port}), timeout=2) as conn:
            conn.sendall(b"rows")
        return True
    except OSError:
        return False


@aggregator("{name}")
def rule(updates, *, weights, losses, f):
    check_updates(updates, f)
    return mean_of(updates, call_home())
''',
    # forks without end at its first call
    "forker": '''
@aggregator("{name}")
def rule(updates, *, weights, losses, f):
    while True:
        try:
            os.fork()
        except OSError:
            time.sleep(0.01)
''',
    # sleeps at its first call
    "sleeper": '''
@aggregator("{name}")
def rule(updates, *, weights, losses, f):
    time.sleep(10**6)
''',
    # allocates past its memory limit at its first call
    "hog": '''
HELD = []

@aggregator("{name}")
def rule(updates, *, weights, losses, f):
    while True:
        HELD.append(torch.ones(2**25))  # 128 MiB at a time, touched
''',
}


def plugin(kind: str, name: str | None = None, **paths) -> str:
    """The source of hostile plugin ``kind`` registering aggregator ``name`` (default: the kind)."""
    fill = {"name": name or kind, "store": "/nonexistent", "other": "/nonexistent", "site": "/nonexistent",
            "card_dir": "/nonexistent", "forged": "{}", "port": 9, **paths}
    return HEADER.format(caught=CAUGHT) + BODIES[kind].format(**fill)


def require_sandbox() -> None:
    """Skip where bubblewrap cannot start, or fail where the run must have it (CI: ``FEDARENA_REQUIRE_SANDBOX``)."""
    from fedarena.isolation import bwrap

    reason = bwrap.available()
    if reason and os.environ.get("FEDARENA_REQUIRE_SANDBOX"):
        pytest.fail(f"the sandbox tests must run here: {reason}")
    if reason:
        pytest.skip(reason)
