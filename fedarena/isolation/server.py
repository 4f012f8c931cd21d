"""The rule's side of an isolated submission: ``python -m fedarena.isolation.server PLUGIN``, run inside the sandbox.

It imports the plugin (nothing else of the submission's is on this machine's file system inside the sandbox),
answers with its registration as data (``registration``), then serves requests on its standard input. Each trial
(and each one-off call) is a *scope*: a child forked from this process after the import, so a trial's rule starts
from the same freshly imported module every time (no state carried from one trial to the next) at the cost of a
fork, not of an import. After a scope's child ends, this process writes a notice (``seq`` -1) saying how it ended,
so the trial's side can tell a rule that died mid-call from one that answered.

What the plugin prints goes to standard error: standard output carries the answers.
"""

from __future__ import annotations

import inspect
import os
import sys
import traceback
from types import SimpleNamespace

import torch

import fedarena.sections  # noqa: F401  every built-in component registered as built-in before the plugin runs
from fedarena.errors import ConfigError
from fedarena.isolation.wire import Shared, decode, encode, read_frame, write_frame
from fedarena.methods.aggregators.base import AGGREGATORS, RoundDraw
from fedarena.plugins import load_path
from fedarena.registry import Registry
from fedarena.round_inputs import INPUTS

RULE_ARGUMENTS = ("weights", "losses", "f", "round")


def main(argv: list[str]) -> int:
    """``PLUGIN SHARED_FD SHARED_BYTES``."""
    answers = os.fdopen(os.dup(1), "wb")  # the protocol's own descriptor; the plugin's prints go to stderr
    os.dup2(2, 1)
    requests = os.fdopen(0, "rb", buffering=0)
    shared = Shared(int(argv[1]), int(argv[2]))
    try:
        torch.set_num_threads(1)
        source = load_path(argv[0], "the submission")
        names = AGGREGATORS.from_origin(source.origin)
        write_frame(answers, encode({"registration": registration(source.origin, names)}))
    except Exception as err:  # noqa: BLE001 - the submission's own failure, reported to the trial's side as data
        write_frame(answers, encode({"error": _one_line(err)}))
        return 1
    serve(requests, answers, shared)
    return 0


def registration(origin, names: list[str]) -> dict:
    """What the plugin registered, as data: each aggregator's facts, or why it cannot run isolated."""
    others = [f"{registry.kind} {name!r}" for registry in Registry.instances if registry is not AGGREGATORS
              for name in registry.from_origin(origin)]
    return {"aggregators": {name: _facts(name) for name in names}, "others": sorted(others)}


def _facts(name: str) -> dict:
    entry = AGGREGATORS.get(name)
    return {
        "version": AGGREGATORS._versions[name], "reads": list(entry.reads),
        "own_inputs": [r for r in entry.reads if r in INPUTS and INPUTS.origin(r) is not None],
        "parameters": _parameters(entry.rule), "takes_round": "round" in inspect.signature(entry.rule).parameters,
        "selects": entry.selects is not None, "sensitivity": entry.sensitivity is not None,
        "sensitivity_bound": entry._sensitivity_reads_bound,
        "sum_only": "call" if callable(entry.sum_only) else bool(entry.sum_only), "per_client": entry.per_client,
        "certify": entry.certify is not None, "reports": dict(entry.reports), "excludes": entry.excludes,
        "tasks": list(entry.tasks), "device_reads": list(entry.declared_device_reads),
        "effective": sorted(AGGREGATORS.effective(name)), "search": sorted(AGGREGATORS.search(name)),
    }


def _parameters(fn) -> list[dict]:
    """The rule's hyperparameters: its keyword-only parameters but the engine's, with defaults and annotations."""
    out = []
    for name, p in inspect.signature(fn).parameters.items():
        if p.kind is not inspect.Parameter.KEYWORD_ONLY or name in RULE_ARGUMENTS:
            continue
        default = None if p.default is inspect.Parameter.empty else p.default
        out.append({"name": name, "required": p.default is inspect.Parameter.empty, "default": default,
                    "annotation": "" if p.annotation is inspect.Parameter.empty else str(p.annotation)})
    return out


def serve(requests, answers, shared: Shared) -> None:
    """The parent's loop: each ``open`` forks a scope that serves calls until ``close``."""
    while True:
        try:
            request = decode(read_frame(requests), shared)
        except EOFError:
            return
        if request.get("op") != "open":
            write_frame(answers, encode({"seq": request.get("seq"), "ok": False, "kind": "RuntimeError",
                                         "error": f"no open scope for {request.get('op')!r}"}))
            continue
        child = os.fork()
        if child == 0:
            write_frame(answers, encode({"seq": request["seq"], "ok": True, "value": None}))
            os._exit(scope(requests, answers, shared))
        _, status = os.waitpid(child, 0)
        write_frame(answers, encode({"seq": -1, "ended": os.waitstatus_to_exitcode(status)}))


def scope(requests, answers, shared: Shared) -> int:
    """A scope's child: calls until ``close``."""
    while True:
        try:
            request = decode(read_frame(requests), shared)
        except EOFError:
            return 0
        if request["op"] == "close":
            write_frame(answers, encode({"seq": request["seq"], "ok": True, "value": None}))
            return 0
        try:
            value = CALLS[request["what"]](AGGREGATORS.get(request["name"]), **request["args"])
            answer = {"seq": request["seq"], "ok": True, "value": value}
        except Exception as err:  # noqa: BLE001 - the rule's error, reported as data (ConfigError keeps its kind)
            kind = "ConfigError" if isinstance(err, ConfigError) else type(err).__name__
            answer = {"seq": request["seq"], "ok": False, "kind": kind, "error": _one_line(err)}
        write_frame(answers, encode(answer, shared))


def _rule(entry, *, updates, weights, losses, f, round, params):
    draw = _draw(round)
    extra = {"round": draw} if draw is not None else {}
    out = entry.rule(updates, weights=weights, losses=losses, f=f, **extra, **params)
    return {"out": out, "server": draw.server if draw is not None else None}


def _selects(entry, *, updates, f, round, params):
    draw = _draw(round)
    return entry.selects(updates, f=f, **({"round": draw} if draw is not None else {}), **params)


def _draw(round: dict | None) -> RoundDraw | None:
    """The RoundDraw the trial's side sent as data (its server state a copy the rule may replace entries of)."""
    if round is None:
        return None
    return RoundDraw(round["order"], round["seed"], round["ids"], dict(round["server"]), round["inputs"])


def _check(entry, *, n, f, params):
    entry.check(n, f, **params)


def _sensitivity(entry, *, n, f, bound, params):
    return float(entry.sensitivity_at(n, f, bound, **params))


def _sum_only(entry, *, params):
    return bool(entry.sum_only(**params))


def _certify(entry, *, server, params):
    """The rule's certificate from what it kept (its server state), never from the trial."""
    return entry.certify(None, SimpleNamespace(server=dict(server)), **params)


CALLS = {"rule": _rule, "selects": _selects, "check": _check, "sensitivity": _sensitivity, "sum_only": _sum_only,
         "certify": _certify}


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    where = traceback.extract_tb(err.__traceback__)[-1:] if err.__traceback__ else []
    at = f" (at {os.path.basename(where[0].filename)}:{where[0].lineno})" if where else ""
    return f"{text[:400]}{at}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
