"""Whether a trial's server side could run under secure aggregation and under central DP, from what its method
and rule declare (``sum_only``, ``sensitivity``, ``device_reads``; ``dp_trial.check_privacy``'s rules on those
two sections alone, whatever the trial's own privacy section says).

Every benchmark run records the answer as two tags (``SECURE_TAG``, ``CENTRAL_TAG``), so a table, a card or the leaderboard site shows
it for a plugin's row without importing the plugin; a run recorded before the tags existed is answered from
today's registries where its components are registered here (None otherwise).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedarena.errors import ConfigError
from fedarena.methods.aggregators.builder import aggregator_from
from fedarena.methods.base import method_from
from fedarena.privacy.base import PrivacySpec
from fedarena.privacy.dp_trial import check_privacy

SECURE_TAG, CENTRAL_TAG = "runs_under_secure_aggregation", "runs_under_central_dp"
CHECKS = ((SECURE_TAG, PrivacySpec(secure_aggregation=True)), (CENTRAL_TAG, PrivacySpec("central")))


def runs_under(method: Mapping[str, Any], aggregator: Mapping[str, Any]) -> dict[str, bool] | None:
    """{SECURE_TAG: bool, CENTRAL_TAG: bool} for a method section and an aggregator section (as a config holds
    them); None where a component is not registered in this process or the sections do not build."""
    try:  # an unregistered name is an UnknownNameError (a KeyError): not known here
        built = method_from(dict(method))
        rule = aggregator_from({**aggregator, "name": aggregator.get("name", "mean")}, f=0) \
            if built.uses_aggregator else None
    except (ConfigError, TypeError, ValueError, KeyError):
        return None
    out = {}
    for tag, spec in CHECKS:
        try:
            check_privacy(spec, "uniform", built, rule)
            out[tag] = True
        except ConfigError:
            out[tag] = False
    return out


def privacy_tags(config: Mapping[str, Any]) -> dict[str, str]:
    """The two tags of a run of ``config`` ("true" / "false"; none where ``runs_under`` cannot tell)."""
    facts = runs_under(config.get("method") or {}, config.get("aggregator") or {})
    return {} if facts is None else {tag: str(value).lower() for tag, value in facts.items()}


def read_tag(value: Any) -> bool | None:
    """A recorded tag's value as a bool (None: absent or unreadable)."""
    return {"true": True, "false": False}.get(str(value).strip().lower())

