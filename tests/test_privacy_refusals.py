"""Privacy that holds for every combination it accepts (issue 53): a component that reads what a DP mechanism's
noise does not cover (the devices' training losses or raw data; under central DP an attack that reads the honest
updates, before the server clips) is refused in one line before training, from what it declares; every registered
method, aggregator, pre-aggregator and attack is either refused or declares only what the mechanism covers. The
attacks' refusal is measured: with the project's own functions one honest device moves the released mean by more than
the rule's declared sensitivity. Norm bounding with a fixed max_norm gets its true sensitivity, 2 min(max_norm, clip)
/ n, so the noise it needs."""

import inspect

import pytest
import torch

from fedarena.attacks.base import ATTACKS, READS_ATTRIBUTE, UNDECLARED, attack, attack_reads
from fedarena.attacks.mimic import mimicked_updates
from fedarena.attacks.optimized import KNOWLEDGE
from fedarena.attacks.poisoned_updates import alie_updates
from fedarena.bench.preflight import preflight
from fedarena.config import ExperimentConfig
from fedarena.errors import ConfigError
from fedarena.methods.aggregators.base import AGGREGATORS, PRE_AGGREGATORS
from fedarena.methods.aggregators.builder import make_aggregator
from fedarena.methods.base import METHOD_SECTION, METHODS, method_from
from fedarena.methods.basic import FedAvg
from fedarena.privacy.base import PRIVACY
from fedarena.privacy.dp_trial import COVERED, CentralRule, PrivacyPlan, check_privacy, method_reads
from fedarena.privacy.mechanisms import central_dp, local_dp, no_privacy
from fedarena.sections import resolve_config
from fedarena.simulation.setup import assemble, load_dataset
from fedarena.suites.grid import TrialSpec

CENTRAL, LOCAL = central_dp(noise_multiplier=1.0, clip=1.0), local_dp(noise_multiplier=1.0, clip=1.0)
MECHANISMS = {"central": CENTRAL, "local": LOCAL}
TINY = {"dataset": {"name": "digits", "num_clients": 10}, "model": {"name": "mlp", "hidden": [8]}, "rounds": 2,
        "eval_every": 1, "clients_per_round": 10, "local_steps": 1, "batch_size": 16, "lr": 0.2, "sampling": "uniform"}


def verdict(spec, method=None, rule=None, attack_section=None) -> str | None:
    """None where ``check_privacy`` accepts the combination, else its error (asserted to be one line)."""
    try:
        check_privacy(spec, "uniform", method or FedAvg(), rule or make_aggregator({"name": "mean"}, f=1),
                      attack_section)
    except ConfigError as err:
        assert "\n" not in str(err)
        return str(err)
    return None


def holds(spec, reads, error: str | None, who: str) -> None:
    """Accepted => every declared read is covered; a read not covered => refused, naming the component."""
    missing = [name for name in reads if name not in COVERED[spec.name]]
    if error is None:
        assert not missing, f"{who} is accepted under {spec.name} DP but reads {missing}"
    if missing:
        assert error is not None and who in error, f"{who} reads {missing} yet {spec.name} DP accepts it"


def attack_sections(name: str) -> list[dict]:
    """The attack at its defaults, and at every knowledge where its declaration depends on it."""
    declared = getattr(ATTACKS.get(name), READS_ATTRIBUTE, None)
    sections = [{"name": name, "level": 0.3}]
    if callable(declared) and "knowledge" in inspect.signature(declared).parameters:
        sections += [{"name": name, "level": 0.3, "knowledge": k} for k in KNOWLEDGE]
    return sections


# ---- every registered component, under both mechanisms -------------------------------------------------------------

@pytest.mark.parametrize("mechanism", ["local", "central"])
def test_every_registered_component_is_refused_or_reads_only_what_the_noise_covers(mechanism):
    spec = MECHANISMS[mechanism]
    for name in METHODS.names():
        method = method_from(METHOD_SECTION.resolve({"name": name}))
        holds(spec, method_reads(method), verdict(spec, method=method), f"method {name!r}")
    for name in AGGREGATORS.names():
        rule = make_aggregator({"name": name}, f=1)
        holds(spec, rule.entry.device_reads, verdict(spec, rule=rule), f"aggregator {name!r}")
    for name in PRE_AGGREGATORS.names():
        error = verdict(spec, rule=make_aggregator({"name": "mean", "pre": [name]}, f=1))
        holds(spec, PRE_AGGREGATORS.get(name).device_reads, error, f"pre-aggregator {name!r}")
        assert mechanism == "local" or error is not None  # central DP refuses every pre-aggregator
    for name in ATTACKS.names():
        for section in attack_sections(name):
            holds(spec, attack_reads(section), verdict(spec, attack_section=section), f"attack {name!r}")


