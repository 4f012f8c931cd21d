"""The privacy audit's estimators measured (``python -m fedarena.perf.audit_estimators``; docs/semantics.md,
"Privacy audit"): printed, never asserted.

- ``ideal``: both estimates (``empirical.fitted_epsilon``, two variances fitted apart; ``equal_variance_epsilon``,
  one shift in the null's variance) on ideal Gaussian statistics of the privacy suite's ``audit_eps10`` row
  (mnist_5k, quick scale: its noise multiplier, rounds and delta, every client every round): a canary's statistic
  N(mu, 1), an unseen direction's N(0, 1), mu = sqrt(T) / z (one clip present or absent, T rounds of noise z clip).
  Their median and 10-90% range over ``--runs`` draws at each K, beside the exact add/remove epsilon; and how often
  the flag's equal-variance lower bound lies above it, for the correct mechanism (a false flag) and with the noise
  halved (a caught leak). ``--row audit_eps3``: the other audited row (a smaller shift: less power).
- ``accuracy``: what K does to the audited model: its test accuracy with 0, 100 and 1,000 canaries (every client
  every round, so the noise multiplier stays the row's).
- ``trials``: the real audit path, the suite's ``audit_eps10`` trial (FedAvg, mnist_5k, quick scale) at ``--seeds``
  seeds, and at ``--halved`` seeds with the server's noise halved (a test-only fault): the flags, the estimates and
  their median against the exact add/remove epsilon.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

import fedarena.privacy.dp_trial as dp_trial
from fedarena.config import ExperimentConfig
from fedarena.privacy import accounting
from fedarena.privacy.audit import AuditSpec
from fedarena.privacy.empirical import equal_variance_epsilon, equal_variance_interval, fitted_epsilon
from fedarena.simulation.experiment import run_experiment
from fedarena.suites.grid import expand
from fedarena.suites.parse import load_suite

ROW = "audit_eps10"  # the privacy suite's audited row whose statistics are simulated
DATASET, SCALE, METHOD = "mnist_5k", "quick", "global"


def audited_trial(seed: int, confidence: float | None = None, row: str = ROW) -> ExperimentConfig:
    """The privacy suite's audited trial (FedAvg, clean, ``DATASET`` at ``SCALE``, its ``row``) at ``seed`` (at
    another ``confidence`` of its intervals and flag where given)."""
    for trial in expand(load_suite("privacy"), SCALE, dataset=DATASET, seeds=(seed,)):
        if trial.name == f"{METHOD} {DATASET} clean {row} s{seed}":
            if confidence is None:
                return trial.config
            data = trial.config.to_dict()
            audit = {**data["privacy"]["audit"], "confidence": confidence}
            return ExperimentConfig.from_dict({**data, "privacy": {**data["privacy"], "audit": audit}})
    raise LookupError(f"the privacy suite has no trial {METHOD} {DATASET} clean {row} at seed {seed}")


def mechanism(cfg: ExperimentConfig) -> dict[str, float]:
    """The audited trial's mechanism: z, T, delta, the shift mu of one canary's final statistic and the
    add/remove epsilons (exact: dp-accounting's PLD; RDP's bound). Full participation, fixed clipping."""
    everyone = cfg.clients_per_round  # the audited rows draw every client (devices and canaries) every round
    delta = cfg.privacy.get("delta") or accounting.default_delta(everyone)
    z = accounting.calibrate("rdp", cfg.privacy["target_epsilon"], delta, ("central", everyone, everyone,
                                                                         cfg.rounds, None))
    return {"z": z, "rounds": cfg.rounds, "delta": delta, "mu": math.sqrt(cfg.rounds) / z,
            "confidence": cfg.privacy["audit"].get("confidence", AuditSpec.confidence),
            "exact": accounting.add_remove_epsilon("pld", z, cfg.rounds, delta),
            "rdp": accounting.add_remove_epsilon("rdp", z, cfg.rounds, delta)}


def ideal_estimates(mu: float, canaries: int, unseen: int, delta: float, runs: int,
                    rng: np.random.Generator, confidence: float = 0.95) -> dict[str, np.ndarray]:
    """Both estimates and the equal-variance interval's lower end over ``runs`` draws of ideal statistics."""
    out: dict[str, list[float]] = {"fitted": [], "equal_variance": [], "lower": []}
    for _ in range(runs):
        seen, null = rng.normal(mu, 1.0, canaries), rng.normal(0.0, 1.0, unseen)
        out["fitted"].append(fitted_epsilon(seen, null, delta))
        out["equal_variance"].append(equal_variance_epsilon(seen, null, delta))
        out["lower"].append(equal_variance_interval(seen, null, delta, confidence)[0])
    return {k: np.array(v) for k, v in out.items()}


def spread(values: np.ndarray) -> str:
    """'median (10-90%: p10-p90)'."""
    p10, p50, p90 = np.quantile(values, [0.1, 0.5, 0.9])
    return f"{p50:.2f} (10-90%: {p10:.2f}-{p90:.2f})"


