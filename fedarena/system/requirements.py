"""Whether a server rule is defined for the reports a round actually got, and DP's refusal of a deployment its
accountant does not describe."""

from __future__ import annotations

from dataclasses import replace

from fedarena.errors import ConfigError
from fedarena.methods.aggregators.builder import Aggregator, check_rule
from fedarena.system.base import SystemSpec


def following_f(f: int, n: int, per_round: int) -> int:
    """The f of a round that aggregates n reports where a round of the trial draws per_round devices: the trial's
    fraction f / per_round of the n reports, rounded down (``Participation.rule_for``)."""
    return (f * n) // per_round


def undefined_reason(rule: Aggregator, n: int, cache: dict[int, str | None]) -> str | None:
    """Why ``rule`` (with its pre-aggregators and declared f) is undefined on ``n`` rows (its own check: Krum's
    n - f - 2 >= 1, the trimmed mean's n > 2t, Bulyan's n >= 4f + 3, ...), or None where it is defined. Memoised
    per trial in ``cache`` (n -> reason): a round's n takes few values."""
    if n not in cache:
        if n < 1:
            cache[n] = "no device reported"
        else:
            try:
                check_rule(rule, n=n)
                cache[n] = None
            except ConfigError as err:
                cache[n] = str(err)
    return cache[n]


def check_system_privacy(spec: SystemSpec, private: bool, secure_aggregation: bool = False) -> None:
    """A ConfigError where differential privacy meets a deployment whose participation its accountant does not
    describe (the accountant assumes m devices drawn by the sampling and reporting every round), or secure
    aggregation meets asynchronous aggregation (its staleness weights scale each update: the server reads each)."""
    if secure_aggregation and spec.asynchronous:
        raise ConfigError("secure aggregation gives the server only the sum of the updates; system 'asynchronous' "
                          "scales each by its staleness before the rule, so it needs each update: use "
                          "secure_aggregation false or the synchronous system")
    if not private or not spec.partial_participation:
        return
    what = ("asynchronous aggregation" if spec.asynchronous else
            ", ".join(k for k, on in (("failure_rate", spec.failure_rate), ("availability", spec.availability),
                                      ("stragglers dropped", spec.stragglers and spec.straggler_policy == "drop"))
                      if on))
    raise ConfigError(f"differential privacy's accountant assumes clients_per_round devices drawn and reporting each "
                      f"round; system {spec.name!r} with {what} breaks that (its epsilon would not be a bound): use "
                      f"privacy none or the default system {{name: synchronous}}")


def check_asynchronous(spec: SystemSpec, rule: Aggregator | None, per_round: int, devices: int) -> None:
    """Asynchronous aggregation's shape: buffer <= concurrency <= the devices, and the rule defined on a buffer with
    the f that follows it (``following_f``: the trial's f scaled to the buffer)."""
    if not spec.asynchronous:
        return
    concurrency = spec.concurrency or per_round
    if concurrency > devices:
        raise ConfigError(f"system 'asynchronous': concurrency {concurrency} exceeds the {devices} devices")
    if spec.buffer > concurrency:
        raise ConfigError(f"system 'asynchronous': buffer {spec.buffer} exceeds the concurrency {concurrency} "
                          f"(devices in flight; null: clients_per_round): the buffer would never fill")
    if rule is not None:
        try:
            check_rule(replace(rule, f=following_f(rule.f, spec.buffer, per_round)), n=spec.buffer)
        except ConfigError as err:
            raise ConfigError(f"system 'asynchronous' aggregates buffers of {spec.buffer} updates: {err}") from None
