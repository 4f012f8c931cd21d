"""fedarena/attacks/base.py checked exactly, one behaviour per test (the mutation score of the module:
docs/testing.md): the threat model's dataclasses (their declared fields, defaults and frozenness), ``Effect.active`` at
its stop round, ``RoundRule`` (the plain mean without an aggregator, the rule's weights, losses and server-state copy,
its f, its name, ``kept`` and its refusal), ``with_rows``, ``Backdoor.test_view`` (eligible rows, source, stamp, no
eligible row, own samples), ``ThreatModel`` (benign, pipeline, the tampered rows: canaries, the stop round, the
``rule`` and ``ids`` keywords, the TAMPER stream), the registry and ``attack``'s declarations (version, device_reads),
``attack_reads`` (undeclared, a tuple, a function with or without ``**``), ``level_value``'s bounds and wording, the
attack section kind, int(level * K), ``check_level``, ``draw_malicious``, ``check_benign_in_every_round`` at its edge,
and ``threat_from``/``build_threat`` (hyperparameters passed, forced clients, every refusal word for word, Ditto's
strong flag at level one half) (make mutants MODULE=fedarena/attacks/base.py)."""

import dataclasses
import re
import typing
from collections.abc import Callable
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import fedarena.attacks  # noqa: F401  registers every attack (a3, none, ...)
from fedarena.attacks import base
from fedarena.attacks.base import (
    ATTACK_SECTION,
    ATTACKS,
    AttackView,
    Backdoor,
    Effect,
    RoundRule,
    ThreatModel,
    attack,
    attack_reads,
    build_threat,
    check_benign_in_every_round,
    check_level,
    draw_malicious,
    level_value,
    malicious_count,
    threat_from,
    with_rows,
)
from fedarena.attacks.bounds import TriggerBound
from fedarena.datasets.base import ClientData, FederatedDataset, Split
from fedarena.errors import ConfigError
from fedarena.methods.aggregators.base import AggregatorEntry, RoundDraw
from fedarena.methods.aggregators.builder import Aggregator
from fedarena.registry import UnknownNameError
from fedarena.round_stages import Pipeline, StageView
from fedarena.streams import TAMPER, torch_stream

F64 = torch.float64
T = torch.Tensor
PLAIN = "_base_exact_plain"  # a test attack: no corruption, one hyperparameter, records what it gets
CORRUPTING = "_base_exact_corrupting"  # a test attack with a per-round corruption (persistent outliers' kind)
BUILT: list[dict] = []


def _plain(dataset, malicious, rng, *, strength: float = 1.0) -> Effect:
    BUILT.append({"malicious": malicious.copy(), "strength": strength})
    return Effect(dataset)


def _corrupting(dataset, malicious, rng) -> Effect:
    return Effect(dataset, corrupt=lambda x, y, owner, bad, gen: (x, y))


@pytest.fixture(scope="module", autouse=True)
def test_attacks():
    attack(PLAIN, device_reads=())(_plain)
    attack(CORRUPTING)(_corrupting)
    yield
    ATTACKS.remove(PLAIN)
    ATTACKS.remove(CORRUPTING)


@pytest.fixture
def temporary():
    """Names registered by a test, removed after it."""
    names: list[str] = []
    yield names
    for name in names:
        ATTACKS.remove(name)


def toy_dataset(num_clients: int, meta: dict | None = None) -> FederatedDataset:
    clients = []
    for k in range(num_clients):
        x = torch.full((2, 1), float(k), dtype=F64)
        y = torch.tensor([0, 1])
        clients.append(ClientData(Split(x, y), Split(x, y), Split(x, y)))
    return FederatedDataset("toy", clients, num_classes=3, input_shape=(1,), fingerprint="toy", meta=meta or {})


# --- the dataclasses -----------------------------------------------------------------------------------------------

def test_the_callable_aliases_spell_the_documented_signatures():
    assert base.Tamper == Callable[..., torch.Tensor]
    assert base.Corrupt == Callable[[T, T, T, T, torch.Generator], tuple[T, T]]
    assert base.DeviceReads == tuple[str, ...] | Callable[..., tuple[str, ...]]


