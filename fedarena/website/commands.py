"""``fedarena site``: the robustness leaderboard as a static site, or ``--verify`` one submission."""

from __future__ import annotations

from pathlib import Path

from fedarena.bench.commands import _number
from fedarena.config import SCALES, folder_arg

OUT = folder_arg("give a folder for the site")
WORK = folder_arg("give a folder for the submissions' own stores")


def add_parser(sub) -> None:
    p = sub.add_parser("site", help="the robustness leaderboard as a static site (cards and verified submissions)")
    p.add_argument("--scale", choices=SCALES, help="the battery's scale (default quick; --verify: the card's)")
    p.add_argument("--out", type=OUT, default="site", help="folder of the site (default ./site)")
    p.add_argument("--submissions", type=Path, help="a folder holding one folder per submission")
    p.add_argument("--verify", type=Path, metavar="SUBMISSION", help="rerun one submission on a fresh store and "
                                                                    "say whether its card is reproduced")
    p.add_argument("--work", type=WORK, default="site_submissions",
                   help="where each submission's own store lives (kept: a rebuild reuses its runs)")
    p.add_argument("--time-limit", type=_number(float, 1), default=7200.0, metavar="SECONDS",
                   help="one submission's evaluation, at most (default 7200)")
    p.add_argument("--memory-limit", type=_number(int, 64), default=8192, metavar="MIB",
                   help="one submission's processes together, at most (default 8192 MiB)")
    p.add_argument("--num-cpus", type=_number(int, 1), help="CPUs of each submission's Ray instance (default: all)")
    p.add_argument("--jobs", type=_number(int, 1), default=1, help="submissions evaluated at once (default 1)")
    p.add_argument("--trust-submissions", action="store_true",
                   help="where bubblewrap cannot start, rerun submissions unsandboxed as this user (marked \"not "
                        "isolated\") instead of rejecting them")
    p.add_argument("--tracking-uri", help="the store of the built-in cards (default: $MLFLOW_TRACKING_URI or "
                                          "sqlite ./mlflow.db)")
    p.set_defaults(func=cmd_site)


def cmd_site(args) -> int:
    import logging

    from fedarena.website.publish import site, verify
    from fedarena.website.verification import REPRODUCING, Limits

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    limits = Limits(args.time_limit, args.memory_limit, args.num_cpus, args.jobs)
    if args.verify is not None:
        entry = verify(args.verify, args.scale, limits, trust_submissions=args.trust_submissions)
        return 0 if entry.status in REPRODUCING else 1  # the card reproduced; the status says how far it is checked
    site(args.scale or "quick", args.out, args.submissions, args.tracking_uri, args.work, limits,
         trust_submissions=args.trust_submissions)
    return 0
