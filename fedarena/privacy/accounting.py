"""Privacy accounting by Google's ``dp-accounting`` (never by hand): the DP events of a run, their epsilon at a
delta, and the noise multiplier that reaches a target epsilon.

Adjacency is *replace one client* (user-level DP: one device's whole data replaced by any other), the relation
dp-accounting supports for fedarena's sampling, a fixed number m of the N clients drawn uniformly without
replacement each round (``SampledWithoutReplacementDpEvent``, Wang, Balle and Kasiviswanathan, AISTATS 2019).
A clipped update moves by at most 2 x clip when its device's data is replaced, so the L2 sensitivity of the
clipped sum (the distance between neighbouring outputs) is Delta = 2 x clip, and one round without sampling is
the Gaussian mechanism with Delta / sigma = 2 / z, where z is DP-FedAvg's multiplier (standard deviation over
clip, McMahan et al., ICLR 2018).

The events here give each Gaussian's noise multiplier as standard deviation over that distance (the update sum:
z / 2), which is how dp-accounting's RDP reads it: RDP(alpha) = alpha / (2 s^2) whatever the relation. Its PLD
under REPLACE_ONE reads it as standard deviation over *half* the distance (neighbours at -1 and +1, the
per-record bound of ``GaussianDpEvent``'s docstring), so ``for_accountant`` doubles every Gaussian's multiplier
for it; giving PLD z / 2 would count replace-one's factor 2 twice. Both readings are those of the dp-accounting
pinned in ``pyproject.toml``; ``tests/test_privacy_accounting.py`` fails if either moves, and checks RDP against
its closed form and PLD against the exact Gaussian mechanism (Balle and Wang, ICML 2018).

Adaptive clipping (Andrew et al., NeurIPS 2021) also releases the noisy count of unclipped updates each round
(replace-one distance 1, noise ``count_noise``): the round's event composes both Gaussians, so a run that states
z spends exactly z's budget (``update_noise`` splits it: 4 / z_Delta^2 + 1 / count_noise^2 = 4 / z^2). Local
DP: each device runs its own Gaussian mechanism in each round it takes part in, with no amplification by the
server's sampling, which the server knows.

Each accountant carries a version (``ACCOUNTANT``), part of a private trial's identity: a change of its numbers
bumps it, so that runs of the old accounting are stale rather than mixed with the new.
"""

from __future__ import annotations

import functools
from importlib import metadata

import dp_accounting
from dp_accounting import mechanism_calibration
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant

from fedarena.errors import ConfigError
from fedarena.privacy.base import ACCOUNTANT, ACCOUNTANTS

REPLACE_ONE = dp_accounting.NeighboringRelation.REPLACE_ONE
ADD_OR_REMOVE = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE  # a privacy audit's claim (``add_remove_epsilon``)
SENSITIVITY_PER_CLIP = 2.0  # replace-one: a clipped update moves by at most 2 x clip
MAX_NOISE_MULTIPLIER = 1e4  # calibration searches z in (0, this]
DEFAULT_DELTA = 1e-5  # at most; N^-1.1 where that is smaller (``default_delta``)
# The factor that turns these events' Gaussian multipliers (noise std / the distance between neighbouring outputs)
# into the accountant's reading: RDP reads them so; PLD under REPLACE_ONE reads std / half that distance (it puts
# neighbours at -1 and +1), hence twice the multiplier
READING = {"rdp": 1.0, "pld": 2.0}



@ACCOUNTANT.register("rdp", version=1)
def rdp_accountant(relation=REPLACE_ONE) -> dp_accounting.PrivacyAccountant:
    """dp-accounting's RDP accountant under replace-one (the default; as pfl-research and TFF report)."""
    return RdpAccountant(neighboring_relation=relation)


@ACCOUNTANT.register("pld", version=2)  # v2: replace-one's factor 2 counted once (v1 counted it twice)
def pld_accountant(relation=REPLACE_ONE) -> dp_accounting.PrivacyAccountant:
    """dp-accounting's PLD accountant under replace-one (no sampling without replacement)."""
    return PLDAccountant(neighboring_relation=relation)


def default_delta(num_clients: int) -> float:
    """delta for N devices when none is given: 1e-5, or N^-1.1 where that is smaller (N above 35,000), so always
    below 1 / N as a meaningful delta must be. (N^-1.1 alone, McMahan et al. 2018's choice for N in the
    hundreds of thousands, is 0.079 at N = 10 and 0.024 at N = 30.)"""
    return min(DEFAULT_DELTA, float(num_clients) ** -1.1)