def test_round_rule_declares_an_aggregator_and_optional_weights_and_losses():
    assert typing.get_type_hints(RoundRule) == {"aggregator": Aggregator | None, "weights": T | None,
                                                "losses": T | None}
    rule = RoundRule(None)
    assert rule.weights is None and rule.losses is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        rule.weights = torch.ones(1)


def test_backdoor_declares_its_fields_and_defaults_and_is_frozen():
    assert typing.get_type_hints(Backdoor) == {
        "target": int, "stamp": Callable[[T], T] | None, "source": int | None,
        "restamp": Callable[[T, dict], T] | None, "samples": T | None}
    backdoor = Backdoor(1, None)
    assert backdoor.source is None and backdoor.restamp is None and backdoor.samples is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        backdoor.target = 2


def test_attack_view_declares_its_fields_and_is_frozen():
    assert typing.get_type_hints(AttackView) == {"w": T, "model": object, "x": T, "y": T, "round": int}
    view = AttackView(torch.zeros(1), None, torch.zeros(1), torch.zeros(1), 0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.round = 1


def test_effect_declares_its_fields_and_defaults_nothing_but_the_dataset_and_is_frozen():
    assert typing.get_type_hints(Effect) == {
        "dataset": FederatedDataset, "tamper": Callable[..., T] | None,
        "corrupt": Callable[[T, T, T, T, torch.Generator], tuple[T, T]] | None,
        "needs_benign": bool, "needs_rule": bool, "needs_ids": bool, "backdoor": Backdoor | None,
        "stop_round": int | None, "adapt": Callable[..., dict] | None, "bound": TriggerBound | None}
    effect = Effect("data")
    assert effect.tamper is None and effect.corrupt is None and effect.backdoor is None
    assert effect.stop_round is None and effect.adapt is None and effect.bound is None
    assert effect.needs_benign is False and effect.needs_rule is False and effect.needs_ids is False
    with pytest.raises(dataclasses.FrozenInstanceError):
        effect.stop_round = 3


def test_threat_model_declares_its_fields_and_is_frozen():
    assert typing.get_type_hints(ThreatModel) == {"name": str, "level": float, "malicious": np.ndarray,
                                                  "effect": Effect, "strong": bool}
    threat = ThreatModel("x", 0.0, np.zeros(2, dtype=bool), Effect(None), False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        threat.strong = True


# --- Effect.active -------------------------------------------------------------------------------------------------

def test_without_a_stop_round_the_attack_is_active_in_every_round():
    assert Effect(None).active(0) is True and Effect(None).active(10**6) is True


def test_the_stop_round_is_the_first_honest_round():
    effect = Effect(None, stop_round=3)
    assert [effect.active(r) for r in range(6)] == [True, True, True, False, False, False]


# --- RoundRule -----------------------------------------------------------------------------------------------------

def recording(calls: list, *, draw: RoundDraw | None = None, f: int = 2, selects=None) -> Aggregator:
    """An aggregator whose rule returns the first row (not the mean), records its inputs and writes its server
    state by replacing an entry (as a rule may)."""

    def rule(updates, *, weights, losses, f, round=None):
        calls.append({"weights": weights, "losses": losses, "round": round,
                      "server": None if round is None or round.server is None else dict(round.server)})
        if round is not None and round.server is not None:
            round.server["written"] = torch.ones(1)
        return updates[0]

    entry = AggregatorEntry(rule=rule, check=lambda n, f: None, reads=("round",), selects=selects)
    return Aggregator("first_row", entry, f, round=draw)


def test_a_method_without_aggregation_is_the_plain_mean_named_mean():
    rule = RoundRule(None)
    assert rule.name == "mean"
    assert torch.equal(rule(torch.tensor([[1.0, 2.0, 3.0], [3.0, 4.0, 9.0]], dtype=F64)),
                       torch.tensor([2.0, 3.0, 6.0], dtype=F64))


def test_without_an_aggregator_f_is_the_malicious_rows_and_with_one_the_trials_f():
    assert RoundRule(None).f(5) == 5
    assert RoundRule(recording([], f=2)).f(5) == 2


def test_the_rule_is_named_by_its_aggregator():
    assert RoundRule(recording([])).name == "first_row"


def test_the_rule_gets_unit_weights_of_the_updates_dtype_one_per_row_where_none_are_given():
    calls = []
    updates = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], dtype=F64)  # 3 rows, 2 columns
    out = RoundRule(recording(calls))(updates)
    assert torch.equal(out, torch.tensor([1.0, 2.0], dtype=F64))  # the rule's output, not the mean
    weights = calls[0]["weights"]
    assert weights.dtype == F64 and torch.equal(weights, torch.ones(3, dtype=F64))
    assert calls[0]["losses"] is None and calls[0]["round"] is None


