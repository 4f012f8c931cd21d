"""fedarena/methods/aggregators/base.py checked exactly, one behaviour per test (the mutation score of the module:
docs/testing.md): the registries' kinds and the ``EXCLUDED`` key; ``AggregatorEntry``'s defaults, frozenness, declared
types and derived facts (``needs_losses``, ``uses_weights``, ``needs_round``, ``device_reads``, ``sensitivity_at``
with and without a ``bound`` keyword, ``needs_each_update``); ``RoundDraw``'s defaults, its legacy attributes, its
generator and ``draw_sorted``'s ties in draw order; ``PreAggregatorEntry`` (what it passes, ``output_rows``,
``merges_rows``) and ``pre_aggregator``; ``aggregator``'s legacy flags, its certify/reports pairing, its 'round'
keyword check and every refusal word for word; ``check_common``, ``check_updates``, ``as_vector``,
``normalised_weights`` and ``require_losses`` at their edges; ``client_table``; the column blocks of
``CHUNK_ELEMENTS``; the np.median convention of the medians (even counts, NaN); the squared distances (across
blocks, and centred where the updates share a large common part); ``subset_mean``; the two sensitivities
(make mutants MODULE=fedarena/methods/aggregators/base.py)."""

import dataclasses
import typing
from collections.abc import Callable, Mapping

import pytest
import torch

from fedarena.errors import ConfigError
from fedarena.methods import aggregators as _registers_every_rule  # noqa: F401  (round inputs such as root_update)
from fedarena.methods.aggregators import base
from fedarena.methods.aggregators.base import (
    AGGREGATORS,
    EXCLUDED,
    PRE_AGGREGATORS,
    AggregatorEntry,
    PreAggregatorEntry,
    RoundDraw,
    aggregator,
    as_vector,
    ball_sensitivity,
    check_common,
    check_updates,
    client_table,
    column_blocks,
    coordinate_median,
    mean_sensitivity,
    normalised_weights,
    pairwise_sq_distances,
    pre_aggregator,
    require_losses,
    row_sq_distances,
    subset_mean,
    vector_median,
)
from fedarena.registry import UnknownNameError

F64 = torch.float64
UPDATES = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 7.0]], dtype=F64)  # n = 3 rows of d = 2: n != d on purpose


def rule(updates, *, weights, losses, f):
    return updates.mean(dim=0)


def rule_with_round(updates, *, weights, losses, f, round=None):
    return updates.mean(dim=0)


def no_check(n, f, **params):
    return None


@pytest.fixture
def temporary():
    """Names registered by a test, removed after it (from whichever registry holds them)."""
    names = []
    yield names
    for name in names:
        for registry in (AGGREGATORS, PRE_AGGREGATORS):
            if name in registry:
                registry.remove(name)


# --- constants and registries ----------------------------------------------------------------------------------------

def test_coordinate_wise_rules_take_at_most_2_to_the_22_elements_at_once():
    assert base.CHUNK_ELEMENTS == 1 << 22 == 4194304


def test_the_registries_name_their_kind_in_an_unknown_name_refusal():
    assert AGGREGATORS.kind == "aggregator" and PRE_AGGREGATORS.kind == "pre-aggregator"
    with pytest.raises(UnknownNameError, match=r"^unknown aggregator '_no_such_rule'"):
        AGGREGATORS.get("_no_such_rule")
    with pytest.raises(UnknownNameError, match=r"^unknown pre-aggregator '_no_such_pre'"):
        PRE_AGGREGATORS.get("_no_such_pre")


def test_the_server_state_entry_of_removed_clients_is_excluded():
    assert EXCLUDED == "excluded"


def test_the_entries_declared_types_resolve():
    assert base.Aggregate == Callable[..., torch.Tensor] and base.Check == Callable[..., None]
    assert typing.get_type_hints(AggregatorEntry) == {
        "rule": Callable[..., torch.Tensor], "check": Callable[..., None], "reads": tuple[str, ...],
        "selects": Callable[..., torch.Tensor] | None, "sensitivity": Callable[..., float] | None,
        "sum_only": bool | Callable[..., bool], "per_client": bool, "certify": Callable[..., dict] | None,
        "reports": Mapping[str, bool | None], "excludes": bool, "tasks": tuple[str, ...],
        "declared_device_reads": tuple[str, ...]}
    assert typing.get_type_hints(RoundDraw) == {
        "order": torch.Tensor, "seed": int, "ids": torch.Tensor | None, "server": dict | None,
        "inputs": Mapping[str, typing.Any]}
    assert typing.get_type_hints(PreAggregatorEntry) == {
        "fn": Callable[..., torch.Tensor], "check": Callable[..., None] | None, "rows": Callable[..., int] | None,
        "members": Callable[..., list[torch.Tensor]] | None, "device_reads": tuple[str, ...],
        "inputs": tuple[str, ...]}