def update_noise(noise_multiplier: float, count_noise: float | None) -> float:
    """z_Delta, the noise multiplier of the update sum when the clipped count also spends part of the budget:
    (z^-2 - (2 sigma_b)^-2)^-1/2 (Andrew et al. 2021, Theorem 1), so that the two releases together cost z.
    Without a count (fixed clipping) it is z."""
    if count_noise is None or noise_multiplier == 0:
        return noise_multiplier
    rest = noise_multiplier ** -2 - (2 * count_noise) ** -2
    if rest <= 0:
        raise ConfigError(f"privacy: adaptive clipping's count_noise={count_noise:g} must exceed noise_multiplier / "
                          f"2 = {noise_multiplier / 2:g} (its release alone would spend more than the budget); "
                          f"raise count_noise or lower the noise multiplier")
    return rest ** -0.5


def round_mechanism(noise_multiplier: float, count_noise: float | None) -> dp_accounting.DpEvent:
    """One round's release, each Gaussian's multiplier the noise over its replace-one distance: the update sum
    (z_Delta / 2: distance 2 clip) and, with adaptive clipping, the clipped count (count_noise: distance 1); no
    noise at all is a non-private event (epsilon infinite). An accountant reads it through ``for_accountant``."""
    if noise_multiplier == 0:
        return dp_accounting.NonPrivateDpEvent()
    # floats always: dp-accounting's RDP of sampled Gaussians reads an int multiplier as its own stop signal
    # (rdp_privacy_accountant.py's isinstance(sigma, float)) and drops the other release: count_noise 2 gave
    # epsilon 3.68 where 2.0 gives 47.0
    update = dp_accounting.GaussianDpEvent(float(update_noise(noise_multiplier, count_noise)) / SENSITIVITY_PER_CLIP)
    if count_noise is None:
        return update
    return dp_accounting.ComposedDpEvent([update, dp_accounting.GaussianDpEvent(float(count_noise))])


def central_event(noise_multiplier: float, num_clients: int, per_round: int, rounds: int,
                  count_noise: float | None = None) -> dp_accounting.DpEvent:
    """``rounds`` rounds of DP-FedAvg: each samples ``per_round`` of ``num_clients`` without replacement."""
    mechanism = round_mechanism(noise_multiplier, count_noise)
    if isinstance(mechanism, dp_accounting.NonPrivateDpEvent):
        return mechanism
    if per_round < num_clients:
        mechanism = dp_accounting.SampledWithoutReplacementDpEvent(num_clients, per_round, mechanism)
    return dp_accounting.SelfComposedDpEvent(mechanism, rounds)


def local_event(noise_multiplier: float, participations: int) -> dp_accounting.DpEvent:
    """A device's own Gaussian mechanism over the ``participations`` rounds it took part in."""
    return dp_accounting.SelfComposedDpEvent(round_mechanism(noise_multiplier, None), participations)


def accountant(name: str, relation=REPLACE_ONE) -> dp_accounting.PrivacyAccountant:
    """A fresh accountant of ``name`` (rdp | pld) under replace-one adjacency (or ``relation``: a privacy audit's
    add-or-remove claim)."""
    if name not in ACCOUNTANT:
        raise ConfigError(f"privacy accountant must be one of {', '.join(ACCOUNTANTS)}; got {name!r}")
    return ACCOUNTANT.get(name)(relation)


def for_accountant(name: str, event: dp_accounting.DpEvent) -> dp_accounting.DpEvent:
    """``event`` as accountant ``name`` reads it: every Gaussian's multiplier times ``READING[name]`` (PLD under
    REPLACE_ONE: doubled, see the module's docstring)."""
    scale = READING[name]
    return event if scale == 1.0 else _scaled(event, scale)


def _scaled(event: dp_accounting.DpEvent, scale: float) -> dp_accounting.DpEvent:
    if isinstance(event, dp_accounting.GaussianDpEvent):
        return dp_accounting.GaussianDpEvent(event.noise_multiplier * scale)
    if isinstance(event, dp_accounting.ComposedDpEvent):
        return dp_accounting.ComposedDpEvent([_scaled(e, scale) for e in event.events])
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        return dp_accounting.SelfComposedDpEvent(_scaled(event.event, scale), event.count)
    if isinstance(event, dp_accounting.SampledWithoutReplacementDpEvent):
        return dp_accounting.SampledWithoutReplacementDpEvent(event.source_dataset_size, event.sample_size,
                                                              _scaled(event.event, scale))
    if isinstance(event, (dp_accounting.NonPrivateDpEvent, dp_accounting.NoOpDpEvent)):
        return event
    raise TypeError(f"no reading of {type(event).__name__} for another accountant")  # fedarena makes none


