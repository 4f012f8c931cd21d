"""Data attacks and model attacks (the threat model of Ditto Definition 1 and beyond)."""

from fedarena.attacks.base import ATTACKS, Effect, ThreatModel, build_threat

__all__ = ["ATTACKS", "Effect", "ThreatModel", "build_threat"]
