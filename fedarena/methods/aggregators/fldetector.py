"""FLDetector (Zhang, Cao, Jia and Gong, KDD 2022): flag the clients whose updates disagree with the ones predicted
from their own history, and remove them from later rounds.

Variant: the authors' code (zaixizhang/FLDetector at 7e6a414, ``train_*.py`` and ``nd_aggregation.py``): the
predicted update of a client is its previous update plus an L-BFGS Hessian-vector product (``lbfgs_product``,
their ``lbfgs``, the compact representation of Byrd, Nocedal and Schnabel 1994, with ``window`` pairs of the global
model's differences and the aggregate's), its distance the L2 norm of the difference, normalised over the round; a
client's suspicion score is the mean of its last ``window`` distances; the gap statistic (their ``detection1``: k =
1..7, 10 uniform references) decides whether the scores form more than one cluster, and then 2-means (their
``detection``) flags the cluster of higher mean.

Warm-up (``warmup``): no distance, so no score and no detection, in the rule's first ``warmup`` rounds, and never
from an L-BFGS buffer of fewer than ``window`` pairs. The authors compute the product, and so a distance, only from
``e > 20`` on CIFAR-10 (``train_cifar.py:455``, scores kept from ``:483``) and ``e > 50`` on MNIST and FEMNIST
(``train_mnist.py:465``, ``:486``; ``train_femnist.py:382``, ``:411``); their buffer takes a pair a round from
``e > 0`` and keeps 10 (``train_cifar.py:493-500``), so it is full from ``e = 11``, well before. Those are 21 of
2,000 rounds on CIFAR-10 and 51 of 500 on MNIST and of 2,000 on FEMNIST (their ``--nepochs``); the rule is not told
a run's length, and a run here is often 30 rounds, where 21 or 51 leave few scores or none, so ``warmup`` null (the
default) is the least warm-up with the authors' property: the ``window + 1`` rounds that fill the buffer (11). 21 or
51 give the authors' absolute numbers where a run is long enough for them. Where no k meets the gap rule the scores
show no attack and nobody is removed: the authors' ``select_k`` is then never set (their ``detection1`` fails on
it, ``train_cifar.py:157-161``, ``train_mnist.py:120-124``).

Departures, for partial participation (the paper has every client in every round): a client's prediction starts from
its *last* update and the model it was computed at, ``v = w_t - w_tau``; its distance is normalised by the round's
mean distance (theirs: the sum, ``nd_aggregation.py:29``, the same up to the count when every client takes part,
comparable across rounds of different counts here); detection runs in each scored round on the scored clients (at
least eight: k goes to 7) with at least ``min_scores`` distances each (3; theirs waits for 10 rounds of scores with
every client in every round, ``train_cifar.py:486``, which a client drawn in a third of a 30-round run's rounds
rarely reaches; in clean quick runs, digits and mnist_5k with six seeds each, the gap statistic removed an honest
client in 3 of the 12 runs with 1, in 1 with 2 and in 2 with 3: no clear gain at that scale) until it first finds an
attack, then never again, as the authors' CIFAR-10 and FEMNIST scripts, which detect and stop
(``train_cifar.py:486-490``, ``train_femnist.py:414-417``; their MNIST script only records the scores,
``train_mnist.py:486-487``, and writes them at the end, ``:539-544``; run again and again, a gap statistic that
splits honest scores would remove honest clients round after round); k-means is the exact 1-D optimum
(``kmeans_1d``; their scikit-learn KMeans seeks it from random starts) and the references come from the round's
seed. Flagged clients are excluded (``EXCLUDED``: the engine stops drawing them) and this round's aggregate is the
weighted mean of the rows not flagged (the paper's FedAvg variant; where it restarts training after the detection,
the run goes on without them). Memory: two [clients, d] tables (each client's last update and the model it was
computed at), twice FoolsGold's history.

Version 2 (version 1: distances from the rule's second round with 1 to ``window - 1`` pairs, detection from its
``start``-th round, 10, and "no k meets the gap rule" taken for an attack): the warm-up, no removal without a k,
``start`` gone (detection follows the scores).
"""