# --- AggregatorEntry -------------------------------------------------------------------------------------------------

def test_an_entry_reads_nothing_and_declares_nothing_by_default():
    entry = AggregatorEntry(rule, no_check)
    assert entry.reads == () and entry.selects is None and entry.sensitivity is None
    assert entry.sum_only is False and entry.per_client is False and entry.excludes is False
    assert entry.certify is None and entry.reports == {} and entry.tasks == ()
    assert entry.declared_device_reads == () and entry.device_reads == ()
    assert entry.needs_losses is False and entry.uses_weights is False and entry.needs_round is False
    assert entry.needs_each_update() is True


def test_an_entry_is_frozen():
    entry = AggregatorEntry(rule, no_check)
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.reads = ("losses",)


def test_losses_and_weights_are_read_without_the_round_and_anything_else_takes_it():
    cases = {(): (False, False, False), ("losses",): (True, False, False), ("weights",): (False, True, False),
             ("losses", "weights"): (True, True, False), ("round",): (False, False, True),
             ("model",): (False, False, True), ("weights", "root_update"): (False, True, True)}
    for reads, (losses, weights, round_) in cases.items():
        entry = AggregatorEntry(rule, no_check, reads=reads)
        assert (entry.needs_losses, entry.uses_weights, entry.needs_round) == (losses, weights, round_), reads


def test_device_reads_are_the_declared_ones_then_the_inputs_ones_each_once():
    assert AggregatorEntry(rule, no_check, reads=("losses",)).device_reads == ("losses",)
    entry = AggregatorEntry(rule, no_check, reads=("losses", "weights"), declared_device_reads=("device_data",))
    assert entry.device_reads == ("device_data", "losses")
    # FLTrust's root update is made from the root set's raw samples ("device_data"): named once
    entry = AggregatorEntry(rule, no_check, reads=("round", "root_update"), declared_device_reads=("device_data",))
    assert entry.device_reads == ("device_data",)
    assert AggregatorEntry(rule, no_check, reads=("round", "root_update")).device_reads == ("device_data",)


def test_a_sensitivity_without_a_bound_keyword_gets_n_f_and_the_hyperparameters_only():
    def sensitivity(n, f, *, k=1):
        return (f + k) / n

    entry = AggregatorEntry(rule, no_check, sensitivity=sensitivity)
    assert entry.sensitivity_at(4, 1, 7.0) == 0.5
    assert entry.sensitivity_at(8, 1, 7.0, k=3) == 0.5


def test_a_sensitivity_that_declares_a_bound_gets_the_rounds_clip_bound():
    def sensitivity(n, f, *, bound, scale=1.0):
        return scale * bound / n

    entry = AggregatorEntry(rule, no_check, sensitivity=sensitivity)
    assert entry.sensitivity_at(4, 0, 2.0) == 0.5
    assert entry.sensitivity_at(4, 0, 2.0, scale=3.0) == 1.5


def test_each_update_is_needed_unless_the_rule_needs_only_their_sum():
    assert AggregatorEntry(rule, no_check, sum_only=False).needs_each_update() is True
    assert AggregatorEntry(rule, no_check, sum_only=True).needs_each_update() is False
    entry = AggregatorEntry(rule, no_check, sum_only=lambda max_norm=None: max_norm is not None)
    assert entry.needs_each_update() is True
    assert entry.needs_each_update(max_norm=1.0) is False


def test_the_mean_needs_only_the_sum_and_the_median_each_update():
    assert AGGREGATORS.get("mean").needs_each_update() is False
    assert AGGREGATORS.get("median").needs_each_update() is True


# --- the two sensitivities -------------------------------------------------------------------------------------------

def test_the_means_sensitivity_is_two_over_n_and_a_balls_two():
    assert mean_sensitivity(4, 1) == 0.5
    assert mean_sensitivity(1, 0) == 2.0
    assert mean_sensitivity(10, 0) == 0.2
    assert ball_sensitivity(10, 3) == 2.0
    assert ball_sensitivity(1, 0) == 2.0


# --- RoundDraw -------------------------------------------------------------------------------------------------------

def test_a_draw_has_seed_zero_and_no_ids_server_or_inputs_by_default():
    draw = RoundDraw(torch.arange(3))
    assert draw.seed == 0 and draw.ids is None and draw.server is None
    assert draw.inputs == {} and draw.input("model") is None
    assert draw.model is None and draw.root_update is None and draw.probe is None