def test_every_registered_attack_declares_what_it_reads():
    # a new built-in attack must say what it reads (an undeclared one is refused under DP: see below)
    for name in ATTACKS.built_in():
        for section in attack_sections(name):
            assert UNDECLARED not in attack_reads(section), name


def test_the_declarations_of_the_components_that_read_more_than_the_updates():
    assert {n for n in METHODS.built_in() if method_reads(METHODS.get(n))} == {"term", "qffl", "afl"}
    assert {n: AGGREGATORS.get(n).device_reads for n in AGGREGATORS.built_in() if AGGREGATORS.get(n).device_reads} == {
        "k_loss": ("losses",), "fltrust": ("device_data",)}
    readers = {n: attack_reads({"name": n}) for n in ATTACKS.built_in() if attack_reads({"name": n})}
    assert readers == {"alie": ("honest_updates",), "ipm": ("honest_updates",), "neurotoxin": ("honest_updates",),
                       "min_max": ("honest_updates",), "min_sum": ("honest_updates",), "fang": ("honest_updates",),
                       "tailored_krum": ("honest_updates",), "tailored_bulyan": ("honest_updates",),
                       "tailored_median": ("honest_updates",), "adaptive": ("honest_updates",),
                       "mimic": ("honest_updates", "device_data")}
    # knowledge: malicious reads the attackers' own honest updates alone; a search against the rule still runs it
    # on the honest rows
    assert attack_reads({"name": "min_max", "knowledge": "malicious"}) == ()
    assert attack_reads({"name": "tailored_krum", "knowledge": "malicious"}) == ("honest_updates",)


def test_an_attack_that_declares_nothing_is_refused_under_dp_and_runs_without_it():
    # Prepare: a plugin's attack registered without a declaration, and one that declares what it reads
    ATTACKS.register("undeclared_probe")(lambda dataset, malicious, rng: None)
    attack("declared_probe", device_reads=("honest_updates",))(lambda dataset, malicious, rng: None)
    try:
        # Assert: undeclared, refused by both mechanisms; declared, refused where its read is not covered
        for spec in (CENTRAL, LOCAL):
            error = verdict(spec, attack_section={"name": "undeclared_probe"})
            assert error and "attack 'undeclared_probe' reads values it does not declare" in error
        assert verdict(no_privacy(), attack_section={"name": "undeclared_probe"}) is None
        assert "attack 'declared_probe' reads the honest devices' updates" in verdict(
            CENTRAL, attack_section={"name": "declared_probe"})
        assert verdict(LOCAL, attack_section={"name": "declared_probe"}) is None
    finally:
        ATTACKS.remove("undeclared_probe")
        ATTACKS.remove("declared_probe")


# ---- point 1: local DP and what reads un-noised values or raw device data -----------------------------------------

@pytest.mark.parametrize(("method", "rule", "read"), [
    ("term", "mean", "each device's training loss"), ("qffl", "mean", "each device's training loss"),
    ("afl", "mean", "each device's training loss"), ("global", "k_loss", "each device's training loss"),
    ("global", "fltrust", "raw training data of the devices"),
])
def test_local_dp_refuses_what_reads_the_devices_losses_or_raw_data(method, rule, read):
    # Prepare: the combination as a trial builds it (the losses are computed on each device's data, un-noised;
    # FLTrust's root set is raw training samples of the benign devices)
    built = method_from(METHOD_SECTION.resolve({"name": method}))
    # Execute
    error = verdict(LOCAL, method=built, rule=make_aggregator({"name": rule}, f=1))
    # Assert: refused in one line, saying what it reads and what local DP composes with
    who = f"method {method!r}" if method != "global" else f"aggregator {rule!r}"
    assert error is not None and f"privacy 'local': {who} reads {read}" in error
    assert "local DP's noise covers only what the devices send" in error
    assert ("global" in error) if method != "global" else ("all but fltrust, k_loss" in error)


def test_local_dp_still_takes_what_reads_only_the_noised_updates():
    # FedTilt's distances and DeepSight's probe read the updates the devices send: post-processing
    tilted = method_from(METHOD_SECTION.resolve({"name": "fedtilt", "q": 1.0}))
    assert verdict(LOCAL, method=tilted) is None
    assert verdict(LOCAL, rule=make_aggregator({"name": "deepsight"}, f=1)) is None
    assert verdict(LOCAL, attack_section={"name": "alie", "level": 0.3}) is None  # it reads noised updates


