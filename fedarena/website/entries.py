"""The leaderboard's entries: a built-in row's card from the site's store, or a submission with its rerun card,
status and submitted metadata; and ``leaderboard.json``, one record per entry with the card's keys, checked by
its JSON schema (``leaderboard.schema.json``, shipped beside this file).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from fedarena.battery.card import Card, claimed_vs_measured
from fedarena.battery.spread import within
from fedarena.website.verification import BUILT_IN, REJECTED

SCHEMA_VERSION = 2  # 2: the statuses of issue 69, checks, per-seed differing cells
SLUG_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-+")


@dataclass
class Entry:
    slug: str  # the entry page's file name (without .html)
    status: str  # one of verification.STATUSES
    card: Card | None  # the measured card (None: rejected)
    name: str = ""  # a submission's name (a built-in row: its component label)
    authors: tuple[str, ...] = ()
    paper: str = ""
    reason: str = ""  # why it was rejected
    differing: list[dict] = field(default_factory=list)  # submitted seeds' cells the rerun did not reproduce
    claims: dict = field(default_factory=dict)
    reproduce: str = ""  # the command that measures the card
    component: str = ""  # aggregator.NAME / method.NAME (also where the card is missing)
    settings: dict = field(default_factory=dict)  # a submission's hyperparameters
    checks: dict | None = None  # a rerun submission's: isolated, sandboxed, reproduced, reviewed, tolerance

    @property
    def not_isolated(self) -> bool:
        """A rerun submission whose code ran beside its trial (a method, or one built with --trust-submissions)."""
        return self.checks is not None and not self.checks["isolated"]

    @property
    def kind(self) -> str:
        return self.component.split(".", 1)[0]

    @property
    def pre_aggregators(self) -> list[str]:
        """The aggregator's pre-aggregators, as its settings name them (``pre``)."""
        pre = self.settings.get("pre") or []
        return [str(p.get("name") if isinstance(p, dict) else p) for p in (pre if isinstance(pre, list) else [pre])]

    def claim_rows(self) -> list[dict]:
        if self.card is None or not self.claims:
            return []
        rows = []
        for what, claimed, measured, interval in claimed_vs_measured(self.card, self.claims):
            rows.append({"setting": what, "claimed": claimed, "measured": measured, "interval": interval,
                         "difference": None if measured is None else measured - claimed,
                         "in_interval": None if not interval else within(claimed, interval)})
        return rows


def builtin_entry(card: Card, scale: str) -> Entry:
    kind, _, name = card.component.partition(".")
    return Entry(slug(card.component), BUILT_IN, card, name=card.component, component=card.component,
                 reproduce=f"fedarena evaluate --{kind} {name} --scale {scale} --out card/")


def slug(text: str) -> str:
    return "".join(c if c in SLUG_CHARS else "_" for c in text) or "entry"


def record(entry: Entry) -> dict:
    """``leaderboard.json``'s record of an entry: the card's keys (a rejected entry: none), its status, the checks
    a rerun submission passed (a built-in row and a rejected submission: null) and submission fields."""
    out = entry.card.to_json() if entry.card is not None else {}
    out.update(entry=entry.slug, status=entry.status, component=entry.card.component if entry.card else entry.component,
               kind=entry.kind, name=entry.name, authors=list(entry.authors), paper=entry.paper or None,
               reason=entry.reason or None, differing=entry.differing, claims=entry.claim_rows(),
               reproduce=entry.reproduce, pre_aggregators=entry.pre_aggregators, checks=entry.checks)
    return out


def leaderboard(entries: list[Entry], battery_version: int, scale: str) -> dict:
    return {"schema_version": SCHEMA_VERSION, "battery_version": battery_version, "scale": scale,
            "entries": [record(e) for e in entries]}


def schema() -> dict:
    """``leaderboard.json``'s JSON schema."""
    path = Path(str(resources.files("fedarena.website") / "leaderboard.schema.json"))
    return json.loads(path.read_text(encoding="utf-8"))


def is_rejected(entry: Entry) -> bool:
    return entry.status == REJECTED