def test_a_draw_is_frozen():
    draw = RoundDraw(torch.arange(3))
    with pytest.raises(dataclasses.FrozenInstanceError):
        draw.seed = 4


def test_the_legacy_attributes_are_the_inputs_of_those_names():
    model, root, probe = object(), object(), object()
    draw = RoundDraw(torch.arange(2), inputs={"model": model, "root_update": root, "probe": probe, "other": 1})
    assert draw.model is model and draw.root_update is root and draw.probe is probe
    assert draw.input("root_update") is root and draw.input("other") == 1 and draw.input("missing") is None


def test_any_other_missing_attribute_is_an_attribute_error_in_pythons_words():
    draw = RoundDraw(torch.arange(2), inputs={"other": 1})
    with pytest.raises(AttributeError, match=r"^'RoundDraw' object has no attribute 'other'$"):
        draw.other  # noqa: B018
    assert not hasattr(draw, "colour")


def test_a_direct_calls_draw_takes_the_rows_in_order_with_seed_zero():
    draw = RoundDraw.rows_in_order(4)
    assert isinstance(draw, RoundDraw)
    assert draw.order.tolist() == [0, 1, 2, 3] and draw.seed == 0


def test_the_generator_is_seeded_with_the_rounds_seed():
    got = RoundDraw(torch.arange(2), seed=11).generator()
    assert torch.equal(torch.rand(3, generator=got), torch.rand(3, generator=torch.Generator().manual_seed(11)))


def test_draw_sorted_sorts_the_scores_ascending_with_ties_in_draw_order():
    # rows drawn 3rd, 2nd, 0th, 1st: score 0 rows 1 (drawn 2nd) and 3 (1st) -> 3, 1; score 1 rows 0 (3rd), 2 (0th)
    draw = RoundDraw(torch.tensor([3, 2, 0, 1]))
    scores = torch.tensor([1.0, 0.0, 1.0, 0.0], dtype=F64)
    assert draw.draw_sorted(scores).tolist() == [3, 1, 2, 0]
    assert RoundDraw.rows_in_order(4).draw_sorted(torch.tensor([2.0, -1.0, 0.5, 7.0])).tolist() == [1, 2, 0, 3]


def test_many_tied_scores_come_in_draw_order():
    n = 200  # large enough that an unstable sort does move ties
    draw = RoundDraw(torch.arange(n - 1, -1, -1))  # the last row drawn first
    assert draw.draw_sorted(torch.zeros(n, dtype=F64)).tolist() == list(range(n - 1, -1, -1))


def test_rows_at_the_same_draw_position_keep_their_row_order():
    n = 200
    draw = RoundDraw(torch.zeros(n, dtype=torch.long))
    assert draw.draw_sorted(torch.zeros(n, dtype=F64)).tolist() == list(range(n))


# --- PreAggregatorEntry and pre_aggregator ---------------------------------------------------------------------------

def test_a_pre_aggregator_gets_f_and_round_only_where_it_declares_them():
    seen = {}

    def both(updates, *, f, round, s=1):
        seen.update(f=f, round=round, s=s)
        return updates

    def only_f(updates, *, f):
        seen.update(f=f)
        return updates

    def neither(updates, *, s=1):
        seen.update(s=s)
        return updates

    draw = RoundDraw.rows_in_order(3)
    entry = PreAggregatorEntry(both)
    assert entry.reads == frozenset({"f", "round"}) and entry.reads_round is True
    assert entry(UPDATES, f=2, round=draw, s=5) is UPDATES and seen == {"f": 2, "round": draw, "s": 5}
    seen.clear()
    entry(UPDATES)
    assert seen == {"f": 0, "round": None, "s": 1}  # a direct call: f = 0, no draw
    seen.clear()
    entry = PreAggregatorEntry(only_f)
    assert entry.reads == frozenset({"f"}) and entry.reads_round is False
    entry(UPDATES, f=3, round=draw)
    assert seen == {"f": 3}
    seen.clear()
    entry = PreAggregatorEntry(neither)
    assert entry.reads == frozenset() and entry.reads_round is False
    entry(UPDATES, f=3, round=draw, s=4)
    assert seen == {"s": 4}


def test_a_pre_aggregator_entry_declares_nothing_by_default_and_is_frozen():
    entry = PreAggregatorEntry(lambda updates: updates)
    assert entry.check is None and entry.rows is None and entry.members is None
    assert entry.device_reads == () and entry.inputs == ()
    assert entry.merges_rows is False and entry.output_rows(7) == 7 and entry.output_rows(7, s=3) == 7
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.rows = None