from __future__ import annotations

import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators.base import (
    EXCLUDED,
    RoundDraw,
    aggregator,
    check_common,
    check_updates,
    client_table,
    normalised_weights,
)

KEY = "fldetector_"  # the prefix of the rule's entries in the server's state
MAX_K, REFERENCES, MIN_SCORED = 7, 10, 8  # the authors' gap statistic: k = 1..7, 10 uniform references


def whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_fldetector(n: int, f: int, *, window: int = 10, warmup: int | None = None, min_scores: int = 3) -> None:
    check_common(n, f)
    for name, value in (("window", window), ("min_scores", min_scores)):
        if not whole(value) or value < 1:
            raise ConfigError(f"fldetector's {name} must be a whole number >= 1, got {value!r}")
    if warmup is not None and (not whole(warmup) or warmup < window + 1):
        # fewer rounds than fill the buffer would change nothing (``scores_now`` waits for it): refused, not ignored
        raise ConfigError(f"fldetector's warmup must be null (the window + 1 = {window + 1} rounds that fill the "
                          f"L-BFGS buffer) or a whole number of rounds >= window + 1 = {window + 1} (the authors': "
                          f"21 on CIFAR-10, 51 on MNIST and FEMNIST), got {warmup!r}")


def warmup_rounds(window: int, warmup: int | None) -> int:
    """The rounds the rule aggregates before its first score: null stands for those that fill the buffer."""
    return window + 1 if warmup is None else warmup


def scores_now(server: dict, window: int, warmup: int) -> bool:
    """Whether this round is scored: ``warmup`` rounds aggregated before it and ``window`` L-BFGS pairs (a round
    whose model did not move adds none, so the count alone does not tell)."""
    done = int(server.get(KEY + "rounds", torch.zeros(())).item())
    pairs = server[KEY + "s"].shape[0] if KEY + "s" in server else 0
    return done >= warmup and pairs >= window