def ideal(runs: int, canaries: tuple[int, ...], unseen: int, seed: int, confidence: float | None,
          row: str = ROW) -> None:
    facts = mechanism(audited_trial(0, confidence, row))
    print(f"## ideal Gaussian statistics of {row} ({DATASET}, {SCALE}): z = {facts['z']:.4f}, T = {facts['rounds']}, "
          f"delta = {facts['delta']:g}, mu = {facts['mu']:.4f}; add/remove epsilon exact (PLD) {facts['exact']:.3f}, "
          f"RDP {facts['rdp']:.3f}; U = {unseen} unseen, {runs} draws per K")
    for k in canaries:
        got = ideal_estimates(facts["mu"], k, unseen, facts["delta"], runs, np.random.default_rng([seed, k]),
                              facts["confidence"])
        above = {name: float(np.mean(got[name] > facts["exact"])) for name in ("fitted", "equal_variance", "lower")}
        halved = ideal_estimates(2 * facts["mu"], k, unseen, facts["delta"], runs, np.random.default_rng([seed, k, 2]),
                                 facts["confidence"])  # the server's noise halved: the shift doubled
        print(f"K = {k:>5}: fitted {spread(got['fitted'])} ({above['fitted']:.0%} above exact); equal-variance "
              f"{spread(got['equal_variance'])} ({above['equal_variance']:.0%} above exact); its lower end at "
              f"confidence {facts['confidence']:g} above exact (a false flag) in {above['lower']:.1%}, and with the "
              f"noise halved (a caught leak) in {np.mean(halved['lower'] > facts['exact']):.1%}")


@contextmanager
def halved_noise() -> Iterator[None]:
    """A test-only fault: the server's Gaussian noise at half its standard deviation."""
    real = dp_trial.gaussian
    dp_trial.gaussian = lambda like, std, generator: real(like, std / 2, generator)
    try:
        yield
    finally:
        dp_trial.gaussian = real


def trial_rows(seeds: range, confidence: float | None) -> list[dict]:
    return [run_experiment(audited_trial(seed, confidence))["final"] for seed in seeds]


def describe(rows: list[dict], title: str) -> None:
    if not rows:
        return
    exact = float(np.median([r["epsilon_add_remove"] for r in rows]))
    flags = sum(r["audit_exceeded"] == 1.0 for r in rows)
    print(f"\n## {title}: {len(rows)} seeds at confidence {rows[0]['audit_confidence']:g}, exact add/remove "
          f"epsilon {exact:.3f} (RDP {rows[0]['epsilon_add_remove_rdp']:.3f}); flagged {flags} of {len(rows)}")
    for name in ("epsilon_equal_variance_final", "epsilon_empirical_final", "epsilon_empirical_iterates"):
        values = np.array([r[name] for r in rows])
        print(f"  {name}: median {np.median(values):.3f} ({np.median(values) / exact - 1:+.1%} of exact), "
              f"10-90% {np.quantile(values, 0.1):.3f}-{np.quantile(values, 0.9):.3f}")
    for name in ("epsilon_equal_variance_final_low", "epsilon_lower_bound_final", "epsilon_lower_bound_iterates"):
        values = np.array([r[name] for r in rows])
        print(f"  {name}: median {np.median(values):.3f}, max {values.max():.3f}")
    print("  acc_pooled: median " + f"{np.median([r['acc_pooled'] for r in rows]):.3f}")


def trials(seeds: int, halved: int, confidence: float | None) -> None:
    describe(trial_rows(range(seeds), confidence), f"{ROW}, FedAvg, {DATASET} ({SCALE}): a correct mechanism")
    with halved_noise():
        describe(trial_rows(range(halved), confidence), f"{ROW} with the server's noise halved")


def with_canaries(cfg: ExperimentConfig, canaries: int) -> ExperimentConfig:
    """The audited trial with ``canaries`` canaries (0: no audit), every client still drawn every round (so z, which
    full participation does not amplify, stays the row's)."""
    data = cfg.to_dict()
    devices = data["clients_per_round"] - data["privacy"]["audit"]["canaries"]
    privacy = {k: v for k, v in data["privacy"].items() if k != "audit"}
    if canaries:
        privacy["audit"] = {**data["privacy"]["audit"], "canaries": canaries}
    return ExperimentConfig.from_dict({**data, "privacy": privacy, "clients_per_round": devices + canaries})


def accuracy(canaries: tuple[int, ...], seeds: int) -> None:
    """What K does to the audited model: its test accuracy at each K (every canary joins every round)."""
    print(f"\n## the audited model's accuracy ({ROW}, FedAvg, {DATASET}, {SCALE}; every client every round), "
          f"{seeds} seeds")
    for k in canaries:
        rows = [run_experiment(with_canaries(audited_trial(seed), k))["final"] for seed in range(seeds)]
        acc = [r["acc_pooled"] for r in rows]
        print(f"K = {k:>5}: acc_pooled mean {np.mean(acc):.3f} (seeds: {', '.join(f'{a:.3f}' for a in acc)})")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=("ideal", "trials", "accuracy", "all"), nargs="?", default="all")
    parser.add_argument("--runs", type=int, default=2000, help="ideal: draws per K")
    parser.add_argument("--canaries", type=int, nargs="+", default=[100, 1000], help="ideal: the Ks")
    parser.add_argument("--unseen", type=int, default=1000, help="ideal: unseen directions (the suite's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--row", default=ROW, help="ideal: the privacy suite's audited row (audit_eps10, audit_eps3)")
    parser.add_argument("--seeds", type=int, default=20, help="trials: seeds of the correct mechanism")
    parser.add_argument("--halved", type=int, default=10, help="trials: seeds with the noise halved")
    parser.add_argument("--confidence", type=float, default=None, help="the audit's (default: the suite's)")
    parser.add_argument("--accuracy-canaries", type=int, nargs="+", default=[0, 100, 1000], help="accuracy: the Ks")
    parser.add_argument("--accuracy-seeds", type=int, default=3)
    args = parser.parse_args(argv)
    if args.part in ("ideal", "all"):
        ideal(args.runs, tuple(args.canaries), args.unseen, args.seed, args.confidence, args.row)
    if args.part in ("trials", "all"):
        trials(args.seeds, args.halved, args.confidence)
    if args.part in ("accuracy", "all"):
        accuracy(tuple(args.accuracy_canaries), args.accuracy_seeds)


if __name__ == "__main__":
    main()