def test_the_rule_gets_the_rounds_own_weights_and_losses():
    calls = []
    weights, losses = torch.tensor([1.0, 2.0, 3.0], dtype=F64), torch.tensor([0.5, 0.25, 0.125], dtype=F64)
    RoundRule(recording(calls), weights, losses)(torch.zeros(3, 2, dtype=F64))
    assert calls[0]["weights"] is weights and calls[0]["losses"] is losses


def test_a_call_gives_the_rule_a_copy_of_the_server_state_and_leaves_the_servers_own_as_it_is():
    calls = []
    server = {"kept": torch.tensor([7.0])}
    RoundRule(recording(calls, draw=RoundDraw(torch.arange(2), seed=5, server=server)))(torch.zeros(2, 1))
    assert calls[0]["server"] == server  # the rule saw the server's entries
    assert calls[0]["round"].server is not server and calls[0]["round"].seed == 5
    assert list(server) == ["kept"]  # the rule's write went to the copy


def test_a_draw_without_server_state_is_passed_as_it_is():
    calls = []
    draw = RoundDraw(torch.arange(2), seed=4)
    RoundRule(recording(calls, draw=draw))(torch.zeros(2, 1))
    assert calls[0]["round"] is draw


def test_kept_is_the_aggregators_selection():
    agg = recording([], draw=RoundDraw(torch.arange(3)), selects=lambda updates, *, f, **_: torch.tensor([0, 2]))
    assert torch.equal(RoundRule(agg).kept(torch.zeros(3, 2)), torch.tensor([True, False, True]))


def test_kept_refuses_the_plain_mean():
    with pytest.raises(ConfigError, match=r"^the plain mean keeps every row; it has no selection to check$"):
        RoundRule(None).kept(torch.zeros(2, 1))


# --- with_rows -----------------------------------------------------------------------------------------------------

def test_with_rows_replaces_the_bad_rows_in_a_copy_in_the_updates_dtype():
    updates = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], dtype=F64)
    out = with_rows(updates, torch.tensor([False, True, False]), torch.tensor([[9.5, -1.5]], dtype=torch.float32))
    assert out.dtype == F64 and torch.equal(out, torch.tensor([[1.0, 2.0], [9.5, -1.5], [5.0, 6.0]], dtype=F64))
    assert torch.equal(updates, torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], dtype=F64))  # untouched


def test_with_rows_spreads_one_row_over_every_bad_row():
    out = with_rows(torch.zeros(3, 2, dtype=F64), torch.tensor([True, False, True]), torch.tensor([1.0, 2.0]))
    assert torch.equal(out, torch.tensor([[1.0, 2.0], [0.0, 0.0], [1.0, 2.0]], dtype=F64))


# --- Backdoor.test_view --------------------------------------------------------------------------------------------

def backdoor_dataset() -> FederatedDataset:
    """Two clients; test x is 10 * client + position, so each kept row tells where it came from."""
    clients = []
    for k, labels in enumerate(([0, 1, 2, 1], [1, 1])):
        y = torch.tensor(labels)
        x = (10.0 * k + torch.arange(len(labels), dtype=F64)).reshape(-1, 1)
        clients.append(ClientData(Split(x[:1], y[:1]), Split(x[:1], y[:1]), Split(x, y)))
    return FederatedDataset("toy", clients, num_classes=3, input_shape=(1,), fingerprint="toy")


def views_of(view):
    return [(c.test.x.flatten().tolist(), c.test.y.tolist()) for c in view.clients]


def test_the_test_view_keeps_every_sample_not_of_the_target_relabelled_target():
    view = Backdoor(target=1, stamp=None).test_view(backdoor_dataset())
    assert views_of(view) == [([0.0, 2.0], [1, 1]), ([], [])]
    assert view.clients[0].test.y.dtype == torch.long