def lbfgs_product(s: torch.Tensor, y: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """B v for each row of v [r, d]: B the L-BFGS approximation (compact form) from the pairs s, y [m, d] of
    successive differences (oldest first), sigma = y_m.s_m / s_m.s_m, as the authors' ``lbfgs``. float64."""
    s, y, v = s.double(), y.double(), v.double()
    sy, ss = s @ y.T, s @ s.T
    lower = sy - sy.triu()  # L: the strictly lower triangle of S^T Y
    sigma = (y[-1] @ s[-1]) / (s[-1] @ s[-1])
    middle = torch.cat([torch.cat([sigma * ss, lower], 1), torch.cat([lower.T, -torch.diag(sy.diagonal())], 1)], 0)
    basis = torch.cat([sigma * s, y])  # [2m, d]
    projected = torch.cat([sigma * s @ v.T, y @ v.T])  # [2m, r]
    return sigma * v - (basis.T @ (torch.linalg.pinv(middle) @ projected)).T


def kmeans_1d(x: torch.Tensor, k_max: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact 1-D k-means by dynamic programming over the sorted values: ([k_max] the least within-cluster sums of
    squares for k = 1..k_max, [n] bool: the upper cluster of the optimal 2-means, in x's order)."""
    order = torch.argsort(x, stable=True)
    xs = x[order].double()
    n = xs.numel()
    first = torch.cat([xs.new_zeros(1), xs.cumsum(0)])
    second = torch.cat([xs.new_zeros(1), (xs * xs).cumsum(0)])
    i, j = torch.meshgrid(torch.arange(n + 1), torch.arange(n + 1), indexing="ij")
    count = (j - i).clamp_min(1).double()
    cost = second[j] - second[i] - (first[j] - first[i]) ** 2 / count  # points i..j-1 as one cluster
    cost = torch.where(j > i, cost.clamp_min(0), torch.inf)
    best = [cost[0]]  # best[k-1][j]: the first j points in k clusters
    for _ in range(1, k_max):
        best.append((best[-1][:, None] + cost).min(0).values)
    split = int(torch.argmin(cost[0] + cost[:, n]))  # 2-means: points split..n-1 form the upper cluster
    upper = torch.zeros(n, dtype=torch.bool)
    upper[order[split:]] = True
    return torch.stack([b[n] for b in best]), upper


def clusters(scores: torch.Tensor, gen: torch.Generator) -> int | None:
    """The authors' gap statistic (``detection1``, their ``select_k``): scores scaled to [0, 1]; for each k, 10 sets
    of uniform references drawn anew (as theirs); the first k with gap(k) >= gap(k + 1) - sd(k + 1) is the number of
    clusters: 1 where the scores are all equal, None where no k up to 6 meets the rule (theirs is then unset)."""
    low, high = scores.min(), scores.max()
    if not bool(high > low):
        return 1
    scaled = (scores.double() - low) / (high - low)
    k_max = min(MAX_K, scaled.numel())
    within = kmeans_1d(scaled, k_max)[0]
    refs = torch.rand(k_max, REFERENCES, scaled.numel(), generator=gen, dtype=torch.float64)
    ref_within = torch.stack([torch.stack([kmeans_1d(r, k + 1)[0][k] for r in refs[k]]) for k in range(k_max)], 1)
    gaps = ref_within.mean(0).log() - within.log()
    spread = ((1.0 + REFERENCES) / REFERENCES) ** 0.5 * ref_within.log().std(0, unbiased=False)
    for k in range(1, k_max):
        if bool(gaps[k - 1] - gaps[k] + spread[k] >= 0):
            return k
    return None


def attack_detected(scores: torch.Tensor, gen: torch.Generator) -> bool:
    """An attack where the gap statistic sees more than one cluster; none where it sees no number (``clusters``
    None: the authors' ``detection1`` fails there, ``train_cifar.py:157-161``): removing clients needs a finding."""
    return clusters(scores, gen) not in (1, None)


def distances(updates: torch.Tensor, ids: torch.Tensor, model: torch.Tensor, server: dict, rows: int) -> torch.Tensor:
    """[n] each row's distance to its predicted update (NaN where the client has no previous update), over the
    round's mean; the L-BFGS pairs must be there (``scores_now``)."""
    n, d = updates.shape
    seen = client_table(server, KEY + "seen", rows, (), False, updates)[ids]
    out = torch.full((n,), torch.nan, dtype=torch.float64, device=updates.device)
    if not bool(seen.any()):
        return out
    last = client_table(server, KEY + "update", rows, (d,), 0.0, updates)[ids[seen]]
    at = client_table(server, KEY + "model", rows, (d,), 0.0, updates)[ids[seen]]
    predicted = last.double() + lbfgs_product(server[KEY + "s"], server[KEY + "y"], model[None] - at)
    dist = (updates[seen].double() - predicted).norm(dim=1)
    out[seen] = dist / dist.mean().clamp_min(1e-30)
    return out


def remember(server: dict, name: str, rows: int, ids: torch.Tensor, values: torch.Tensor, fill) -> None:
    """Write the round's rows of the per-client table ``name`` (a new tensor: never in place)."""
    key = KEY + name
    server[key] = client_table(server, key, rows, tuple(values.shape[1:]), fill, values).index_copy(0, ids, values)


def record_scores(server: dict, ids: torch.Tensor, dist: torch.Tensor, rows: int, window: int) -> None:
    """Shift each scored client's last ``window`` distances and put this round's in front."""
    scored = ~dist.isnan()
    scores = client_table(server, KEY + "scores", rows, (window,), torch.nan, dist)
    if scores.shape[1] != window:
        raise ConfigError(f"fldetector's score table keeps {scores.shape[1]} rounds; window is {window}")
    shifted = torch.cat([dist[:, None], scores[ids, :-1]], 1)
    server[KEY + "scores"] = scores.index_copy(0, ids[scored], shifted[scored])


def detect(server: dict, gen: torch.Generator, device, min_scores: int = 1) -> None:
    """Once (the authors' detection ends their CIFAR-10 and FEMNIST runs): where the gap statistic finds an attack
    among the clients with at least ``min_scores`` distances, flag the upper 2-means cluster of suspicion
    (``server[EXCLUDED]``) and stop detecting."""
    scores = server.get(KEY + "scores")
    if scores is None or KEY + "detected" in server:
        return
    # the tables grow with the highest id seen so far, each when it is written: align the exclusions to the scores
    excluded = client_table(server, EXCLUDED, scores.shape[0], (), False, torch.zeros(0, device=device))
    enough = (~scores.isnan()).sum(1) >= min_scores
    candidates = torch.nonzero(~excluded[: scores.shape[0]] & enough).flatten()
    if candidates.numel() < MIN_SCORED:
        return
    suspicion = scores[candidates].nanmean(1)
    if attack_detected(suspicion.cpu(), gen):
        upper = kmeans_1d(suspicion.cpu(), 2)[1].to(candidates.device)
        server[EXCLUDED] = excluded.index_fill(0, candidates[upper], True)
        server[KEY + "detected"] = torch.tensor(True)


def update_pairs(server: dict, model: torch.Tensor, aggregate: torch.Tensor, window: int) -> None:
    """Add (w_t - w_{t-1}, g_t - g_{t-1}) to the L-BFGS pairs (the last ``window`` kept) and remember w_t, g_t."""
    previous = server.get(KEY + "last_model")
    if previous is not None:
        s, y = (model - previous)[None], (aggregate - server[KEY + "last_aggregate"])[None]
        if bool((s * s).sum() > 0):
            if KEY + "s" in server:
                s, y = torch.cat([server[KEY + "s"], s])[-window:], torch.cat([server[KEY + "y"], y])[-window:]
            server[KEY + "s"], server[KEY + "y"] = s, y
    server[KEY + "last_model"], server[KEY + "last_aggregate"] = model, aggregate


@aggregator("fldetector", check=check_fldetector, reads=("round", "model"), per_client=True, excludes=True, version=2)
def fldetector(updates: torch.Tensor, *, weights: torch.Tensor, losses: torch.Tensor | None, f: int, window: int = 10,
               warmup: int | None = None, min_scores: int = 3, round: RoundDraw | None = None) -> torch.Tensor:
    """FLDetector (Zhang et al., KDD 2022; see the module): after the warm-up (``warmup`` rounds, null: the
    ``window + 1`` that fill the L-BFGS buffer), score each client by how far its update is from the one its history
    predicts, flag the suspicious cluster among the clients with ``min_scores`` distances, and average (with the
    aggregation weights) the rows of the clients not flagged; f is not read. Called directly (no round), the rows
    are clients 0..n-1 with no history: the weighted mean."""
    n, d = check_updates(updates, f), updates.shape[1]
    check_fldetector(n, f, window=window, warmup=warmup, min_scores=min_scores)
    draw = round if round is not None else RoundDraw.rows_in_order(n)
    ids = (torch.arange(n) if draw.ids is None else draw.ids).to(device=updates.device, dtype=torch.long)
    server = {} if draw.server is None else draw.server
    model = updates.new_zeros(d) if draw.input("model") is None else draw.input("model").to(updates)
    rows = int(ids.max()) + 1
    if scores_now(server, window, warmup_rounds(window, warmup)):
        record_scores(server, ids, distances(updates, ids, model, server, rows), rows, window)
        detect(server, draw.generator(), updates.device, min_scores)
    server[KEY + "rounds"] = torch.tensor(int(server.get(KEY + "rounds", torch.zeros(())).item()) + 1)
    kept = ~client_table(server, EXCLUDED, rows, (), False, updates)[ids]
    mean = updates.new_zeros(d)
    if bool(kept.any()):
        share = normalised_weights(weights, updates)[kept].to(updates.dtype)
        mean = (share / share.sum()) @ updates[kept]
    remember(server, "update", rows, ids, updates, 0.0)
    remember(server, "model", rows, ids, model[None].expand(n, d), 0.0)
    remember(server, "seen", rows, ids, torch.ones(n, dtype=torch.bool, device=updates.device), False)
    update_pairs(server, model, mean, window)
    return mean
