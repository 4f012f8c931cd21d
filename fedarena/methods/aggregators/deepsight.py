"""DeepSight (Rieger, Nguyen, Miettinen and Sadeghi, NDSS 2022): inspect each client's model, cluster the models by
what they look like and how they behave, and drop the clusters where models trained on few labels (a backdoor's
homogeneous data) are common.

Variant: the paper's Algorithm 1 with FLPoison's parameters (vio1etus/FLPoison ``aggregators/deepsight.py``; the
authors released no code). Per client, from its update:
- NEUPs: the output layer's update energy per class, ``|db_k| + sum_j |dW_kj|``, squared and normalised to sum 1;
  threshold exceedings TE: how many exceed ``max(threshold, 1 / classes)`` x the largest; a model is *suspicious*
  where TE <= median(TE) / 2;
- DDifs, what the server runs per client: the local model (global + update) and the global model on ``samples``
  fixed random inputs for each of ``seeds`` sets (uniform between a black and a white pixel,
  ``probe.py``), the mean over the inputs of p_local(x)_k / (p_global(x)_k + 1e-6), one [classes] vector per
  set: (n + 1) x seeds x samples forward passes a round (the defaults: 60,000 inputs a model), each model's
  kept for the round, so an attack's further calls of the rule pay only for the models they change;
- the cosine distances of the output-layer bias updates.
HDBSCAN (scikit-learn's, ``min_samples`` 1 and minimum cluster size 2: a pair of like models is a cluster; FLPoison's
3 and 5 leave every model noise in a round of 10 devices with 2 attackers) clusters the NEUPs, each
DDif set and the cosine distances; two models' ensemble distance is the share of those clusterings (the DDif sets
averaged into one) that part them; HDBSCAN on the ensemble distance (``allow_single_cluster``) gives the final
clusters. A cluster is accepted where fewer than ``tau`` of its models are suspicious; a model HDBSCAN leaves as
noise is a cluster of its own (FLPoison never accepts noise, and lets noise points share a cluster in the ensemble:
the paper treats each as its own cluster). The accepted updates, clipped to the median L2 norm of all the round's
updates, are averaged (uniform mean; no update: the model stays). f and the aggregation weights are not read.
"""

from __future__ import annotations

import numpy as np
import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators.backdoor_defenses import clip_factors
from fedarena.methods.aggregators.base import (
    RoundDraw,
    aggregator,
    check_common,
    check_updates,
    vector_median,
)
from fedarena.methods.aggregators.flame import cosine_distances
from fedarena.methods.aggregators.probe import Probe, digest
from fedarena.round_inputs import RoundView, round_input

RATIO_GUARD = 1e-6  # FLPoison's epsilon: p_local / (p_global + 1e-6)
# HDBSCAN's smallest settings: a pair of like models is a cluster. FLPoison's (min_samples 3, min_cluster_size 5)
# leave every model noise in a round of 10 with 2 attackers, and the ensemble then one cluster of all
MIN_SAMPLES, MIN_CLUSTER = 1, 2
MAX_SEEDS = 8  # noise sets, each a key of the stream AGGREGATE (``probe.py``)


def server_probe(trial) -> Probe:
    """The probe of a trial's models (fixed noise inputs drawn once; the output layer), made while it is built."""
    return Probe.of(trial.model, trial.dataset, trial.cfg.seed, trial.device, trial.aggregate.name)


@round_input("probe", prepare=server_probe)
def probe_of_the_round(view: RoundView) -> Probe:
    """The same probe every round: DeepSight's server probes the same inputs each time."""
    return view.prepared


