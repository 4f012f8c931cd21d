"""Distance-based selection: Krum, multi-Krum (Blanchard et al., NeurIPS 2017) and Bulyan (El Mhamdi,
Guerraoui, Rouault, ICML 2018)."""

from __future__ import annotations

import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators.base import (
    CHUNK_ELEMENTS,
    RoundDraw,
    aggregator,
    ball_sensitivity,
    check_common,
    check_updates,
    columnwise,
    median_along,
    subset_mean,
)

# The rule: Krum's pick is the argmin of the scores rounded to 32 significant bits (``quantised``); rows whose scores
# agree to 32 bits (copies, near-duplicates) tie, and ties go to the lowest row. The rounding merges scores that
# truly differ too (a near-duplicate, one coordinate one float32 step apart at d = 1000, often scores alike). Why
# round: the float64 sums of exact squares (``sq_distances``) differ between CPU kernels by at most
# ~(w + d / w) * 2^-53 relative (w the column block: ~3e-12 at d = 3.3M), 75x below the quantum (2^-32, 2.3e-10),
# so scores equal in exact arithmetic (copies of one update, the two rows of the closest pair) round to one value
# on every CPU unless a rounding boundary falls between them: reproducible across CPUs in practice, not by proof.
# A GPU sums other column blocks (``distance_blocks``) in another order: GPU and CPU may still rank apart (no
# reproducibility across devices is claimed). Updates that themselves differ between CPUs (their training rounds
# apart) can rank apart as well, as no quantum can prevent.
SCORE_BITS = 32
# columns per block of ``sq_distances`` on the CPU: an [n, w] float64 block of ~2 MiB stays in cache (2-4x faster
# than blocks of CHUNK_ELEMENTS); a multiple of 64 so every row of a block starts equally aligned
CPU_BLOCK_BYTES = 1 << 21