def test_central_dp_points_to_local_dp_only_where_local_dp_takes_the_component():
    term = verdict(CENTRAL, method=method_from(METHOD_SECTION.resolve({"name": "term"})))
    tilted = verdict(CENTRAL, method=method_from(METHOD_SECTION.resolve({"name": "fedtilt", "q": 1.0})))
    assert "method 'term' weights the devices" in term and "privacy local" not in term
    assert tilted.endswith("or use privacy local")
    assert "or use privacy local" in verdict(CENTRAL, attack_section={"name": "alie"})
    assert "privacy local" not in verdict(CENTRAL, attack_section={"name": "mimic"})  # it reads raw device data
    assert "reads each device's training loss" in verdict(CENTRAL, rule=make_aggregator({"name": "k_loss"}, f=1))


def test_a_local_dp_trial_with_fltrust_is_refused_before_training():
    cfg = resolve_config(ExperimentConfig.from_dict({**TINY, "aggregator": {"name": "fltrust"},
                                                     "privacy": {"name": "local", "noise_multiplier": 1.0}}))
    with pytest.raises(ConfigError, match="aggregator 'fltrust' reads raw training data of the devices"):
        assemble(cfg, load_dataset(cfg))


# ---- point 2: attacks that read the honest updates, under central DP -----------------------------------------------

N, ATTACKERS, CLIP = 10, 3, 1.0


def released_mean(rows: torch.Tensor) -> torch.Tensor:
    """The server's release under central DP without noise (z = 0): every row clipped, the uniform mean."""
    plan = PrivacyPlan(central_dp(noise_multiplier=0.0, clip=CLIP), 0.0, 1e-3, N, N, None, None)
    rule = CentralRule(plan, make_aggregator({"name": "mean"}, f=ATTACKERS), {}, torch.Generator().manual_seed(0),
                       torch.Generator().manual_seed(1))
    return rule(rows, torch.ones(N, dtype=rows.dtype))


def declared_movement() -> float:
    """How far the mean's declared sensitivity lets one device move the release: 2 clip / n."""
    return make_aggregator({"name": "mean"}, f=ATTACKERS).entry.sensitivity_at(N, ATTACKERS, CLIP) * CLIP


def attackers() -> torch.Tensor:
    bad = torch.zeros(N, dtype=torch.bool)
    bad[N - ATTACKERS:] = True
    return bad


def neighbours(honest: torch.Tensor, device_row: torch.Tensor, other_row: torch.Tensor) -> tuple:
    """Two rounds that differ in honest device 0's update alone (its data replaced)."""
    a, b = honest.clone(), honest.clone()
    a[0], b[0] = device_row, other_row
    return a, b


def test_mimic_moves_the_release_four_times_the_declared_sensitivity():
    # Prepare: 10 devices, 3 attackers copying the highest-ranked honest device (device 0); its update is e1 or -e1
    e1 = torch.zeros(4, dtype=torch.float64)
    e1[0] = 1.0
    a, b = neighbours(torch.zeros(N, 4, dtype=torch.float64), e1, -e1)
    copy = {"ids": torch.arange(N), "rank": torch.arange(N)}
    gen = torch.Generator()
    # Execute: the attack, then the server's clipped mean
    moved = (released_mean(mimicked_updates(a, attackers(), gen, **copy))
             - released_mean(mimicked_updates(b, attackers(), gen, **copy))).norm()
    # Assert: one honest device moves 4 rows: (1 + 3) x 2 clip / n, 4.0x the declared 2 clip / n
    assert float(moved / declared_movement()) == pytest.approx(4.0)
    assert "attack 'mimic' reads the honest devices' updates" in verdict(CENTRAL, attack_section={"name": "mimic"})


def test_alie_moves_the_release_beyond_the_declared_sensitivity():
    # Prepare: 7 honest devices at e1; device 0 changes to -e1 (inside the clip ball) or to -1e6 e1 (the attack runs
    # before the server clips, so an honest update is not bounded there)
    e1 = torch.zeros(4, dtype=torch.float64)
    e1[0] = 1.0
    honest = torch.zeros(N, 4, dtype=torch.float64)
    honest[: N - ATTACKERS] = e1
    gen = torch.Generator()
    ratios = []
    for other in (-e1, -1e6 * e1):
        a, b = neighbours(honest, e1, other)
        # Execute: ALIE (mean - z std of the honest rows, z = alie_z(10, 3)), then the server's clipped mean
        moved = (released_mean(alie_updates(a, attackers(), gen)) - released_mean(alie_updates(b, attackers(), gen)))
        ratios.append(float(moved.norm() / declared_movement()))
    # Assert: 2.02x the declared 2 clip / n with every honest update inside the ball (the worst case there: the
    # attackers' row moves by (1/7 + z/sqrt(7)) x 2 clip), 4.0x with the raw update the attack reads
    assert ratios[0] == pytest.approx(2.0232, abs=1e-4) and ratios[1] == pytest.approx(4.0)
    assert "attack 'alie' reads the honest devices' updates" in verdict(CENTRAL, attack_section={"name": "alie"})


