"""Which runs in a store are current: each run's identity (``simulation.identity``) as it recorded it, or, for
a run a previous release wrote (no ``component_versions`` tag), as far as it can be known.

A run records ``config_hash`` (its identity: values and versions), ``config_key`` (the values alone) and
``component_versions`` (JSON). A previous release recorded only ``config_hash``, the hash of its whole
resolved config, and ``git_sha``; its values are read back from its params, and its versions are version 1
of every component it used where its commit is one whose numbers version 1 describes (``V1_COMMITS``), else
unknown: such a run is stale, shown as such and run again, never deleted.

A run recorded before ``simulation.identity`` folded settings that name what the trial does anyway (an explicit
``backend`` equal to ``auto``'s pick, a ``data_seed`` equal to the seed) recorded the unfolded hash: where its
params give today's identity whose unfolded hash is the one it recorded, it is read under today's (folded)
identity, ``recorded_hash`` keeping the old one (its checkpoint carries it).

A run is current when every component it used has today's version: the registered one, or, for a
component this process does not know (a plugin it did not load), the newest version recorded in the store.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fedarena.config import SECTIONS, ExperimentConfig
from fedarena.errors import ConfigError
from fedarena.registry import UnknownNameError
from fedarena.simulation.identity import (
    FOLDED,
    Identity,
    registered_version,
    stale_components,
    trial_identity,
)

HASH_TAG, KEY_TAG, VERSIONS_TAG = "config_hash", "config_key", "component_versions"
FOLDED_TAG = "identity_folds"  # "true" on runs recorded with folded identities (nothing to refold on read)
CHECKPOINT_HASH_TAG = "checkpoint_config_hash"  # the hash a resumed run's checkpoint carries (recorded before folding)
LEGACY_HASH_TAG = "legacy_config_hash"  # what a previous release recorded as config_hash (set when upgraded)
TRUNCATED = "..."  # the end of a param value cut to MLflow's length limit
DEFAULTS = ExperimentConfig()

# The commits of the previous release whose numbers version 1 of every component reproduces: from 92cf7d3, the
# first after which every change was checked to keep all numbers (the 900-trial quick robustness suite, all
# 26,829 metric values, and a 133-config sweep of every method, rule and attack), to 5fe9821, the last one.
V1_COMMITS = frozenset("""
92cf7d33c647f06b2d31491c8d3e461c97d6f847 80963b2fab75a3172ae2fa7e9a68ef7d56c7f5cd
ff62e0df93fd937129d93f0bff2aa5eac7e22fe1 088b51f476016b767ba9bcffb2585c93ac843112
2830a1f39768c8b897a64e1900dbcf84efb05228 79e8dc07e026a39d9d0d656d5fe94962dedc7d22
df769e20650e02b75e0db12937121d6f4483f5bb a54a6ff41eb4e9f454e31436df2f3524a41b9df4
0066d3d7465949b9d1b8f98e637ffdfacb0f3343 c9c0f6b19d19f994b29d1bb63ef284495e1b2f51
25f3be7691d32a68c7576248fa8b438d30f1016b 46979193eec41be64a7643a363ce8e0544632b8e
98a62ef0e2083445e0e169bbd3130601b209ae80 96b0ef4345cf6ec529ef1b6515654bb65a225acf
5fe9821371413a3a7ddca4f662ebdf4835514741
""".split())


@dataclass(frozen=True)
class RunIdentity:
    """A stored run's identity: ``config_hash`` None where it cannot be known (a previous release's run of an
    unknown commit or config); ``legacy`` for a previous release's run."""

    config_hash: str | None
    config_key: str | None
    versions: dict[str, int | str] | None
    legacy: bool = False
    commit: str = ""
    cell_hash: str | None = None  # today's cell hash where it differs from the recorded one (a refolded run)
    recorded_hash: str = ""  # the hash the run recorded, where it is read under another (a refolded run)

    def why_stale(self, current: Mapping[str, int | str]) -> str:
        """Why this run is not of today's identity (its key being today's): the components whose version differs."""
        if self.versions is None:
            return f"recorded by a previous release at commit {self.commit[:8] or 'unknown'}, whose versions are unknown"
        return ", ".join(stale_components(self.versions, current)) or "its recorded identity differs"