def check_supported(name: str, event: dp_accounting.DpEvent) -> None:
    """A ConfigError where the accountant cannot account for the event (dp-accounting's PLD has no sampling
    without replacement)."""
    if not accountant(name).supports(event):
        raise ConfigError(f"privacy accountant {name!r} cannot account for {type(_inner(event)).__name__} "
                          f"(dp-accounting {metadata.version('dp-accounting')}); use accountant rdp (the default), "
                          "or pld under local DP or where every device takes part in every round")


def _inner(event: dp_accounting.DpEvent) -> dp_accounting.DpEvent:
    return event.event if isinstance(event, dp_accounting.SelfComposedDpEvent) else event


def epsilon(name: str, event: dp_accounting.DpEvent, delta: float) -> float:
    """The event's epsilon at ``delta`` (infinity for a non-private event)."""
    acc = accountant(name)
    acc.compose(for_accountant(name, event))
    return float(acc.get_epsilon(delta))


@functools.lru_cache(maxsize=4096)
def central_epsilon(name: str, noise_multiplier: float, num_clients: int, per_round: int, rounds: int,
                    delta: float, count_noise: float | None = None) -> float:
    """epsilon after ``rounds`` rounds of central DP (cached: the trials of a suite share their accounting)."""
    if rounds == 0:
        return 0.0
    return epsilon(name, central_event(noise_multiplier, num_clients, per_round, rounds, count_noise), delta)


@functools.lru_cache(maxsize=4096)
def local_epsilon(name: str, noise_multiplier: float, participations: int, delta: float) -> float:
    """epsilon of one device under local DP after ``participations`` rounds."""
    if participations == 0:
        return 0.0
    return epsilon(name, local_event(noise_multiplier, participations), delta)


@functools.lru_cache(maxsize=256)
def calibrate(name: str, target_epsilon: float, delta: float, make: tuple) -> float:
    """The smallest noise multiplier z whose epsilon is at most ``target_epsilon`` (z within 1e-7), searched by
    dp-accounting's calibration. ``make``: ("central", N, m, rounds, count_noise) or ("local", participations).
    A target no noise reaches is a ConfigError: under adaptive clipping z stays below 2 x count_noise (the
    count's own release bounds epsilon from below)."""
    kind, *args = make

    def event(z: float) -> dp_accounting.DpEvent:
        return central_event(z, *args) if kind == "central" else local_event(z, *args)

    count_noise = args[3] if kind == "central" else None
    upper = MAX_NOISE_MULTIPLIER if count_noise is None else 2 * count_noise * (1 - 1e-9)
    least = epsilon(name, event(upper), delta)
    if least > target_epsilon:
        why = (f"; adaptive clipping keeps z below 2 x count_noise = {2 * count_noise:g}: raise count_noise"
               if count_noise is not None else "")
        raise ConfigError(f"privacy: target_epsilon={target_epsilon:g} is out of reach at delta={delta:.3g} in "
                          f"{_rounds(make)}: the most noise allowed (z={upper:g}) gives epsilon {least:.4g}{why}")
    if count_noise is None:  # doubling from z = 1 brackets the answer in fewer accountant calls than (0, max]
        bracket = mechanism_calibration.LowerEndpointAndGuess(0.0, 1.0)
    else:
        bracket = mechanism_calibration.ExplicitBracketInterval(1e-6, upper)
    return float(mechanism_calibration.calibrate_dp_mechanism(
        lambda: accountant(name), lambda z: for_accountant(name, event(z)), target_epsilon, delta, bracket,
        tol=1e-7))


def _rounds(make: tuple) -> str:
    if make[0] == "central":
        return f"{make[3]} rounds of {make[2]} of {make[1]} devices"
    return f"{make[1]} rounds of one device"



@functools.lru_cache(maxsize=1024)
def add_remove_epsilon(name: str, noise_multiplier: float, rounds: int, delta: float,
                       count_noise: float | None = None) -> float:
    """epsilon at ``delta`` of one device's ``rounds`` releases without sampling, under add-or-remove adjacency:
    the device's clipped update present or absent moves the sum by at most one clip (multiplier z_Delta, the
    update's noise over the clip) and adaptive clipping's count by one (multiplier ``count_noise``). Both
    accountants read a Gaussian's multiplier so under this relation. What a canary audit's estimate is held
    against where every device takes part in every round (``privacy.audit``)."""
    if rounds == 0:
        return 0.0
    z = update_noise(noise_multiplier, count_noise)
    if z == 0:
        return float("inf")
    step = dp_accounting.GaussianDpEvent(float(z))
    if count_noise is not None:
        step = dp_accounting.ComposedDpEvent([step, dp_accounting.GaussianDpEvent(float(count_noise))])
    acc = accountant(name, ADD_OR_REMOVE)
    acc.compose(dp_accounting.SelfComposedDpEvent(step, rounds))
    return float(acc.get_epsilon(delta))