def check_deepsight(n: int, f: int, *, seeds: int = 3, samples: int = 20000, tau: float = 1 / 3,
                    threshold: float = 0.01) -> None:
    check_common(n, f)
    for name, value, most in (("seeds", seeds, MAX_SEEDS), ("samples", samples, None)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1 or (most and value > most):
            bound = f" and <= {most}" if most else ""
            raise ConfigError(f"deepsight's {name} must be a whole number >= 1{bound}, got {value!r}")
    if not 0 < tau <= 1 or not 0 <= threshold <= 1:
        raise ConfigError(f"deepsight needs 0 < tau <= 1 and 0 <= threshold <= 1; got tau={tau}, threshold={threshold}")


def neups_and_exceedings(weight: torch.Tensor, bias: torch.Tensor, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """([n, classes] normalised update energies, [n] threshold exceedings) of the output layer's updates."""
    energy = (bias.abs() + weight.abs().sum(-1)).double() ** 2
    neups = energy / energy.sum(1, keepdim=True).clamp_min(1e-300)
    bound = max(threshold, 1.0 / neups.shape[1]) * neups.max(1, keepdim=True).values
    return neups.cpu().numpy(), (neups > bound).sum(1).cpu().numpy()


def division_differences(probe, model: torch.Tensor, updates: torch.Tensor, seeds: int, samples: int) -> np.ndarray:
    """[seeds, n, classes]: per noise set, each local model's mean ratio of class probabilities to the global's.

    The global model's probabilities and each row's ratios are kept for the round (``Probe.memo``): the adaptive
    attack's 32 calls a round share the global model and the honest rows, and its candidates one malicious row.
    Each row is computed alone, so its ratios never depend on which rows were computed with it (or before)."""
    memo, rows = probe.memo(model), [digest(u) for u in updates]
    out = []
    for index in range(seeds):
        reference = kept(memo, ("reference", index, samples),
                         lambda index=index: probe.probabilities(model, index, samples) + RATIO_GUARD)
        out.append(torch.stack([kept(memo, ("ratios", index, samples, row),
                                     lambda u=u, index=index, reference=reference:
                                     (probe.probabilities(model + u, index, samples) / reference).mean(0))
                                for u, row in zip(updates, rows, strict=True)]))
    return torch.stack(out).double().cpu().numpy()


def kept(memo: dict, key, compute):
    """``memo[key]``, computed once."""
    if key not in memo:
        memo[key] = compute()
    return memo[key]


def cluster_labels(points: np.ndarray, *, precomputed: bool = False, single: bool = False) -> np.ndarray:
    """HDBSCAN's labels, each noise point (-1) given a cluster of its own."""
    n = points.shape[0]
    if n < 2:
        return np.zeros(n, dtype=np.int64)
    from sklearn.cluster import HDBSCAN  # imported on use: scikit-learn is slow to import

    model = HDBSCAN(min_samples=MIN_SAMPLES, min_cluster_size=MIN_CLUSTER,
                    metric="precomputed" if precomputed else "euclidean", allow_single_cluster=single,
                    copy=True)
    labels = model.fit_predict(points).astype(np.int64)
    noise = labels < 0
    labels[noise] = labels.max(initial=-1) + 1 + np.arange(int(noise.sum()))
    return labels


def parted(labels: np.ndarray) -> np.ndarray:
    """[n, n] 1 where a clustering puts two models apart, 0 where together."""
    return (labels[:, None] != labels[None, :]).astype(np.float64)


def accepted_rows(neups: np.ndarray, exceedings: np.ndarray, ddifs: np.ndarray, bias: torch.Tensor,
                  tau: float) -> np.ndarray:
    """[n] bool: the models in clusters with fewer than ``tau`` suspicious ones (see the module)."""
    suspicious = exceedings <= np.median(exceedings) / 2
    ddif = np.mean([parted(cluster_labels(d)) for d in ddifs], axis=0)
    ensemble = np.mean([ddif, parted(cluster_labels(neups)),
                        parted(cluster_labels(cosine_distances(bias), precomputed=True))], axis=0)
    final = cluster_labels(ensemble, precomputed=True, single=True)
    accepted = np.zeros(len(final), dtype=bool)
    for label in np.unique(final):
        members = final == label
        accepted[members] = suspicious[members].sum() < tau * members.sum()
    return accepted


@aggregator("deepsight", check=check_deepsight, reads=("round", "model", "probe"), version=2)
def deepsight(updates: torch.Tensor, *, weights: torch.Tensor, losses: torch.Tensor | None, f: int, seeds: int = 3,
              samples: int = 20000, tau: float = 1 / 3, threshold: float = 0.01,
              round: RoundDraw | None = None) -> torch.Tensor:
    """DeepSight (Rieger et al., NDSS 2022; see the module): the mean of the updates of the accepted clusters, each
    clipped to the median norm of the round's updates. Reads the round inputs ``probe`` (``probe.py``) and ``model``."""
    check_updates(updates, f)
    probe, model = (None, None) if round is None else (round.input("probe"), round.input("model"))
    if probe is None or model is None:
        raise ConfigError("aggregator 'deepsight' runs the clients' models on the server: it needs the round's "
                          "global model and its probe (round inputs 'model' and 'probe')")
    model = model.to(updates)
    weight, bias = probe.output_layer(updates)
    neups, exceedings = neups_and_exceedings(weight, bias, threshold)
    ddifs = division_differences(probe, model, updates, seeds, samples)
    keep = torch.as_tensor(accepted_rows(neups, exceedings, ddifs, bias, tau), device=updates.device)
    if not bool(keep.any()):
        return updates.new_zeros(updates.shape[1])
    kept = updates[keep]
    return (kept * clip_factors(kept, vector_median(updates.norm(dim=1)))[:, None]).mean(0)  # np.median, as FLPoison
