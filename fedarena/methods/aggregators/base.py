"""Registries and shared tensor helpers of the server-side aggregation rules (defenses).

An aggregator is a pure function over the stacked flat client updates of one round:

    agg(updates[n, d], *, weights[n], losses[n] | None, f, **hyperparameters) -> [d]

``weights`` are the clients' aggregation weights, chosen by the engine so that a client's sample count
counts exactly once: all ones under size-proportional sampling (the sampling already counted the sizes), the
sample counts under uniform sampling. ``losses`` are each client's training loss at the current global
model, ``f`` the number of malicious clients assumed among the n. A rule's registry entry
(``AggregatorEntry``) carries its facts: the rule, its feasibility check ``check(n, f, **hyperparameters)``
that raises ``ConfigError`` where the rule is undefined (the rule runs it itself, and ``check_aggregator``
runs it before training), and what it reads besides the updates (``reads``): the losses, the weights, and
``round``, the ``RoundDraw`` of the round (the order the round's clients were drawn in and the round's own seed,
for rules that draw at random such as DnC's coordinates; the rows' client ids and the server's own state across
rounds, for FoolsGold's history; and the value of every round input the rule reads, each made by a provider
registered beside the component that introduced it: ``fedarena.round_inputs``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import torch

from fedarena.errors import ConfigError
from fedarena.registry import Registry
from fedarena.round_inputs import checked_reads, inputs_device_reads

Aggregate = Callable[..., torch.Tensor]
Check = Callable[..., None]



@dataclass(frozen=True)
class AggregatorEntry:
    """A registered rule and its facts."""

    rule: Aggregate
    check: Check
    # what the rule reads besides the updates (``fedarena.round_inputs``): "round" (its ``round`` keyword, the
    # RoundDraw: draw order, seed, client ids, the server's state), "losses" (each client's training loss at the
    # global model), "weights" (the aggregation weights; the others are uniform by definition), and any registered
    # round input, which the rule finds in ``round.inputs`` ("model": the round's global model; "root_update":
    # FLTrust's server update; "probe": DeepSight's probe of the models)
    reads: tuple[str, ...] = ()
    # selects(updates, *, f, [round,] **hyperparameters) -> the indices of the rows a selection rule keeps (Krum,
    # multi-Krum, Bulyan): what an attack tailored to the rule checks; None for a rule that selects no rows
    selects: Callable[..., torch.Tensor] | None = None
    # sensitivity(n, f, [bound], **hyperparameters) -> how far the rule's output moves, in units of the clip bound, when
    # one of n updates clipped to that bound is replaced by another (replace-one adjacency): central DP scales its
    # noise to it (``fedarena.privacy``; ``sensitivity_at`` passes the round's bound to a function that declares it);
    # None: not known, so the rule is refused under central DP
    sensitivity: Callable[..., float] | None = None
    # whether the rule needs only the sum of the updates, which secure aggregation reveals (the mean), rather than
    # each update (Krum, the median); a callable of the rule's hyperparameters where they decide it
    sum_only: bool | Callable[..., bool] = False
    # whether the rule keeps state per client across rounds (FoolsGold's history, keyed by ``round.ids``): it
    # cannot follow a pre-aggregator that merges clients' rows (bucketing)
    per_client: bool = False
    # certify(trial, state, **hyperparameters) -> run properties from the run's state at each evaluation (CRFL: the
    # certified radius of its pre-noise model); None: the rule certifies nothing. ``reports``: the properties it
    # gives, each with whether higher is better (None: neither), so that the store logs them and the tables read them
    certify: Callable[..., dict] | None = None
    reports: Mapping[str, bool | None] = field(default_factory=dict)
    # whether the rule may remove clients from the federation (``server[EXCLUDED]``, FLDetector): the engine stops
    # drawing them, so no one knows before the run how often a device takes part (local DP's accounting needs it)
    excludes: bool = False
    # the tasks the rule is defined for (``FederatedDataset.task``); empty: every task. CRFL's certificate votes over
    # class predictions, so it is refused on other tasks before training, not at its first evaluation
    tasks: tuple[str, ...] = ()
    # what the rule reads from the devices besides the update each sends (``fedarena.privacy.dp_trial.READS``), on top
    # of what its round inputs take (``device_reads``: "losses" where it reads them, "device_data" for FLTrust's root
    # set of raw training samples); DP refuses a rule that reads anything its noise does not cover
    declared_device_reads: tuple[str, ...] = ()

    @property
    def needs_losses(self) -> bool:
        return "losses" in self.reads

    @property
    def uses_weights(self) -> bool:
        return "weights" in self.reads

    @property
    def needs_round(self) -> bool:
        """Whether the rule takes the ``round`` keyword (its draw, or an input it finds there)."""
        return any(name not in ("losses", "weights") for name in self.reads)

    @property
    def device_reads(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((*self.declared_device_reads, *inputs_device_reads(self.reads))))

    @cached_property
    def _sensitivity_reads_bound(self) -> bool:
        return self.sensitivity is not None and "bound" in inspect.signature(self.sensitivity).parameters

    def sensitivity_at(self, n: int, f: int, bound: float, **params) -> float:
        """``sensitivity`` for n updates clipped to ``bound`` (the round's clip bound, given to a sensitivity function
        that declares a ``bound`` keyword: a rule whose own bound may lie inside the clip, norm bounding's fixed
        max_norm)."""
        extra = {"bound": bound} if self._sensitivity_reads_bound else {}
        return self.sensitivity(n, f, **extra, **params)

    def needs_each_update(self, **params) -> bool:
        """Whether the rule reads the individual updates with these hyperparameters (secure aggregation hides
        them)."""
        return not (self.sum_only(**params) if callable(self.sum_only) else self.sum_only)


@dataclass(frozen=True)
class RoundDraw:
    """What a rule may know of the round besides the updates: ``order`` [n], each row's position in the
    round's draw of clients (0: drawn first; the rows themselves come in client-id order), and ``seed``, the
    round's own seed (the engine derives it from the trial's seed stream and the round), from which a rule
    draws what it draws at random.

    The engine also fills ``ids`` [n], each row's client id (``ServerInfo.ids``); ``server``, the run's
    server-side state (a dict of tensors kept in ``SimState.server``, checkpointed and resumed with it),
    which a rule may read and write by replacing entries (never modifying a tensor in place: the engine
    hands a rule a shallow copy, keeps it only if the round is kept, and an adaptive attacker's queries
    leave it unchanged); and ``inputs``, the round's value of each registered round input the trial's rules read
    (``fedarena.round_inputs``: ``inputs["root_update"]``, FLTrust's server update; ``inputs["model"]``, the
    round's global model). A rule called directly gets None for each unless its caller builds the draw."""

    order: torch.Tensor
    seed: int = 0
    ids: torch.Tensor | None = None
    server: dict | None = None
    inputs: Mapping[str, Any] = field(default_factory=dict)

    def input(self, name: str) -> Any:
        """The round's value of input ``name``, None where the round has none (a direct call's draw)."""
        return self.inputs.get(name)

    def __getattr__(self, name: str) -> Any:
        """The older spelling of the inputs that were fields (``round.model``, ``round.root_update``,
        ``round.probe``): a plugin written against it still runs."""
        if name in LEGACY_INPUTS:
            return self.__dict__.get("inputs", {}).get(name)
        raise AttributeError(f"'RoundDraw' object has no attribute {name!r}")

    @classmethod
    def rows_in_order(cls, n: int) -> RoundDraw:
        """The draw of a rule called directly: rows drawn in their order, seed 0."""
        return cls(torch.arange(n))

    def generator(self) -> torch.Generator:
        """A CPU generator seeded with the round's seed: the same draws on every device and after a resume."""
        return torch.Generator().manual_seed(self.seed)

    def draw_sorted(self, scores: torch.Tensor) -> torch.Tensor:
        """Indices of ``scores`` ascending, ties in draw order (a stable sort of the rows taken as drawn)."""
        drawn = torch.argsort(self.order.to(scores.device), stable=True)
        return drawn[torch.argsort(scores[drawn], stable=True)]


AGGREGATORS: Registry[AggregatorEntry] = Registry("aggregator")
LEGACY_INPUTS = ("model", "root_update", "probe")  # once fields of RoundDraw (``RoundDraw.__getattr__``)
# the server state's entry of a rule that removes clients (an entry with ``excludes``): bool [clients], True for a
# client the engine must no longer draw (ids beyond its length are in)
EXCLUDED = "excluded"
PRE_ARGUMENTS = ("f", "round")  # what a pre-aggregator may read besides its options


@dataclass(frozen=True)
class PreAggregatorEntry:
    """A registered pre-aggregator: ``fn(updates [n, d], *, [f], [round], **options) -> [m, d]``, given the
    trial's f and the round's ``RoundDraw`` where it declares them; ``check(n, f, **options)`` raises ConfigError
    where it is undefined; one that merges rows (m < n, bucketing) says how many it leaves (``rows(n,
    **options)``) and which input rows make each output row (``members(n, round, **options)``)."""

    fn: Callable[..., torch.Tensor]
    check: Callable[..., None] | None = None
    rows: Callable[..., int] | None = None
    members: Callable[..., list[torch.Tensor]] | None = None
    # what it reads from the devices besides the update each sends (as ``AggregatorEntry.device_reads``)
    device_reads: tuple[str, ...] = ()
    # the registered round inputs it reads from ``round.inputs`` (``fedarena.round_inputs``; it then takes ``round``)
    inputs: tuple[str, ...] = ()

    def __call__(self, updates: torch.Tensor, *, f: int = 0, round: RoundDraw | None = None,
                 **options) -> torch.Tensor:
        given = {"f": f, "round": round}
        return self.fn(updates, **{k: v for k, v in given.items() if k in self.reads}, **options)

    @cached_property
    def reads(self) -> frozenset[str]:
        """Which of ``PRE_ARGUMENTS`` the function declares (read once: it is called every round)."""
        return frozenset(PRE_ARGUMENTS) & set(inspect.signature(self.fn).parameters)

    @property
    def reads_round(self) -> bool:
        return "round" in self.reads

    @property
    def merges_rows(self) -> bool:
        return self.members is not None

    def output_rows(self, n: int, **options) -> int:
        return n if self.rows is None else self.rows(n, **options)


PRE_AGGREGATORS: Registry[PreAggregatorEntry] = Registry("pre-aggregator")


def names_of(value, owner: str, key: str) -> tuple[str, ...]:
    """A registration's tuple of names; one string is refused (taken as a tuple it would be its letters)."""
    if isinstance(value, str):
        raise ConfigError(f"{owner} declares {key}={value!r}: a tuple of names, not one string")
    return tuple(value)


def pre_aggregator(name: str, *, version: int = 1, check: Callable[..., None] | None = None,
                   rows: Callable[..., int] | None = None, members: Callable[..., list[torch.Tensor]] | None = None,
                   device_reads: tuple[str, ...] = (), inputs: tuple[str, ...] = ()):
    """Register ``fn(updates [n, d], *, [f], [round], **options) -> [m, d]`` as pre-aggregator ``name``
    (``aggregator: {pre: [name, {name: other, option: value}]}``): its options are its other keyword-only
    parameters, with their defaults; see ``PreAggregatorEntry``."""

    declared = checked_reads(inputs, f"pre-aggregator {name!r}")  # a string is refused, not split into letters

    def decorator(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        if declared and "round" not in inspect.signature(fn).parameters:
            raise ConfigError(f"pre-aggregator {name!r} reads {', '.join(declared)} but takes no 'round' keyword")
        entry = PreAggregatorEntry(fn, check, rows, members, names_of(device_reads, f"pre-aggregator {name!r}",
                                                                      "device_reads"), declared)
        PRE_AGGREGATORS.add(name, entry, version=version)
        return fn

    return decorator

# Coordinate-wise rules process at most this many elements at once (bounds sort/topk memory at d ~ 1e6+).
CHUNK_ELEMENTS = 1 << 22


def client_table(server: dict, key: str, rows: int, shape: tuple, fill, like: torch.Tensor) -> torch.Tensor:
    """The server state's per-client table ``key`` [rows, *shape] on ``like``'s device and dtype (bool where ``fill``
    is), made on first use and grown with ``fill`` rows where higher client ids appear; the state's entry is not
    modified (a rule replaces it)."""
    dtype = torch.bool if isinstance(fill, bool) else like.dtype
    current = server.get(key)
    if current is None:
        return torch.full((rows, *shape), fill, dtype=dtype, device=like.device)
    current = current.to(device=like.device, dtype=dtype)
    if current.shape[0] < rows:
        current = torch.cat([current, current.new_full((rows - current.shape[0], *shape), fill)])
    return current


def check_common(n: int, f: int, **params) -> None:
    """The check of rules defined for every n >= 1 and f >= 0."""
    if n < 1:
        raise ConfigError(f"an aggregator needs at least one update, got n={n}")
    if f < 0:
        raise ConfigError(f"the number of malicious clients f must be >= 0, got f={f}")


# the flags ``reads`` replaced, still taken, each as what it gave a rule: ``needs_round`` the draw with the round's
# model (a field of the draw then), ``needs_root`` FLTrust's root update, ``needs_probe`` DeepSight's probe
LEGACY_READS = {"needs_losses": ("losses",), "uses_weights": ("weights",), "needs_round": ("round", "model"),
                "needs_root": ("round", "root_update"), "needs_probe": ("round", "model", "probe")}


def aggregator(name: str, *, check: Check | None = None, reads: tuple[str, ...] = (), version: int = 1,
               effective: dict[str, Callable] | None = None, selects: Callable[..., torch.Tensor] | None = None,
               sensitivity: Callable[..., float] | None = None, sum_only: bool | Callable[..., bool] = False,
               per_client: bool = False, search: dict | None = None, certify: Callable[..., dict] | None = None,
               reports: Mapping[str, bool | None] | None = None, excludes: bool = False,
               tasks: tuple[str, ...] = (), device_reads: tuple[str, ...] = (), **flags: bool):
    """Register ``fn`` as aggregator ``name`` with its feasibility check, what it reads besides the updates
    (``reads``: see ``AggregatorEntry``; the older flags ``needs_losses``, ``uses_weights``, ``needs_round``,
    ``needs_root``, ``needs_probe`` are taken as the reads they stand for), its version (bump it with any change
    of its numbers), the values its null hyperparameters stand for (``Registry.add``), for a rule that keeps some
    rows the function that says which (``selects``), its sensitivity to one clipped update (``sensitivity``,
    central DP) and whether it needs only the updates' sum (``sum_only``, secure aggregation; default: it needs
    each update), the search space of its hyperparameters (``search``, what ``fedarena tune`` explores), a
    certificate it computes from the run's state at each evaluation (``certify``, with the properties it ``reports``:
    name -> whether higher is better), the tasks it is defined for (``tasks``; default every one), whether it removes
    clients
    (``excludes``) and what else it reads from the devices besides their updates and its inputs
    (``device_reads``)."""
    unknown = sorted(set(flags) - set(LEGACY_READS))
    if unknown:
        raise TypeError(f"aggregator() got unexpected keyword arguments {unknown}; allowed besides its own: "
                        f"{', '.join(LEGACY_READS)}")
    # checked before joining the flags' reads: a string would otherwise split into letters, each a "name"
    declared = checked_reads(checked_reads(reads, f"aggregator {name!r}")
                             + tuple(r for k, on in flags.items() if on for r in LEGACY_READS[k]), f"aggregator {name!r}")
    reports = dict(reports or {})
    if (certify is None) != (not reports) or not all(v in (True, False, None) for v in reports.values()):
        raise ConfigError(f"aggregator {name!r}: a certify hook and the properties it reports come together "
                          f"(reports={{name: higher is better, True, False or None}}); got certify={certify!r}, "
                          f"reports={reports!r}")

    def decorator(fn: Aggregate) -> Aggregate:
        if any(r not in ("losses", "weights") for r in declared) and "round" not in inspect.signature(fn).parameters:
            raise ConfigError(f"aggregator {name!r} reads {', '.join(declared)} but takes no 'round' keyword: the "
                              "round's draw and inputs reach it as round=RoundDraw(...)")
        AGGREGATORS.add(name, AggregatorEntry(fn, check_common if check is None else check, declared, selects,
                                              sensitivity, sum_only, per_client, certify, reports, excludes,
                                              names_of(tasks, f"aggregator {name!r}", "tasks"),
                                              names_of(device_reads, f"aggregator {name!r}", "device_reads")),
                        version=version, effective=effective, search=search)
        return fn

    return decorator


def mean_sensitivity(n: int, f: int, **params) -> float:
    """The uniform mean's: one of n clipped updates moves by at most 2 bounds, the mean by 2 / n."""
    return 2.0 / n


def ball_sensitivity(n: int, f: int, **params) -> float:
    """A rule whose output stays in the ball of radius the bound (a convex combination of the clipped updates,
    or of copies shrunk further): any two outputs differ by at most its diameter, 2 bounds."""
    return 2.0


def check_updates(updates: torch.Tensor, f: int) -> int:
    """Validate the stacked updates and f; return n."""
    if updates.dim() != 2:
        raise ConfigError(f"updates must be a 2-D tensor [n, d], got shape {tuple(updates.shape)}")
    if not updates.is_floating_point():
        raise ConfigError(f"updates must be floating point, got {updates.dtype}")
    n = updates.shape[0]
    check_common(n, f)
    return n


def as_vector(values: torch.Tensor, like: torch.Tensor, what: str) -> torch.Tensor:
    """``values`` as a [n] tensor with the dtype and device of ``like``."""
    vec = torch.as_tensor(values).to(device=like.device, dtype=like.dtype).reshape(-1)
    if vec.shape[0] != like.shape[0]:
        raise ConfigError(f"{what} has {vec.shape[0]} entries for {like.shape[0]} updates")
    return vec


def normalised_weights(weights: torch.Tensor, updates: torch.Tensor) -> torch.Tensor:
    """Aggregation weights as [n] weights summing to one; negative counts or a zero total are errors."""
    vec = as_vector(weights, updates, "weights")
    if bool((vec < 0).any()) or not bool(vec.sum() > 0):
        raise ConfigError(f"weights must be non-negative with a positive sum, got {vec.tolist()}")
    return vec / vec.sum()


def require_losses(losses: torch.Tensor | None, updates: torch.Tensor, rule: str) -> torch.Tensor:
    if losses is None:
        raise ConfigError(
            f"aggregator {rule!r} needs each client's training loss at the global model; got none"
        )
    return as_vector(losses, updates, "losses")


def column_blocks(x: torch.Tensor) -> list[slice]:
    """Column ranges of at most ``CHUNK_ELEMENTS`` elements of x [n, d]."""
    n, d = x.shape
    width = max(1, CHUNK_ELEMENTS // max(n, 1))
    return [slice(start, min(start + width, d)) for start in range(0, d, width)]


def columnwise(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """A coordinate-wise reduction of x [n, d] -> [d], block by block to bound temporary memory: ``fn`` gets
    a contiguous [c, n] block (one coordinate per row; reducing along rows is faster) and returns [c]."""
    return torch.cat([fn(x[:, cols].T.contiguous()) for cols in column_blocks(x)])


def median_along(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Median along ``dim`` with the np.median convention: for an even count, the mean of the middle two; NaN
    where the values hold a NaN (as ``torch.median``)."""
    count = x.shape[dim]
    if count % 2:
        return x.median(dim=dim).values  # the middle value; faster than kthvalue
    ordered = x.sort(dim=dim).values  # one sort is 1.3-2.7x faster than two medians (of x and of -x)
    middle = (ordered.select(dim, count // 2 - 1) + ordered.select(dim, count // 2)) / 2
    last = ordered.select(dim, count - 1)  # a NaN sorts last
    return torch.where(last.isnan(), last, middle)


def coordinate_median(x: torch.Tensor) -> torch.Tensor:
    """Coordinate-wise median of x [n, d] -> [d] (np.median convention)."""
    return columnwise(lambda block: median_along(block, 1), x)


def vector_median(values: torch.Tensor) -> torch.Tensor:
    """Median of a 1-D tensor (np.median convention)."""
    return median_along(values, 0)


def row_sq_distances(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """[n] squared L2 distances from the rows of x to v, block by block (no [n, d] temporary)."""
    total = x.new_zeros(x.shape[0])
    for cols in column_blocks(x):
        diff = x[:, cols] - v[cols]
        total += (diff * diff).sum(dim=1)
    return total


def pairwise_sq_distances(x: torch.Tensor) -> torch.Tensor:
    """[n, n] squared L2 distances via |a|^2 + |b|^2 - 2ab on the Gram matrix of the centred updates
    (centring, block by block, limits cancellation when the updates share a large common part)."""
    gram = x.new_zeros(x.shape[0], x.shape[0])
    for cols in column_blocks(x):
        block = x[:, cols] - x[:, cols].mean(dim=0)
        gram += block @ block.T
    sq = gram.diagonal()
    dist = (sq[:, None] + sq[None, :] - 2 * gram).clamp_min(0)
    dist.fill_diagonal_(0)
    return dist


def subset_mean(updates: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """Uniform mean of the given rows, as one matrix-vector product (no copy of the rows)."""
    coeff = updates.new_zeros(updates.shape[0])
    coeff[rows] = 1.0 / rows.numel()
    return coeff @ updates