def run_identity(params: Mapping[str, str], tags: Mapping[str, str]) -> RunIdentity:
    """The identity a run recorded, or that of a previous release's run (see the module)."""
    if VERSIONS_TAG in tags:
        try:
            versions = json.loads(tags[VERSIONS_TAG])
        except ValueError:
            versions = None
        today = refolded(params, tags.get(HASH_TAG), versions) if versions and FOLDED_TAG not in tags else None
        if today is not None:
            return RunIdentity(today.config_hash, today.config_key, versions, cell_hash=today.cell_hash,
                               recorded_hash=str(tags[HASH_TAG]))
        return RunIdentity(tags.get(HASH_TAG) if versions else None, tags.get(KEY_TAG), versions)
    commit = str(tags.get("git_sha", ""))
    identity = legacy_identity(params)
    if identity is None:
        return RunIdentity(None, None, None, True, commit)
    if commit not in V1_COMMITS:
        return RunIdentity(None, identity.config_key, None, True, commit)
    versions = {key: 1 for key in identity.versions}
    return RunIdentity(Identity(identity.values, versions).config_hash, identity.config_key, versions, True, commit)


def refolded(params: Mapping[str, str], recorded: str | None, versions: dict[str, int | str]) -> Identity | None:
    """The folded identity, at the versions it ran with, of a run that recorded ``recorded`` before its settings
    were folded (None where nothing folds, or the recorded hash is not the unfolded one of its values and
    versions: then it is read as recorded). At older versions it keeps today's key: stale, and said so."""
    if all(params.get(key, "") in ("", str(getattr(DEFAULTS, key))) for key in FOLDED):  # scalars: str, as logged
        return None  # the cheap test first: only a folded setting written away from its default can fold
    today = legacy_identity(params)
    if today is None or not today.folded:
        return None
    as_run = Identity(today.values, dict(versions), today.folded)
    return as_run if as_run.unfolded.config_hash == recorded else None


def legacy_identity(params: Mapping[str, str]) -> Identity | None:
    """Today's identity of the config a previous release logged as params (None where a value was cut to
    MLflow's length limit, or the config no longer resolves)."""
    if any(str(v).endswith(TRUNCATED) and len(str(v)) >= 500 for v in params.values()):
        return None
    data: dict[str, Any] = {}
    for key, text in params.items():
        parts = key.split(".")
        target = data
        for part in parts[:-1]:
            target = target.setdefault(part, {})
            if not isinstance(target, dict):
                return None
        target[parts[-1]] = parse_param(text)
    data = {k: v for k, v in data.items() if k in {*SECTIONS, *ExperimentConfig().to_dict()}}
    try:
        return trial_identity(ExperimentConfig.from_dict(data))
    except (ConfigError, UnknownNameError, TypeError, ValueError):
        return None


def parse_param(text: str) -> Any:
    """A param value as ``tracking.runs.param_value`` wrote it: JSON for containers and numbers, Python's
    ``str`` for None and booleans, the text itself for strings."""
    special = {"None": None, "True": True, "False": False}
    if text in special:
        return special[text]
    try:
        return json.loads(text)
    except ValueError:
        return text


def current_versions(recorded: Iterable[tuple[dict[str, int | str], int]]) -> dict[str, int | str]:
    """Today's version of every component the runs used: the registered one, else (a plugin not loaded here)
    the version of the newest run that recorded it. ``recorded``: (versions, start time) per run."""
    newest: dict[str, tuple[int, int | str]] = {}
    for versions, start in recorded:
        for key, version in versions.items():
            if key not in newest or start >= newest[key][0]:
                newest[key] = (start, version)
    out = {}
    for key, (_, version) in newest.items():
        registered = registered_version(key)
        out[key] = version if registered is None else registered
    return out


def is_current(identity: RunIdentity, current: Mapping[str, int | str]) -> bool:
    """Whether a run's every component has today's version."""
    if identity.versions is None or identity.config_hash is None:
        return False
    return all(current.get(key) == version for key, version in identity.versions.items())