def test_a_merging_pre_aggregator_says_how_many_rows_it_leaves():
    entry = PreAggregatorEntry(lambda updates, *, s=2: updates, rows=lambda n, s=2: -(-n // s),
                               members=lambda n, round, s=2: [])
    assert entry.merges_rows is True
    assert entry.output_rows(7) == 4 and entry.output_rows(7, s=3) == 3


def test_pre_aggregator_registers_the_function_with_its_facts_at_version_one(temporary):
    def check(n, f, **options):
        return None

    def rows(n, **options):
        return 1

    def members(n, round, **options):
        return [torch.arange(n)]

    def fn(updates, *, round, f):
        return updates

    temporary.append("_base_exact_pre")
    assert pre_aggregator("_base_exact_pre", check=check, rows=rows, members=members, device_reads=["device_data"],
                          inputs=["model", "model"])(fn) is fn
    entry = PRE_AGGREGATORS.get("_base_exact_pre")
    assert isinstance(entry, PreAggregatorEntry)
    assert (entry.fn, entry.check, entry.rows, entry.members) == (fn, check, rows, members)
    assert entry.device_reads == ("device_data",) and entry.inputs == ("model",)
    assert PRE_AGGREGATORS.version("_base_exact_pre") == 1

    def plain(updates, *, s=1.0):
        return updates

    temporary.append("_base_exact_plain")
    pre_aggregator("_base_exact_plain", version=3)(plain)
    assert PRE_AGGREGATORS.get("_base_exact_plain").inputs == () and PRE_AGGREGATORS.version("_base_exact_plain") == 3


def test_a_pre_aggregator_reading_inputs_without_a_round_keyword_is_refused_in_words(temporary):
    temporary.append("_base_exact_pre")
    with pytest.raises(ConfigError, match=r"^pre-aggregator '_base_exact_pre' reads model, probe but takes no 'round' "
                                          r"keyword$"):
        pre_aggregator("_base_exact_pre", inputs=("model", "probe"))(lambda updates, *, f: updates)
    assert "_base_exact_pre" not in PRE_AGGREGATORS


def test_a_pre_aggregators_inputs_that_are_not_names_are_refused_naming_it(temporary):
    temporary.append("_base_exact_pre")
    with pytest.raises(ConfigError, match=r"^pre-aggregator '_base_exact_pre' declares reads=\(1,\): a tuple of round "
                                          r"inputs' names"):
        pre_aggregator("_base_exact_pre", inputs=(1,))(lambda updates, *, round: updates)


# --- aggregator() ----------------------------------------------------------------------------------------------------

def test_aggregator_registers_the_rule_with_its_facts(temporary):
    def sensitivity(n, f):
        return 1.0

    def selects(updates, *, f):
        return torch.arange(1)

    def certify(trial, state):
        return {"r": 1.0}

    temporary.append("_base_exact_rule")
    assert aggregator("_base_exact_rule", check=no_check, reads=("weights",), selects=selects,
                      sensitivity=sensitivity, sum_only=True, per_client=True, certify=certify,
                      reports={"r": True}, excludes=True, tasks=["classification"],
                      device_reads=["device_data"], version=4)(rule) is rule
    entry = AGGREGATORS.get("_base_exact_rule")
    assert entry == AggregatorEntry(rule, no_check, ("weights",), selects, sensitivity, True, True, certify,
                                    {"r": True}, True, ("classification",), ("device_data",))
    assert AGGREGATORS.version("_base_exact_rule") == 4


def test_aggregator_defaults_are_check_common_version_one_and_nothing_declared(temporary):
    temporary.append("_base_exact_rule")
    aggregator("_base_exact_rule")(rule)
    entry = AGGREGATORS.get("_base_exact_rule")
    assert entry.check is check_common and entry.reads == () and entry.selects is None
    assert entry.sensitivity is None and entry.sum_only is False and entry.per_client is False
    assert entry.certify is None and entry.reports == {} and entry.excludes is False
    assert entry.tasks == () and entry.device_reads == ()
    assert AGGREGATORS.version("_base_exact_rule") == 1


def test_the_legacy_flags_stand_for_the_reads_they_replaced(temporary):
    cases = [({"needs_losses": True}, rule, ("losses",)), ({"uses_weights": True}, rule, ("weights",)),
             ({"needs_round": True}, rule_with_round, ("round", "model")),
             ({"needs_root": True}, rule_with_round, ("round", "root_update")),
             ({"needs_probe": True}, rule_with_round, ("round", "model", "probe")),
             ({"needs_losses": False, "needs_probe": False}, rule, ())]
    for i, (flags, fn, reads) in enumerate(cases):
        temporary.append(f"_base_exact_{i}")
        aggregator(f"_base_exact_{i}", **flags)(fn)
        assert AGGREGATORS.get(f"_base_exact_{i}").reads == reads, flags
    temporary.append("_base_exact_both")
    aggregator("_base_exact_both", reads=("round", "losses"), needs_round=True, uses_weights=True)(rule_with_round)
    assert AGGREGATORS.get("_base_exact_both").reads == ("round", "losses", "model", "weights")


def test_an_unknown_flag_is_refused_listing_the_legacy_ones():
    with pytest.raises(TypeError, match=r"^aggregator\(\) got unexpected keyword arguments \['needs_loss', 'zeta'\]; "
                                        r"allowed besides its own: needs_losses, uses_weights, needs_round, "
                                        r"needs_root, needs_probe$"):
        aggregator("_base_exact_rule", zeta=True, needs_loss=True)
    assert "_base_exact_rule" not in AGGREGATORS


def test_reads_that_are_not_names_are_refused_naming_the_aggregator():
    with pytest.raises(ConfigError, match=r"^aggregator '_base_exact_rule' declares reads=\('losses', 2\): a tuple of "
                                          r"round inputs' names"):
        aggregator("_base_exact_rule", reads=("losses", 2))


def test_a_certify_hook_and_its_reports_come_together(temporary):
    def certify(trial, state):
        return {}

    for i, value in enumerate((True, False, None)):
        temporary.append(f"_base_exact_{i}")
        aggregator(f"_base_exact_{i}", certify=certify, reports={"radius": value})(rule)
        assert AGGREGATORS.get(f"_base_exact_{i}").reports == {"radius": value}
        assert AGGREGATORS.get(f"_base_exact_{i}").certify is certify


def test_a_certify_hook_without_reports_or_reports_without_one_or_a_bad_direction_is_refused_in_words():
    def certify(trial, state):
        return {}

    prefix = (r"^aggregator '_base_exact_rule': a certify hook and the properties it reports come together "
              r"\(reports=\{name: higher is better, True, False or None\}\); got ")
    with pytest.raises(ConfigError, match=prefix + r"certify=None, reports=\{'r': True\}$"):
        aggregator("_base_exact_rule", reports={"r": True})
    with pytest.raises(ConfigError, match=prefix + r"certify=<function .*certify.*>, reports=\{\}$"):
        aggregator("_base_exact_rule", certify=certify)
    with pytest.raises(ConfigError, match=prefix + r"certify=<function .*certify.*>, reports=\{'r': 'up'\}$"):
        aggregator("_base_exact_rule", certify=certify, reports={"r": "up"})
    with pytest.raises(ConfigError, match=prefix + r"certify=<function .*certify.*>, reports=\{'a': True, 'b': 1.5\}$"):
        aggregator("_base_exact_rule", certify=certify, reports={"a": True, "b": 1.5})
    assert "_base_exact_rule" not in AGGREGATORS


def test_a_rule_reading_only_losses_and_weights_needs_no_round_keyword(temporary):
    temporary.append("_base_exact_rule")
    aggregator("_base_exact_rule", reads=("losses", "weights"))(rule)
    assert AGGREGATORS.get("_base_exact_rule").rule is rule
    temporary.append("_base_exact_round")
    aggregator("_base_exact_round", reads=("round", "model"))(rule_with_round)
    assert AGGREGATORS.get("_base_exact_round").needs_round is True


def test_a_rule_reading_the_round_without_a_round_keyword_is_refused_in_words():
    with pytest.raises(ConfigError, match=r"^aggregator '_base_exact_rule' reads weights, round, model but takes no "
                                          r"'round' keyword: the round's draw and inputs reach it as "
                                          r"round=RoundDraw\(\.\.\.\)$"):
        aggregator("_base_exact_rule", reads=("weights",), needs_round=True)(rule)
    assert "_base_exact_rule" not in AGGREGATORS


# --- check_common, check_updates -------------------------------------------------------------------------------------

def test_one_update_and_no_malicious_client_are_enough():
    check_common(1, 0)
    check_common(5, 4, anything=1)


def test_no_update_or_a_negative_f_is_refused_in_words():
    with pytest.raises(ConfigError, match=r"^an aggregator needs at least one update, got n=0$"):
        check_common(0, 0)
    with pytest.raises(ConfigError, match=r"^the number of malicious clients f must be >= 0, got f=-1$"):
        check_common(1, -1)


def test_check_updates_returns_the_number_of_rows():
    assert check_updates(UPDATES, 0) == 3
    assert check_updates(torch.zeros(1, 5, dtype=torch.float32), 2) == 1


def test_check_updates_refuses_other_than_2_d_floating_updates_in_words():
    with pytest.raises(ConfigError, match=r"^updates must be a 2-D tensor \[n, d\], got shape \(3,\)$"):
        check_updates(torch.zeros(3, dtype=F64), 0)
    with pytest.raises(ConfigError, match=r"^updates must be a 2-D tensor \[n, d\], got shape \(1, 2, 3\)$"):
        check_updates(torch.zeros(1, 2, 3, dtype=F64), 0)
    with pytest.raises(ConfigError, match=r"^updates must be floating point, got torch.int64$"):
        check_updates(torch.zeros(3, 2, dtype=torch.int64), 0)
    with pytest.raises(ConfigError, match=r"^an aggregator needs at least one update, got n=0$"):
        check_updates(torch.zeros(0, 3, dtype=F64), 0)
    with pytest.raises(ConfigError, match=r"^the number of malicious clients f must be >= 0, got f=-2$"):
        check_updates(UPDATES, -2)


# --- as_vector, normalised_weights, require_losses -------------------------------------------------------------------

def test_as_vector_flattens_to_the_updates_dtype():
    vec = as_vector([[1], [2], [3]], UPDATES, "weights")
    assert vec.dtype == F64 and vec.tolist() == [1.0, 2.0, 3.0]
    vec = as_vector(torch.tensor([0.5, 1.5, 2.5], dtype=torch.float32), UPDATES, "losses")
    assert vec.dtype == F64 and vec.shape == (3,) and vec.tolist() == [0.5, 1.5, 2.5]


def test_as_vector_refuses_a_wrong_count_in_words():
    with pytest.raises(ConfigError, match=r"^scores has 2 entries for 3 updates$"):
        as_vector([1.0, 2.0], UPDATES, "scores")
    with pytest.raises(ConfigError, match=r"^scores has 4 entries for 3 updates$"):
        as_vector(torch.ones(2, 2), UPDATES, "scores")


def test_weights_are_normalised_to_sum_one():
    assert normalised_weights(torch.tensor([1.0, 1.0, 2.0]), UPDATES).tolist() == [0.25, 0.25, 0.5]
    assert normalised_weights([3, 0, 1], UPDATES).tolist() == [0.75, 0.0, 0.25]  # a zero weight is allowed
    assert normalised_weights([0.25, 0.25], UPDATES[:2]).tolist() == [0.5, 0.5]  # a total below one too
    assert normalised_weights([4.0], UPDATES[:1]).dtype == F64


def test_negative_weights_or_a_zero_total_are_refused_in_words():
    with pytest.raises(ConfigError, match=r"^weights must be non-negative with a positive sum, got \[-1.0, 2.0, 1.0\]$"):
        normalised_weights([-1.0, 2.0, 1.0], UPDATES)
    with pytest.raises(ConfigError, match=r"^weights must be non-negative with a positive sum, got \[0.0, 0.0, 0.0\]$"):
        normalised_weights([0.0, 0.0, 0.0], UPDATES)
    with pytest.raises(ConfigError, match=r"^weights has 2 entries for 3 updates$"):
        normalised_weights([1.0, 1.0], UPDATES)


def test_losses_are_required_in_words_and_taken_as_a_vector():
    with pytest.raises(ConfigError, match=r"^aggregator 'k_loss' needs each client's training loss at the global "
                                          r"model; got none$"):
        require_losses(None, UPDATES, "k_loss")
    got = require_losses([0.5, 1.5, 2.5], UPDATES, "k_loss")
    assert got.dtype == F64 and got.tolist() == [0.5, 1.5, 2.5]
    with pytest.raises(ConfigError, match=r"^losses has 1 entries for 3 updates$"):
        require_losses([0.5], UPDATES, "k_loss")


# --- client_table ----------------------------------------------------------------------------------------------------

def test_a_new_table_is_filled_with_the_updates_dtype_or_bool():
    table = client_table({}, "history", 3, (2,), 0.5, UPDATES)
    assert table.dtype == F64 and table.tolist() == [[0.5, 0.5]] * 3
    flags = client_table({}, "flags", 4, (), False, UPDATES)
    assert flags.dtype == torch.bool and flags.tolist() == [False] * 4


def test_a_table_grows_with_fill_rows_for_higher_ids_and_the_state_is_not_modified():
    stored = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=torch.float32)
    server = {"history": stored}
    table = client_table(server, "history", 4, (3,), -1.0, UPDATES)
    assert table.dtype == F64
    assert table.tolist() == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [-1.0] * 3, [-1.0] * 3]
    assert server["history"] is stored and stored.shape == (2, 3) and stored.dtype == torch.float32
    flags = client_table({"flags": torch.tensor([True])}, "flags", 3, (), False, UPDATES)
    assert flags.dtype == torch.bool and flags.tolist() == [True, False, False]