def distance_blocks(n: int, d: int, device: torch.device) -> list[slice]:
    """Column ranges for ``sq_distances``: fixed by n, d and the device kind, never by the CPU."""
    elements = CPU_BLOCK_BYTES // 8 if device.type == "cpu" else CHUNK_ELEMENTS  # few kernel launches on a GPU
    width = max(64, elements // max(n, 1) // 64 * 64)
    return [slice(start, min(start + width, d)) for start in range(0, d, width)]


def sq_distances(x: torch.Tensor) -> torch.Tensor:
    """[n, n] float64 squared L2 distances as sums of squared differences, symmetric by construction (each pair
    is summed once, for i < j, and mirrored) with an exact zero diagonal. Not |a|^2 + |b|^2 - 2ab: that formula
    cancels (equal rows come out a rounding error apart, not 0) and its BLAS kernels round differently on each
    CPU. Float32 differences and their squares are exact in float64; only the sums round."""
    n = x.shape[0]
    upper = x.new_zeros(n, n, dtype=torch.float64)
    for cols in distance_blocks(n, x.shape[1], x.device):
        block = x[:, cols].double()
        for i in range(n - 1):
            diff = block[i + 1:] - block[i]
            upper[i, i + 1:] += diff.square_().sum(dim=1)
    return upper + upper.T


def quantised(scores: torch.Tensor) -> torch.Tensor:
    """Scores rounded to ``SCORE_BITS`` significant bits (0 and inf stay as they are), so that last-bit
    differences between CPUs do not reorder them."""
    mantissa, exponent = torch.frexp(scores)
    return torch.ldexp(torch.round(mantissa * 2.0**SCORE_BITS), exponent - SCORE_BITS)  # powers of 2: exact


def lowest_first(scores: torch.Tensor) -> torch.Tensor:
    """Row indices by ascending score, ties to the lowest index (a stable sort)."""
    return torch.argsort(scores, stable=True)


def krum_scores(sq_dist: torch.Tensor, neighbours: int, active: torch.Tensor | None = None) -> torch.Tensor:
    """score_i = sum of the ``neighbours`` smallest squared distances from i to the other active updates,
    ``quantised``; inactive rows get +inf. ``sq_dist`` is [n, n] with a zero diagonal (``sq_distances``)."""
    n = sq_dist.shape[0]
    active = torch.ones(n, dtype=torch.bool, device=sq_dist.device) if active is None else active
    excluded = ~active[None, :] | torch.eye(n, dtype=torch.bool, device=sq_dist.device)
    others = sq_dist.masked_fill(excluded, float("inf"))
    scores = quantised(others.topk(neighbours, dim=1, largest=False).values.sum(dim=1))
    return scores.masked_fill(~active, float("inf"))


def check_krum(n: int, f: int, *, reference_mode: bool = False, **params) -> None:
    check_common(n, f)
    if f >= n:
        raise ConfigError(f"krum needs f < n, got n={n}, f={f}")
    if n - f - 2 < 1 and not reference_mode:
        raise ConfigError(
            f"krum scores the n - f - 2 nearest neighbours and needs n - f - 2 >= 1, got n={n}, f={f}"
            " (its robustness guarantee further assumes 2f + 2 < n); reference_mode=true scores k = 0"
            " neighbours there, as Ditto's reference code"
        )


def scored_neighbours(n: int, f: int) -> int:
    """k = n - f - 2 scored neighbours; 0 where that is below 1 (``reference_mode``)."""
    return max(n - f - 2, 0)


def krum_order(updates: torch.Tensor, f: int, reference_mode: bool, draw: RoundDraw | None) -> torch.Tensor:
    """Row indices by ascending Krum score with k = ``scored_neighbours`` neighbours. Ties (of quantised
    scores): the lowest index; in ``reference_mode``, the order the round drew its clients in (Ditto's reference
    code scores the updates in its draw order and ranks them with np.argsort, stable at these sizes)."""
    scores = krum_scores(sq_distances(updates), scored_neighbours(updates.shape[0], f))
    if not reference_mode:
        return lowest_first(scores)
    return (draw or RoundDraw.rows_in_order(updates.shape[0])).draw_sorted(scores)


def krum_selection(updates: torch.Tensor, *, f: int, reference_mode: bool = False,
                   round: RoundDraw | None = None) -> torch.Tensor:
    """The one row Krum returns (``krum``), as a [1] index tensor."""
    check_krum(check_updates(updates, f), f, reference_mode=reference_mode)
    return krum_order(updates, f, reference_mode, round)[:1]


@aggregator("krum", check=check_krum, reads=("round",), version=2, selects=krum_selection,
            sensitivity=ball_sensitivity)
def krum(
    updates: torch.Tensor, *, weights: torch.Tensor, losses: torch.Tensor | None, f: int,
    reference_mode: bool = False, round: RoundDraw | None = None,
) -> torch.Tensor:
    """Krum (Blanchard et al. 2017): score_i = sum of squared L2 distances from update i to its k = n - f - 2
    nearest other updates; return the update with the lowest score (ties: lowest index). Same k as Ditto's
    reference ``krum_average`` (ByzFL uses n - f - 1). Raises where n - f - 2 < 1; like Ditto's experiments
    (f = 5 of n = 10), it runs when 2f + 2 >= n, outside the paper's guarantee. ``reference_mode`` (Ditto's
    reference ``krum_average``): where n - f - 2 < 1, score k = 0 neighbours (every score is 0), and break
    ties by the round's draw order: at k = 0 Krum returns the update of the client drawn first."""
    return updates[krum_selection(updates, f=f, reference_mode=reference_mode, round=round)[0]].clone()


def multi_krum_size(n: int, f: int, m: int | None) -> int:
    return n - f if m is None else m


def check_multi_krum(n: int, f: int, *, m: int | None = None, reference_mode: bool = False) -> None:
    check_krum(n, f, reference_mode=reference_mode)
    if m is not None and (isinstance(m, bool) or not isinstance(m, int)):
        raise ConfigError(f"multi_krum m must be a whole number of updates (or null for n - f), got {m!r}")
    size = multi_krum_size(n, f, m)
    if not 1 <= size <= n:
        raise ConfigError(f"multi_krum averages m updates and needs 1 <= m <= n = {n}, got m={size}")


def multi_krum_selection(updates: torch.Tensor, *, f: int, m: int | None = None, reference_mode: bool = False,
                         round: RoundDraw | None = None) -> torch.Tensor:
    """The m rows ``multi_krum`` averages."""
    n = check_updates(updates, f)
    check_multi_krum(n, f, m=m, reference_mode=reference_mode)
    return krum_order(updates, f, reference_mode, round)[: multi_krum_size(n, f, m)]


@aggregator("multi_krum", check=check_multi_krum, reads=("round",), version=2, selects=multi_krum_selection,
            sensitivity=ball_sensitivity,
            effective={"m": lambda facts: None if facts.f is None else facts.n - facts.f})
def multi_krum(
    updates: torch.Tensor, *, weights: torch.Tensor, losses: torch.Tensor | None, f: int, m: int | None = None,
    reference_mode: bool = False, round: RoundDraw | None = None,
) -> torch.Tensor:
    """Multi-Krum (Blanchard et al. 2017): Krum scores with k = n - f - 2 neighbours; uniform mean of the m
    lowest-score updates, m = n - f by default (Ditto's reference ``mkrum_average``); m = 1 is Krum. Like
    Krum, raises where n - f - 2 < 1, unless ``reference_mode`` (k = 0 there, ties in the round's draw
    order: the mean of the first m clients drawn)."""
    return subset_mean(updates, multi_krum_selection(updates, f=f, m=m, reference_mode=reference_mode, round=round))


def check_bulyan(n: int, f: int, **params) -> None:
    check_common(n, f)
    if n < 4 * f + 3:
        raise ConfigError(f"bulyan needs n >= 4f + 3, got n={n}, f={f} (needs n >= {4 * f + 3})")


def iterated_krum(sq_dist: torch.Tensor, f: int, count: int) -> torch.Tensor:
    """Indices of ``count`` updates chosen one at a time by Krum on the not-yet-chosen ones (Bulyan's
    selection). Krum on r remaining updates scores max(r - f - 2, 1) neighbours (as Flower's Bulyan): the
    paper's recursion reaches r = 2f + 1 < 2f + 3, where r - f - 2 can be < 1. With one neighbour the two
    members of the closest pair tie; like every Krum tie here, it goes to the lowest index."""
    n = sq_dist.shape[0]
    remaining = torch.ones(n, dtype=torch.bool, device=sq_dist.device)
    chosen = []
    for step in range(count):
        left = n - step
        if left == 1:
            best = torch.nonzero(remaining)[0, 0]
        else:
            best = lowest_first(krum_scores(sq_dist, max(left - f - 2, 1), remaining))[0]
        chosen.append(best)
        remaining[best] = False
    return torch.stack(chosen)


def closest_to_median_mean(block: torch.Tensor, keep: int) -> torch.Tensor:
    """Per row of a [c, theta] block, the mean of the ``keep`` values closest to the row's median (NaN where the
    row holds a NaN, as the median). Of values equally far from the median (v and 2 * median - v, or copies), the
    earlier column is kept: a stable sort, where top-k's pick among ties is its kernel's."""
    drop = block.shape[1] - keep
    if drop == 0:
        return block.mean(dim=1)
    wide = block.double()
    median = median_along(wide, 1)
    # float64: v - median is exact for float32 values (and an even count's median, a mean of two) whose magnitudes
    # lie within 2^29 of each other or are 0; float32 rounds 1 + 2^-30 and 1 - 2^-30 both to 1, and the stable
    # sort then keeps the farther value. Further apart, only distances within ~2^-53 relative can still tie.
    distance = (wide - median[:, None]).abs()
    closest = distance.argsort(dim=1, stable=True)[:, :keep]
    # the kept values summed themselves: the total less the dropped ones loses their digits under dropped outliers
    # over 2^29 times larger (1e20 + 0.1 - 1e20 is 0) and is NaN where an infinity is dropped
    mean = wide.gather(1, closest).sum(dim=1) / keep
    return torch.where(median.isnan(), median, mean).to(block.dtype)


def bulyan_selection(updates: torch.Tensor, *, f: int) -> torch.Tensor:
    """The theta = n - 2f rows Bulyan chooses by iterated Krum (``iterated_krum``), in the order chosen."""
    n = check_updates(updates, f)
    check_bulyan(n, f)
    return iterated_krum(sq_distances(updates), f, n - 2 * f)


@aggregator("bulyan", check=check_bulyan, version=2, selects=bulyan_selection)
def bulyan(
    updates: torch.Tensor, *, weights: torch.Tensor, losses: torch.Tensor | None, f: int
) -> torch.Tensor:
    """Bulyan over Krum (El Mhamdi et al. 2018): choose theta = n - 2f updates by iterated Krum (see
    ``iterated_krum``), then in every coordinate average the beta = theta - 2f values closest to the
    coordinate-wise median of the chosen ones (np.median convention for even theta; of values equally far from
    it, the lower row index is kept). Needs n >= 4f + 3."""
    selected = bulyan_selection(updates, f=f).sort().values  # columns in row order: ties go to the lower row
    theta = updates.shape[0] - 2 * f
    return columnwise(lambda block: closest_to_median_mean(block[:, selected], theta - 2 * f), updates)