def test_the_test_view_of_a_source_class_keeps_that_class_alone():
    view = Backdoor(target=1, stamp=None, source=2).test_view(backdoor_dataset())
    assert views_of(view) == [([2.0], [1]), ([], [])]


def test_the_test_view_stamps_the_kept_samples_and_never_stamps_an_empty_set():
    stamped = []

    def stamp(x):
        assert len(x) > 0
        stamped.append(x.flatten().tolist())
        return x + 100.0

    data = backdoor_dataset()
    view = Backdoor(target=1, stamp=stamp).test_view(data)
    assert views_of(view) == [([100.0, 102.0], [1, 1]), ([], [])]
    assert stamped == [[0.0, 2.0]]  # the second client has no eligible sample
    assert view.clients[0].train is data.clients[0].train and view.clients[0].val is data.clients[0].val


def test_a_backdoor_with_its_own_samples_gives_every_device_those_labelled_target():
    samples = torch.tensor([[5.0], [6.0], [7.0]], dtype=F64)
    view = Backdoor(target=2, stamp=None, samples=samples).test_view(backdoor_dataset())
    assert views_of(view) == [([5.0, 6.0, 7.0], [2, 2, 2])] * 2
    assert view.clients[1].test.x is samples and view.clients[1].test.y.dtype == torch.long


# --- ThreatModel ---------------------------------------------------------------------------------------------------

def threat(effect: Effect, malicious=(False, True, False, True)) -> ThreatModel:
    return ThreatModel("x", 0.5, np.array(malicious), effect, False)


def stage_view(senders, round_idx=1, rule=None, weights=None, losses=None) -> StageView:
    trial = SimpleNamespace(cfg=SimpleNamespace(seed=3), device="cpu")
    return StageView(trial, round_idx, np.array(senders), rule, weights, losses, {})


def test_benign_is_every_client_not_malicious():
    assert threat(Effect(None)).benign.tolist() == [True, False, True, False]


def test_a_model_attack_adds_its_tampering_as_a_device_stage_and_a_data_attack_adds_nothing():
    assert threat(Effect(None)).pipeline() == Pipeline()
    model_attack = threat(Effect(None, tamper=lambda u, bad, gen: u))
    assert model_attack.pipeline() == Pipeline(device=(model_attack.tampered,))


def test_the_tampered_rows_are_the_malicious_senders_and_never_an_audits_canary():
    calls = []

    def tamper(updates, bad, gen, **extra):
        calls.append((bad.tolist(), extra, torch.rand(1, generator=gen, dtype=F64)))
        return with_rows(updates, bad, torch.tensor([-1.0], dtype=F64))

    updates = torch.tensor([[1.0], [2.0], [3.0], [4.0]], dtype=F64)
    # senders: devices 3, 0, 1 and a canary (id 4 = the number of devices)
    out = threat(Effect(None, tamper=tamper)).tampered(updates, stage_view([3, 0, 1, 4], round_idx=6))
    assert torch.equal(out, torch.tensor([[-1.0], [2.0], [-1.0], [4.0]], dtype=F64))
    assert calls[0][0] == [True, False, True, False] and calls[0][1] == {}
    expected = torch.rand(1, generator=torch_stream(3, TAMPER, 6), dtype=F64)
    assert torch.equal(calls[0][2], expected)  # noise from the stream TAMPER, keyed by the round


def test_a_round_without_a_malicious_sender_is_not_tampered_with():
    def tamper(*args, **kwargs):
        raise AssertionError("tampered without a malicious sender")

    updates = torch.zeros(2, 1)
    assert threat(Effect(None, tamper=tamper)).tampered(updates, stage_view([0, 2])) is updates


def test_from_the_stop_round_on_nothing_is_tampered_with():
    calls = []

    def tamper(updates, bad, gen):
        calls.append(bad.tolist())
        return updates + 1

    effect = Effect(None, tamper=tamper, stop_round=2)
    updates = torch.zeros(2, 1)
    assert threat(effect).tampered(updates, stage_view([1, 3], round_idx=2)) is updates
    assert calls == []
    assert torch.equal(threat(effect).tampered(updates, stage_view([1, 3], round_idx=1)), torch.ones(2, 1))
    assert calls == [[True, True]]