@pytest.mark.parametrize("name", ["alie", "ipm", "mimic", "min_max", "min_sum", "fang", "tailored_krum",
                                  "tailored_bulyan", "tailored_median", "adaptive", "neurotoxin"])
def test_central_dp_refuses_every_attack_that_reads_the_honest_updates(name):
    error = verdict(CENTRAL, attack_section={"name": name, "level": 0.3})
    assert error is not None and f"attack {name!r}" in error and "honest devices' updates" in error
    assert "central DP composes with attacks that read only the attackers' own data and updates: a1" in error


def test_central_dp_takes_an_attack_on_the_attackers_own_updates():
    for name in ("a1", "a2", "a3", "sign_flip", "badnets", "model_replacement"):
        assert verdict(CENTRAL, attack_section={"name": name, "level": 0.3}) is None, name
    assert verdict(CENTRAL, attack_section={"name": "min_max", "level": 0.3, "knowledge": "malicious"}) is None


def test_bench_preflight_refuses_a_central_trial_with_alie_before_any_data():
    cfg = ExperimentConfig.from_dict({**TINY, "attack": {"name": "alie", "level": 0.3},
                                      "privacy": {"name": "central", "noise_multiplier": 1.0}})
    spec = TrialSpec(cfg, "s", "smoke", "global", "digits", "alie", 0.3, 0, "h", "c", "trial")
    result = preflight([spec])
    assert len(result.problems) == 1 and "privacy 'central': attack 'alie' reads" in result.problems[0][1]


# ---- point 7: norm bounding with a fixed max_norm -------------------------------------------------------------------

def noise_std(section: dict, clip: float = 1.0, n: int = 10, d: int = 200_000) -> float:
    """The standard deviation central DP adds to the rule's output at z = 1 (zero updates: the output is noise)."""
    plan = PrivacyPlan(central_dp(noise_multiplier=1.0, clip=clip), 1.0, 1e-3, 100, n, None, None)
    rule = CentralRule(plan, make_aggregator(section, f=1), {}, torch.Generator().manual_seed(0),
                       torch.Generator().manual_seed(1))
    return float(rule(torch.zeros(n, d, dtype=torch.float64), torch.ones(n, dtype=torch.float64)).std())


@pytest.mark.parametrize(("max_norm", "expected"), [(0.1, 0.1 / 10), (0.5, 0.5 / 10), (5.0, 1.0 / 10), (None, 1.0)])
def test_norm_bound_gets_the_noise_of_its_true_sensitivity(max_norm, expected):
    # the std is z clip s / 2 with s = 2 min(max_norm, clip) / (n clip): z min(max_norm, clip) / n (was z clip, the
    # ball's 2: n times the noise, more below the clip); the round's median norm (null) keeps the ball's 2
    section = {"name": "norm_bound"} if max_norm is None else {"name": "norm_bound", "max_norm": max_norm}
    assert noise_std(section) == pytest.approx(expected, rel=0.01)


def test_norm_bounds_true_sensitivity_holds_and_is_reached():
    # Prepare: the rows central DP hands the rule, clipped to 1; max_norm 0.25; device 0 at e1 or -e1
    rule = make_aggregator({"name": "norm_bound", "max_norm": 0.25}, f=1)
    e1 = torch.zeros(3, dtype=torch.float64)
    e1[0] = 1.0
    base = torch.randn(10, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    a, b = neighbours(base / base.norm(dim=1, keepdim=True), e1, -e1)
    ones = torch.ones(10, dtype=torch.float64)
    # Execute
    moved = float((rule(a, ones) - rule(b, ones)).norm())
    # Assert: 2 min(0.25, 1) / 10 in units of the clip, exactly what the release moves
    assert rule.entry.sensitivity_at(10, 1, 1.0, max_norm=0.25) == pytest.approx(0.05)
    assert moved == pytest.approx(0.05)
    # the runs it moves are central DP's, stale since privacy/central's version 2; without DP nothing moved
    assert AGGREGATORS.version("norm_bound") == 1 and PRIVACY.version("central") == 2
