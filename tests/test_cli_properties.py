"""Properties of bad input (hypothesis): random ``--set key=value`` pairs and flags for ``fedarena run``,
random suite fragments and random YAML text. Either the input is valid or the error is one line that
``fedarena.cli`` prints as ``fedarena: error: ...``; never another exception (a traceback).

Nothing trains: ``--set`` goes through the CLI's parser and ``config_from_args`` and, for a valid config, the
trial set-up without a round (``build_trial``) on offline datasets, the planning checks on others; suites
through ``load_suite`` and ``expand`` (what ``bench run --dry-run`` validates). Examples are derandomized
(the same on every run); FEDARENA_PROPERTY_EXAMPLES=500 explores more.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from fedarena import cli
from fedarena.attacks.base import ATTACKS
from fedarena.config import ExperimentConfig, read_yaml_file
from fedarena.datasets.catalog import DATASETS
from fedarena.errors import ConfigError
from fedarena.methods.aggregators.base import AGGREGATORS
from fedarena.methods.base import METHODS
from fedarena.models.zoo import MODELS
from fedarena.registry import UnknownNameError
from fedarena.sections import KINDS, check_planned_server_rule, resolve_config
from fedarena.simulation.setup import build_trial
from fedarena.suites.grid import expand
from fedarena.suites.parse import load_suite

EXAMPLES = int(os.environ.get("FEDARENA_PROPERTY_EXAMPLES", "60"))
PROPERTY = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 100, database=None,
                    suppress_health_check=[HealthCheck.too_slow])
OFFLINE = ("digits", "synthetic", "point_estimation", "fedtilt_toy")  # generated or shipped: set-up in < 1 s
USER_ERRORS = (ConfigError, UnknownNameError)


def section_keys() -> list[str]:
    """Every ``section.option`` of every registered component (the keys a user may try)."""
    keys = set()
    for section, kind in KINDS.items():
        for name in kind.registry.names():
            keys |= {f"{section}.{key}" for key in kind.keys(name)}
    return sorted(keys)


TOP_KEYS = sorted(set(ExperimentConfig().to_dict()) - {"dataset", "model", "method", "attack", "aggregator"})
KNOWN_KEYS = st.sampled_from(TOP_KEYS + section_keys())
KEYS = st.one_of(  # mostly keys that exist (so that values are tried), some misspelled or malformed
    KNOWN_KEYS, KNOWN_KEYS, KNOWN_KEYS,
    st.sampled_from(sorted({key.split(".", 1)[1] for key in section_keys()})),  # bare names, e.g. lam
    st.sampled_from(["dataset.name", "method.name", "model.name", "dataset.name.x", "nosection.x", "x.y.z", ""]),
    st.from_regex(r"[a-z_]{1,8}(\.[a-z_]{1,8}){0,2}", fullmatch=True),
)
NUMBERS = st.one_of(st.integers(-3, 1000), st.floats(-2, 2),
                    st.sampled_from(["nan", "inf", "-inf", "1e6", "1e-9", "0", "-0.0", "1.5", "0.999"]))
VALUES = st.one_of(
    NUMBERS.map(str),
    st.sampled_from(["true", "false", "null", "~", "[]", "{}", "[1, 2]", "[x]", "[clip]", "[-1]", "{a: 1}",
                     "[1,", "{", "'", "a: b: c", "clip", "k_classes", "iid", "lognormal", "auto"]),
    st.lists(st.integers(-1, 40), max_size=3).map(str),
    st.text(alphabet="abcxyz_019-.:[]{},' ", max_size=12),
)
NAMES = {"dataset": DATASETS, "model": MODELS, "method": METHODS, "attack": ATTACKS, "aggregator": AGGREGATORS}


def flag_values(flag: str):
    return st.sampled_from(NAMES[flag].names() + ["nosuch", "", "Median", "ditto "])


FLAGS = st.fixed_dictionaries({}, optional={
    **{f"--{flag}": flag_values(flag) for flag in NAMES},
    "--level": NUMBERS.map(str),
    "--rounds": st.integers(-1, 3).map(str),
    "--clients-per-round": st.integers(-1, 40).map(str),
    "--lr": NUMBERS.map(str),
    "--backend": st.sampled_from(["sequential", "batched", "gpu"]),
})


def one_line(err: Exception) -> str:
    """The line ``fedarena.cli`` prints for a user error; fails the property if it is not one line."""
    text = f"fedarena: error: {err}"
    assert "\n" not in text.strip(), f"a multi-line error:\n{text}"
    assert str(err).strip(), f"an empty {type(err).__name__} message"
    return text


def check_run_args(argv: list[str]) -> str:
    """'valid' or the one error line, as ``fedarena run`` would end before its first round."""
    try:
        args = cli.build_parser().parse_args(argv)
    except SystemExit as exit_:  # argparse's own message (a type or choice error)
        assert exit_.code == 2
        return "usage error"
    try:
        cfg = cli.config_from_args(args)
        if cfg.dataset["name"] in OFFLINE and cfg.rounds <= 3:
            build_trial(cfg)
        else:
            check_planned_server_rule(resolve_config(cfg))
    except USER_ERRORS as err:
        return f"{type(err).__name__}: {one_line(err)}"
    return "valid"


@PROPERTY
@given(flags=FLAGS, sets=st.lists(st.tuples(KEYS, VALUES), max_size=3))
def test_run_flags_and_sets_are_valid_or_one_error_line(flags, sets):
    argv = ["run", "--out", "unused.json", "--rounds", "1", "--no-progress"]
    argv += [item for pair in flags.items() for item in pair]
    argv += [arg for key, value in sets for arg in ("--set", f"{key}={value}")]
    event(check_run_args(argv).split(":")[0])  # any exception other than a user error fails the property


BASE_SUITE = {
    "name": "prop",
    "fixed": {"clients_per_round": 4, "local_steps": 1},
    "methods": [{"label": "global", "method": {"name": "global"}},
                {"label": "ditto", "method": {"name": "ditto", "lam": 0.1}}],
    "attacks": [{"label": "clean", "attack": {"name": "none"}, "levels": [0.0]},
                {"label": "a1", "attack": {"name": "a1"}, "levels": [0.25]}],
    "scales": {scale: {"fixed": {"rounds": 2}, "seeds": [0],
                       "datasets": [{"label": "synthetic", "dataset": {"name": "synthetic", "num_clients": 8}}]}
               for scale in ("smoke", "quick", "paper")},
}
LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(-2, 50), st.floats(-1, 2), st.just(float("nan")),
    st.sampled_from(["global", "ditto", "median", "krum", "none", "a1", "synthetic", "digits", "nosuch", "",
                     "smoke", "val_acc_pooled", "lr", "aggregator.eps", "a b", "clean"]),
)
PLAUSIBLE = st.sampled_from([  # fragments that fit somewhere, so that edited suites are sometimes valid
    {"name": "median"}, {"name": "krum"}, {"name": "trimmed_mean", "beta": 0.1}, {"name": "ditto", "lam": 1.0},
    {"name": "a2"}, {"name": "sign_flip"}, {"name": "digits", "num_clients": 10}, {"name": "logreg"},
    [0.0, 0.1], [0.2], [0, 1], [1], {"rounds": 3}, {"lr": 0.1}, {"batch_size": 8}, {"clients_per_round": 3},
    {"method": ["global"]}, [{"method": "ditto", "level": 0.25}], {"by": "val_acc_pooled", "over": {"lr": [0.1, 0.2]}},
    [{"when": {"attack": "a1"}, "set": {"aggregator": {"name": "median"}}}], "median_label", 3, 0.5, None,
])
FRAGMENTS = st.recursive(LEAVES, lambda inner: st.one_of(
    st.lists(inner, max_size=3),
    st.dictionaries(st.sampled_from(["name", "label", "levels", "seeds", "fixed", "select", "by", "over",
                                     "when", "set", "method", "attack", "aggregator", "dataset", "model",
                                     "rounds", "lr", "lam", "num_clients", "exclude", "overrides", "nosuch"]),
                    inner, max_size=3)), max_leaves=6)


def paths(data, prefix=()):
    """Every path (keys and list indices) into a nested suite dict."""
    yield prefix
    if isinstance(data, dict):
        for key, value in data.items():
            yield from paths(value, prefix + (key,))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield from paths(value, prefix + (i,))


SUITE_PATHS = [p for p in paths(BASE_SUITE) if p and p[0] != "name"]


def mutated(edits: list[tuple[tuple, object]]) -> dict:
    """The base suite with each path replaced by a random fragment (paths an earlier edit removed are skipped)."""
    suite = yaml.safe_load(yaml.safe_dump(BASE_SUITE))
    for path, fragment in edits:
        target = suite
        try:
            for step in path[:-1]:
                target = target[step]
        except (KeyError, IndexError, TypeError):
            continue
        if isinstance(target, dict) or (isinstance(target, list) and isinstance(path[-1], int)
                                        and path[-1] < len(target)):
            target[path[-1]] = fragment
    return suite


def check_suite_text(text: str) -> str:
    """'valid' or the one error line of ``bench run SUITE --dry-run``'s validation of the file."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "prop.yaml"
        path.write_text(text)
        try:
            suite = load_suite(path)
            for scale in suite.scales:
                expand(suite, scale)
        except USER_ERRORS as err:
            return f"{type(err).__name__}: {one_line(err)}"
    return "valid"


def test_the_base_suite_is_valid():
    assert check_suite_text(yaml.safe_dump(BASE_SUITE)) == "valid"


@PROPERTY
@given(edits=st.lists(st.tuples(st.sampled_from(SUITE_PATHS), st.one_of(FRAGMENTS, PLAUSIBLE, PLAUSIBLE)),
                     min_size=1, max_size=3))
def test_suite_fragments_are_valid_or_one_error_line(edits):
    event(check_suite_text(yaml.safe_dump(mutated(edits))).split(":")[0])


@PROPERTY
@given(text=st.text(alphabet="abnm:,-[]{}'\"\t\n #&*!|>%@`01.", max_size=60))
def test_any_yaml_text_is_valid_or_one_error_line(text):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.yaml"
        path.write_text(text)
        try:
            read_yaml_file(path)
        except ConfigError as err:
            one_line(err)
        check_suite_text(text)