def test_an_attack_that_reads_the_rule_gets_the_rounds_rule_weights_and_losses():
    got = {}

    def tamper(updates, bad, gen, **extra):
        got.update(extra)
        return updates

    agg, weights, losses = recording([]), torch.tensor([1.0, 2.0]), torch.tensor([0.3, 0.4])
    effect = Effect(None, tamper=tamper, needs_rule=True)
    threat(effect).tampered(torch.zeros(2, 1), stage_view([1, 2], rule=agg, weights=weights, losses=losses))
    assert list(got) == ["rule"] and got["rule"] == RoundRule(agg, weights, losses)


def test_an_attack_that_reads_the_ids_gets_each_rows_sender():
    got = {}

    def tamper(updates, bad, gen, **extra):
        got.update(extra)
        return updates

    threat(Effect(None, tamper=tamper, needs_ids=True)).tampered(torch.zeros(3, 1), stage_view([3, 0, 4]))
    assert list(got) == ["ids"] and got["ids"].tolist() == [3, 0, 4]


# --- the registry and the declarations -----------------------------------------------------------------------------

def test_the_registry_is_of_attacks():
    assert ATTACKS.kind == "attack"
    with pytest.raises(UnknownNameError, match=r"^unknown attack 'nosuchattack'"):
        ATTACKS.get("nosuchattack")


def test_an_attack_is_registered_at_version_1_unless_it_says_otherwise(temporary):
    build = attack("_base_exact_v1")(_corrupting)
    temporary.append("_base_exact_v1")
    assert ATTACKS.get("_base_exact_v1") is build and ATTACKS.version("_base_exact_v1") == 1

    def other(dataset, malicious, rng):
        return Effect(dataset)

    attack("_base_exact_v3", version=3)(other)
    temporary.append("_base_exact_v3")
    assert ATTACKS.version("_base_exact_v3") == 3


def test_the_declared_reads_are_kept_as_the_device_reads_attribute_as_a_tuple(temporary):
    def build(dataset, malicious, rng):
        return Effect(dataset)

    attack("_base_exact_reads", device_reads=["honest_updates"])(build)
    temporary.append("_base_exact_reads")
    assert base.READS_ATTRIBUTE == "device_reads"
    assert build.device_reads == ("honest_updates",)
    assert attack_reads({"name": "_base_exact_reads", "level": 0.2}) == ("honest_updates",)


def test_an_attack_that_declares_nothing_reads_undeclared():
    assert base.UNDECLARED == "undeclared"
    assert not hasattr(_corrupting, "device_reads")
    assert attack_reads({"name": CORRUPTING, "level": 0.2}) == ("undeclared",)
    assert attack_reads({"name": PLAIN, "level": 0.2}) == ()


def test_a_declaration_by_keywords_gets_the_sections_hyperparameters_it_names(temporary):
    def reads(*, knowledge="full"):
        return ["honest_updates"] if knowledge == "full" else []

    def build(dataset, malicious, rng, *, knowledge="full", scale=1.0):
        return Effect(dataset)

    attack("_base_exact_kw", device_reads=reads)(build)
    temporary.append("_base_exact_kw")
    assert build.device_reads is reads
    section = {"name": "_base_exact_kw", "level": 0.2, "knowledge": "malicious", "scale": 2.0}
    assert attack_reads(section) == ()
    assert attack_reads({**section, "knowledge": "full"}) == ("honest_updates",)


def test_a_declaration_taking_any_keyword_gets_every_hyperparameter_but_name_and_level(temporary):
    def reads(**hyperparameters):
        return sorted(hyperparameters)

    def build(dataset, malicious, rng, *, knowledge="full", scale=1.0):
        return Effect(dataset)

    attack("_base_exact_any", device_reads=reads)(build)
    temporary.append("_base_exact_any")
    section = {"name": "_base_exact_any", "level": 0.2, "knowledge": "full", "scale": 2.0}
    assert attack_reads(section) == ("knowledge", "scale")


# --- level_value ---------------------------------------------------------------------------------------------------

def test_a_level_is_a_fraction_from_0_included_to_1_excluded():
    assert level_value({"name": "x", "level": 0.3}) == 0.3
    assert level_value({"name": "x", "level": 0}) == 0.0 and type(level_value({"name": "x", "level": 0})) is float
    assert level_value({"name": "x", "level": 0.0}) == 0.0
    assert level_value({"name": "x", "level": 0.999}) == 0.999