def test_a_table_that_covers_every_id_is_handed_back_as_is():
    stored = torch.tensor([0.25, 0.5, 0.75], dtype=F64)
    assert client_table({"t": stored}, "t", 3, (), 0.0, UPDATES) is stored
    assert client_table({"t": stored}, "t", 2, (), 0.0, UPDATES) is stored  # never cut to fewer rows
    assert client_table({"t": stored}, "t", 4, (), 0.0, UPDATES).tolist() == [0.25, 0.5, 0.75, 0.0]


# --- column blocks ---------------------------------------------------------------------------------------------------

def test_column_blocks_hold_at_most_chunk_elements():
    wide = torch.empty(4, 1 << 21, device="meta")  # shape only: 4 rows, 2^20 columns a block
    assert column_blocks(wide) == [slice(0, 1 << 20), slice(1 << 20, 1 << 21)]
    assert column_blocks(torch.empty(1, 5, device="meta")) == [slice(0, 5)]


def test_column_blocks_with_a_small_chunk(monkeypatch):
    monkeypatch.setattr(base, "CHUNK_ELEMENTS", 4)
    x = torch.zeros(1, 10)
    assert column_blocks(x) == [slice(0, 4), slice(4, 8), slice(8, 10)]  # one row: 4 columns a block
    assert column_blocks(torch.zeros(2, 5)) == [slice(0, 2), slice(2, 4), slice(4, 5)]
    assert column_blocks(torch.zeros(5, 3)) == [slice(0, 1), slice(1, 2), slice(2, 3)]  # at least one column
    assert column_blocks(torch.zeros(0, 6)) == [slice(0, 4), slice(4, 6)]  # no rows: as one


