"""The privacy section's registered mechanisms (``privacy/mechanisms.py``): their defaults are the papers' and the
docs' (a default moved would change every DP trial that leaves it out), and a bad audit names its mechanism."""

import pytest

from fedarena.errors import ConfigError
from fedarena.privacy.base import PRIVACY


def test_central_dp_defaults_are_dp_fedavgs_and_adaptive_clippings():
    spec = PRIVACY.get("central")(noise_multiplier=1.0)
    # clip 1; Andrew et al. (2021): target quantile 0.5, clip learning rate 0.2; the count's noise worked out later
    assert (spec.name, spec.clip, spec.target_quantile, spec.clip_lr, spec.count_noise) == ("central", 1.0, 0.5, 0.2, None)
    assert (spec.adaptive, spec.secure_aggregation, spec.accountant, spec.audit) == (False, False, "rdp", None)


def test_local_dp_clips_each_update_to_one_by_default():
    spec = PRIVACY.get("local")(noise_multiplier=1.0)
    assert (spec.name, spec.clip, spec.accountant, spec.secure_aggregation) == ("local", 1.0, "rdp", False)


@pytest.mark.parametrize("name", ["central", "local"])
def test_a_bad_audit_names_its_mechanism(name):
    with pytest.raises(ConfigError, match=rf"^privacy '{name}': audit.canaries must be a whole number >= 2"):
        PRIVACY.get(name)(noise_multiplier=1.0, audit={"canaries": 1, "unseen": 4})