def test_a_section_without_a_level_is_level_0():
    assert level_value({"name": "x"}) == 0.0


@pytest.mark.parametrize("level, shown", [(1, "1"), (1.0, "1.0"), (1.5, "1.5"), (-0.1, "-0.1"), (True, "True"),
                                          (False, "False"), ("0.2", "'0.2'"), (None, "None")])
def test_a_level_outside_0_to_1_or_not_a_number_is_refused(level, shown):
    with pytest.raises(ConfigError, match=rf"^attack level must be a fraction in \[0, 1\), got {re.escape(shown)}$"):
        level_value({"name": "x", "level": level})


# --- the section kind, the count and check_level -------------------------------------------------------------------

def test_the_attack_section_kind_has_the_level_as_structural_key():
    assert ATTACK_SECTION.kind == "attack" and ATTACK_SECTION.registry is ATTACKS
    assert ATTACK_SECTION.structural_keys == ("level",)
    assert ATTACK_SECTION.signature(_plain) is _plain
    assert ATTACK_SECTION.keys(PLAIN) == {"level", "strength"}


def test_resolving_an_attack_section_checks_the_level_and_fills_the_defaults():
    assert ATTACK_SECTION.resolve({"name": PLAIN, "level": 0.25}) == {"name": PLAIN, "level": 0.25, "strength": 1.0}
    assert ATTACK_SECTION.resolve({"name": PLAIN, "strength": 3.0}) == {"name": PLAIN, "level": 0.0, "strength": 3.0}
    with pytest.raises(ConfigError, match=r"^attack level must be a fraction in \[0, 1\), got 1$"):
        ATTACK_SECTION.resolve({"name": PLAIN, "level": 1})


def test_the_malicious_count_is_int_of_level_times_clients_as_dittos_code():
    assert malicious_count(0.5, 23) == 11  # Vehicle at 50%
    assert malicious_count(0.5, 515) == 257  # CelebA at 50%
    assert malicious_count(0.2, 10) == 2 and malicious_count(0.29, 10) == 2 and malicious_count(0.0, 10) == 0


def test_check_level_counts_the_malicious_clients():
    assert check_level({"name": PLAIN, "level": 0.5}, 23) == 11
    assert check_level({"name": PLAIN, "level": 0.0}, 23) == 0
    assert check_level({"name": "none", "level": 0.0}, 23) == 0
    assert check_level({"name": "none"}, 23) == 0


def test_the_attack_none_with_a_level_is_refused_naming_every_attack():
    names = ", ".join(sorted(ATTACKS))
    assert "a2, a3" in names
    with pytest.raises(ConfigError) as err:
        check_level({"name": "none", "level": 0.2}, 10)
    assert str(err.value) == f"attack 'none' with level 0.2: choose an attack ({names})"


# --- draw_malicious ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(5))
def test_the_malicious_set_is_drawn_without_replacement(seed):
    mask = draw_malicious(10, 9, np.random.default_rng(seed), [])
    assert mask.dtype == bool and mask.shape == (10,) and int(mask.sum()) == 9


def test_the_clients_the_dataset_marks_adversarial_are_always_malicious():
    mask = draw_malicious(6, 0, np.random.default_rng(0), [4, 1])
    assert mask.tolist() == [False, True, False, False, True, False]
    mask = draw_malicious(6, 2, np.random.default_rng(1), [5])
    assert bool(mask[5]) and 2 <= int(mask.sum()) <= 3


# --- check_benign_in_every_round -----------------------------------------------------------------------------------

def benign_reader(count: int, needs_benign: bool = True) -> ThreatModel:
    return ThreatModel("alie", 0.3, np.arange(10) < count, Effect(None, needs_benign=needs_benign), False)


def test_an_attack_reading_benign_updates_passes_while_one_place_of_a_round_is_left():
    check_benign_in_every_round(benign_reader(3), 4)