# --- medians ---------------------------------------------------------------------------------------------------------

def test_the_median_of_an_even_count_is_the_mean_of_the_middle_two():
    assert vector_median(torch.tensor([4.0, 1.0, 3.0, 2.0], dtype=F64)).item() == 2.5
    assert vector_median(torch.tensor([1.0, 5.0], dtype=F64)).item() == 3.0
    assert vector_median(torch.tensor([10.0, -2.0, 0.0, 7.0, 1.0, 3.0], dtype=F64)).item() == 2.0


def test_the_median_of_an_odd_count_is_the_middle_value():
    assert vector_median(torch.tensor([3.0, 1.0, 2.0], dtype=F64)).item() == 2.0
    assert vector_median(torch.tensor([9.0], dtype=F64)).item() == 9.0
    assert vector_median(torch.tensor([5.0, -1.0, 4.0, 0.0, 8.0], dtype=F64)).item() == 4.0


def test_a_nan_makes_the_median_nan_for_even_and_odd_counts():
    assert vector_median(torch.tensor([1.0, float("nan"), 2.0, 3.0], dtype=F64)).isnan()
    assert vector_median(torch.tensor([1.0, float("nan"), 2.0], dtype=F64)).isnan()


def test_the_coordinate_median_takes_each_column_block_by_block(monkeypatch):
    x = torch.tensor([[1.0, 4.0, 0.0], [2.0, 3.0, float("nan")], [6.0, 2.0, 1.0], [3.0, 1.0, 2.0]], dtype=F64)
    expected = [2.5, 2.5, None]  # (2 + 3) / 2, (2 + 3) / 2, NaN
    for chunk in (1 << 22, 4):  # one block, then one column a block
        monkeypatch.setattr(base, "CHUNK_ELEMENTS", chunk)
        got = coordinate_median(x)
        assert got.shape == (3,) and got[:2].tolist() == expected[:2] and got[2].isnan()
        assert coordinate_median(x[:3]).tolist()[:2] == [2.0, 3.0]  # odd count: the middle value


