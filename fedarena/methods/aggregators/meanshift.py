"""Flat-kernel mean shift for a few dozen points, vectorised over the seeds (SignGuard's sign clustering).

It follows scikit-learn's ``MeanShift(bandwidth, bin_seeding=True, cluster_all=False)`` and
``estimate_bandwidth(quantile, n_samples)`` step for step (the same seeds, stopping rule, merging of centres
and labelling), at a fraction of the cost of sklearn's per-call validation and neighbour-index builds: a
SignGuard rule call under the adaptive attack clusters 32 times a round. Distances are computed directly,
sqrt(sum (a - b)^2), where sklearn expands ||a||^2 - 2 a.b + ||b||^2: the two round differently (the bandwidth
differs in its last bits), so where a point lies on a radius, or at equal distance from two centres, or the set
of centres changes with a last-bit change of the bandwidth, the two can label it differently (5 of 1,530 rounds
of the quick suite's SignGuard rows; 23 of 4,443 random sign features in a review, every one such a case).
"""

from __future__ import annotations

import numpy as np

MAX_ITER = 300  # sklearn's default
STOP = 1e-3  # a seed stops when its mean moves by at most STOP * bandwidth


def distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[len(a), len(b)] Euclidean distances."""
    return np.sqrt(((a[:, None, :] - b[None, :, :]) ** 2).sum(axis=2))


def estimate_bandwidth(points: np.ndarray, quantile: float = 0.5, n_samples: int = 50) -> float:
    """The mean over (a fixed random subset of ``n_samples``) points of the distance to their
    int(quantile * count)-th nearest point, the point itself counted (sklearn's random_state 0 subset)."""
    sample = points[np.random.RandomState(0).permutation(len(points))[:n_samples]]
    k = max(1, int(len(sample) * quantile))
    kth = np.sort(distances(sample, sample), axis=1)[:, k - 1]
    return (0.0 + kth.sum()) / len(sample)


def bin_seeds(points: np.ndarray, bin_size: float) -> np.ndarray:
    """One seed per occupied bin of a grid of ``bin_size`` (in order of first occupation, float32 bins as
    sklearn's); the points themselves where every point has a bin of its own."""
    bins = dict.fromkeys(tuple(np.round(point / bin_size)) for point in points)
    if len(bins) == len(points):
        return points
    return np.array(list(bins), dtype=np.float32) * bin_size


def climb(seeds: np.ndarray, points: np.ndarray, bandwidth: float) -> tuple[np.ndarray, np.ndarray]:
    """Every seed moved to the mean of the points within ``bandwidth`` until it moves by at most
    STOP * bandwidth (or MAX_ITER moves): (final means, the number of points within at the last move)."""
    means = np.array(seeds, dtype=np.float64)
    counts = np.zeros(len(means), dtype=np.int64)
    moving = np.arange(len(means))
    for step in range(MAX_ITER + 1):
        within = distances(means[moving], points) <= bandwidth
        counts[moving] = within.sum(axis=1)
        moving, within = moving[counts[moving] > 0], within[counts[moving] > 0]  # an empty window stops a seed
        if moving.size == 0:
            break
        new = np.stack([points[rows].mean(axis=0) for rows in within])
        moved = np.linalg.norm(new - means[moving], axis=1)
        means[moving] = new
        moving = moving[(moved > STOP * bandwidth) & (step < MAX_ITER)]
        if moving.size == 0:
            break
    return means, counts


def mean_shift_labels(points: np.ndarray, bandwidth: float) -> np.ndarray:
    """Cluster labels (-1: no centre within ``bandwidth``): the climbed seeds by decreasing (count, centre), a
    centre within ``bandwidth`` of a kept one dropped, each point labelled by its nearest kept centre."""
    means, counts = climb(bin_seeds(points, bandwidth), points, bandwidth)
    intensity = {tuple(mean): int(count) for mean, count in zip(means, counts, strict=True) if count}
    ranked = sorted(intensity.items(), key=lambda item: (item[1], item[0]), reverse=True)
    centres = np.array([centre for centre, _ in ranked])
    near = distances(centres, centres) <= bandwidth
    unique = np.ones(len(centres), dtype=bool)
    for i in range(len(centres)):
        if unique[i]:
            unique[near[i]] = False
            unique[i] = True
    to_centres = distances(points, centres[unique])
    nearest = np.argmin(to_centres, axis=1)
    return np.where(to_centres[np.arange(len(points)), nearest] <= bandwidth, nearest, -1)