def test_an_attack_reading_benign_updates_is_refused_where_its_clients_fill_a_round():
    with pytest.raises(ConfigError) as err:
        check_benign_in_every_round(benign_reader(3), 3)
    assert str(err.value) == (
        "attack 'alie' reads the benign updates of each round, but 3 malicious clients can fill all 3 places of a "
        "round; lower the level, raise clients_per_round, or set knowledge=benign (the attackers' own honest updates "
        "in such a round) or knowledge=malicious (always their own)")
    with pytest.raises(ConfigError, match=r"but 3 malicious clients can fill all 2 places"):
        check_benign_in_every_round(benign_reader(3), 2)


def test_an_attack_not_reading_benign_updates_may_fill_a_round():
    check_benign_in_every_round(benign_reader(3, needs_benign=False), 3)
    check_benign_in_every_round(benign_reader(3, needs_benign=False), 1)


# --- threat_from and build_threat ----------------------------------------------------------------------------------

def test_no_attack_at_level_0_is_a_threat_with_no_malicious_client():
    data = toy_dataset(5)
    got = threat_from({"name": "none", "level": 0.0}, data, np.random.default_rng(0))
    assert got.name == "none" and got.level == 0.0 and got.strong is False
    assert got.malicious.tolist() == [False] * 5 and got.effect == Effect(data)


def test_the_threat_draws_int_level_k_clients_and_passes_the_hyperparameters_alone():
    BUILT.clear()
    got = build_threat({"name": PLAIN, "level": 0.4, "strength": 2.5}, toy_dataset(10), np.random.default_rng(0))
    assert got.name == PLAIN and got.level == 0.4 and int(got.malicious.sum()) == 4
    assert len(BUILT) == 1 and BUILT[0]["strength"] == 2.5
    assert BUILT[0]["malicious"].tolist() == got.malicious.tolist()
    BUILT.clear()
    build_threat({"name": PLAIN, "level": 0.4}, toy_dataset(10), np.random.default_rng(0))
    assert BUILT[0]["strength"] == 1.0  # the default, filled by the section's resolution


def test_the_clients_the_dataset_marks_malicious_join_the_drawn_set():
    got = threat_from({"name": "none", "level": 0.0}, toy_dataset(5, {"malicious": [2]}), np.random.default_rng(0))
    assert got.malicious.tolist() == [False, False, True, False, False]


def test_a_threat_where_every_client_is_malicious_is_refused():
    with pytest.raises(ConfigError, match=r"^every client is malicious; metrics need at least one benign client$"):
        threat_from({"name": "none", "level": 0.0}, toy_dataset(2, {"malicious": [0, 1]}), np.random.default_rng(0))


def test_an_attack_whose_level_corrupts_no_client_is_refused():
    with pytest.raises(ConfigError) as err:
        threat_from({"name": PLAIN, "level": 0.1, "strength": 1.0}, toy_dataset(5), np.random.default_rng(0))
    assert str(err.value) == (f"attack {PLAIN!r} at level 0.1 corrupts no client of 5; set a level > 0 "
                              "(e.g. --level 0.2) or use attack 'none'")


def test_a_section_without_a_level_is_refused_as_level_0():
    with pytest.raises(ConfigError, match=r"at level 0\.0 corrupts no client of 4; "):
        threat_from({"name": PLAIN}, toy_dataset(4), np.random.default_rng(0))


def test_persistent_outliers_at_level_0_corrupt_every_participant_and_are_not_refused():
    got = threat_from({"name": CORRUPTING, "level": 0.0}, toy_dataset(4), np.random.default_rng(0))
    assert not got.malicious.any() and got.effect.corrupt is not None


def test_an_attack_with_malicious_clients_is_accepted():
    got = threat_from({"name": PLAIN, "level": 0.2, "strength": 1.0}, toy_dataset(5), np.random.default_rng(0))
    assert int(got.malicious.sum()) == 1


@pytest.mark.parametrize("level, strong", [(0.2, False), (0.5, False), (0.6, True)])
def test_an_attack_is_strong_above_half_the_clients(level, strong):
    got = threat_from({"name": PLAIN, "level": level, "strength": 1.0}, toy_dataset(10), np.random.default_rng(0))
    assert got.strong is strong


def test_every_a3_is_strong():
    got = build_threat({"name": "a3", "level": 0.2, "poison_labels": False}, toy_dataset(10), np.random.default_rng(0))
    assert got.name == "a3" and got.strong is True