# --- distances and subset_mean ---------------------------------------------------------------------------------------

def test_row_sq_distances_add_up_over_the_column_blocks(monkeypatch):
    v = torch.tensor([1.0, 1.0], dtype=F64)
    expected = [1.0, 13.0, 52.0]  # (0, 1): 1; (2, 3): 4 + 9; (4, 6): 16 + 36
    assert row_sq_distances(UPDATES, v).tolist() == expected
    monkeypatch.setattr(base, "CHUNK_ELEMENTS", 3)  # one column a block
    assert row_sq_distances(UPDATES, v).tolist() == expected
    assert row_sq_distances(UPDATES, UPDATES[1]).tolist() == [8.0, 0.0, 13.0]


def test_pairwise_sq_distances_exactly_over_the_column_blocks(monkeypatch):
    # rows 0 and 3 equal; row 1 is 0.5 from row 0 in the first coordinate
    x = torch.tensor([[0.0, 0.0], [0.5, 0.0], [0.0, 3.0], [0.0, 0.0]], dtype=F64)
    expected = [[0.0, 0.25, 9.0, 0.0], [0.25, 0.0, 9.25, 0.25], [9.0, 9.25, 0.0, 9.0], [0.0, 0.25, 9.0, 0.0]]
    assert pairwise_sq_distances(x).tolist() == expected
    monkeypatch.setattr(base, "CHUNK_ELEMENTS", 4)  # one column a block
    assert pairwise_sq_distances(x).tolist() == expected
    assert pairwise_sq_distances(UPDATES).tolist() == [[0.0, 8.0, 41.0], [8.0, 0.0, 13.0], [41.0, 13.0, 0.0]]


def test_pairwise_sq_distances_centre_a_large_common_part_away():
    # 1e9 in every coordinate plus (0, 0), (3, 0), (0, 3): the column means are 1e9 + 1 exactly, the centred rows
    # (-1, -1), (2, -1), (-1, 2); uncentred, |a|^2 ~ 2e18 loses every digit of the distances
    x = torch.tensor([[0.0, 0.0], [3.0, 0.0], [0.0, 3.0]], dtype=F64) + 1e9
    assert pairwise_sq_distances(x).tolist() == [[0.0, 9.0, 9.0], [9.0, 0.0, 18.0], [9.0, 18.0, 0.0]]


def test_subset_mean_is_the_uniform_mean_of_the_given_rows():
    assert subset_mean(UPDATES, torch.tensor([0, 2])).tolist() == [3.0, 4.5]
    assert subset_mean(UPDATES, torch.tensor([1])).tolist() == [3.0, 4.0]
    assert subset_mean(UPDATES, torch.arange(3)).tolist() == [3.0, 13.0 / 3.0]


def test_reads_given_as_one_string_are_refused_not_split_into_letters(temporary):
    # a string is iterable: taken as a tuple it would declare the reads 'l', 'o', 's', 'e' and fail later, confusingly
    temporary.append("_base_exact_rule")
    with pytest.raises(ConfigError, match=r"^aggregator '_base_exact_rule' declares reads='losses': a tuple of round "
                                          r"inputs' names"):
        aggregator("_base_exact_rule", reads="losses")
    temporary.append("_base_exact_pre")
    with pytest.raises(ConfigError, match=r"^pre-aggregator '_base_exact_pre' declares reads='root_update': a tuple "
                                          r"of round inputs' names"):
        pre_aggregator("_base_exact_pre", inputs="root_update")
    assert "_base_exact_rule" not in AGGREGATORS and "_base_exact_pre" not in PRE_AGGREGATORS


def test_reads_given_as_a_generator_are_read_once_and_kept(temporary):
    # checking each name used to consume a generator, which then declared no reads at all
    temporary.append("_base_exact_rule")
    aggregator("_base_exact_rule", reads=(r for r in ("round", "losses")))(lambda u, *, weights, losses, f, round: u)
    assert AGGREGATORS.get("_base_exact_rule").reads == ("round", "losses")
    temporary.append("_base_exact_pre")
    pre_aggregator("_base_exact_pre", inputs=iter(["model"]))(lambda u, *, f, round: u)
    assert PRE_AGGREGATORS.get("_base_exact_pre").inputs == ("model",)


def test_tasks_and_device_reads_given_as_one_string_are_refused(temporary):
    temporary.extend(["_base_exact_rule", "_base_exact_pre"])
    for key, value in (("tasks", "classification"), ("device_reads", "device_data")):
        with pytest.raises(ConfigError, match=rf"^aggregator '_base_exact_rule' declares {key}='{value}': a tuple of "
                                              r"names, not one string$"):
            aggregator("_base_exact_rule", **{key: value})(lambda u, *, weights, f: u)
    with pytest.raises(ConfigError, match=r"^pre-aggregator '_base_exact_pre' declares device_reads='device_data': a "
                                          r"tuple of names, not one string$"):
        pre_aggregator("_base_exact_pre", device_reads="device_data")(lambda u, *, f: u)
    assert "_base_exact_rule" not in AGGREGATORS and "_base_exact_pre" not in PRE_AGGREGATORS
    aggregator("_base_exact_rule", tasks=["classification"], device_reads=["device_data"])(lambda u, *, weights, f: u)
    assert AGGREGATORS.get("_base_exact_rule").tasks == ("classification",)
    assert AGGREGATORS.get("_base_exact_rule").device_reads == ("device_data",)
