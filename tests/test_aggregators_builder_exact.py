"""The aggregator builder, exactly (the mutation score of ``methods/aggregators/builder.py``: docs/testing.md): its
structural keys and the rule arguments that are no config keys, the resolved section (``pre`` canonical, ``f``), the
``Aggregator`` record (frozen, its defaults, its properties), the pre-aggregators' specs and their refusals in words,
``resolve_f`` and ``expected_malicious`` at their edges, the rule's ``round`` after bucketing, ``kept``, the client
weighting p on top of a rule's own, and ``check_rule``'s refusals of rules that cannot follow a row-merging
pre-aggregator."""

import dataclasses

import pytest
import torch

from fedarena.errors import ConfigError
from fedarena.methods.aggregators import AGGREGATORS
from fedarena.methods.aggregators.base import PRE_AGGREGATORS, RoundDraw
from fedarena.methods.aggregators.builder import (
    AGGREGATOR_SECTION,
    RULE_ARGUMENTS,
    STRUCTURAL_KEYS,
    Aggregator,
    aggregator_from,
    check_aggregator,
    check_rule,
    expected_malicious,
    make_aggregator,
    pre_canonical,
    pre_defaults,
    pre_names,
    pre_specs,
    resolve_f,
)
from fedarena.round_stages import Pipeline

F64 = torch.float64
ALLOWED_PRE = "arc, bucketing, clip, nnm"


def t(rows):
    return torch.tensor(rows, dtype=F64)


def buckets(n, s, seed=0):
    """Reference bucketing: a permutation of n rows from a generator seeded with the round's seed, cut in s."""
    return list(torch.randperm(n, generator=torch.Generator().manual_seed(seed)).split(s))


# ---- constants, section kind, resolved sections -------------------------------------------------------------------

def test_structural_keys_and_rule_arguments():
    assert STRUCTURAL_KEYS == ("name", "pre", "f")
    assert RULE_ARGUMENTS == ("weights", "losses", "f", "round")


def test_section_kind_is_aggregator_with_pre_and_f_structural_and_the_rule_as_signature():
    assert AGGREGATOR_SECTION.kind == "aggregator"
    assert AGGREGATOR_SECTION.structural_keys == ("pre", "f")
    assert AGGREGATOR_SECTION.exclude == RULE_ARGUMENTS
    entry = AGGREGATORS.get("krum")
    assert AGGREGATOR_SECTION.signature(entry) is entry.rule


def test_resolved_sections_list_pre_f_and_the_rules_hyperparameters_only():
    assert AGGREGATOR_SECTION.resolve({"name": "weighted_mean"}) == {"name": "weighted_mean", "pre": [], "f": None}
    assert AGGREGATOR_SECTION.resolve({"name": "krum", "pre": [{"name": "bucketing", "s": 2}, "clip"], "f": 1}) == {
        "name": "krum", "pre": ["bucketing", "clip"], "f": 1, "reference_mode": False}
    assert AGGREGATOR_SECTION.resolve({"name": "mean", "pre": [{"name": "bucketing", "s": 3}]}) == {
        "name": "mean", "pre": [{"name": "bucketing", "s": 3}], "f": None}


def test_the_rules_inputs_are_no_config_keys():
    for key in ("weights", "losses", "round"):
        with pytest.raises(ConfigError):
            make_aggregator({"name": "weighted_mean", key: None}, f=0)
    with pytest.raises(ConfigError):
        AGGREGATOR_SECTION.resolve({"name": "k_loss", "losses": None})


# ---- the Aggregator record ----------------------------------------------------------------------------------------

def test_aggregator_is_frozen_with_empty_defaults():
    agg = Aggregator("mean", AGGREGATORS.get("mean"), 0)
    assert agg.params == {} and agg.pre == () and agg.pre_fns == () and agg.pre_options == ()
    assert agg.round is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        agg.f = 3
    assert agg(t([[1.0, 2.0], [3.0, 6.0]]), t([1.0, 1.0])).tolist() == [2.0, 4.0]


def test_make_aggregator_fills_name_entry_f_params_and_pre():
    agg = make_aggregator({"name": "trimmed_mean", "pre": ["clip", {"name": "bucketing", "s": 3}], "f": 1,
                           "beta": 0.25}, f=4)
    assert agg.name == "trimmed_mean" and agg.entry is AGGREGATORS.get("trimmed_mean")
    assert agg.f == 1
    assert agg.params == {"beta": 0.25}
    assert agg.pre == ("clip", "bucketing")
    assert agg.pre_fns == (PRE_AGGREGATORS.get("clip"), PRE_AGGREGATORS.get("bucketing"))
    assert agg.pre_options == ({}, {"s": 3})
    plain = aggregator_from({"name": "krum", "pre": [], "f": None, "reference_mode": False}, f=2)
    assert (plain.name, plain.f, plain.params, plain.pre, plain.pre_fns) == ("krum", 2, {"reference_mode": False},
                                                                            (), ())


def test_needs_losses_uses_weights_and_selects_are_booleans():
    assert make_aggregator({"name": "k_loss"}, f=0).needs_losses is True
    assert make_aggregator({"name": "mean"}, f=0).needs_losses is False
    assert make_aggregator({"name": "weighted_mean"}, f=0).uses_weights is True
    assert make_aggregator({"name": "mean"}, f=0).uses_weights is False
    assert make_aggregator({"name": "krum"}, f=0).selects is True
    assert make_aggregator({"name": "mean"}, f=0).selects is False


def test_needs_round_from_the_rule_or_a_pre_aggregator_that_reads_the_round():
    assert make_aggregator({"name": "krum"}, f=0).needs_round is True
    assert make_aggregator({"name": "mean"}, f=0).needs_round is False
    assert make_aggregator({"name": "mean", "pre": ["bucketing"]}, f=0).needs_round is True
    assert make_aggregator({"name": "mean", "pre": ["nnm", "clip"]}, f=0).needs_round is False


def test_inputs_are_the_registered_ones_the_rule_and_pre_aggregators_read():
    assert make_aggregator({"name": "krum", "pre": ["nnm"]}, f=0).inputs == ()
    assert make_aggregator({"name": "crfl"}, f=0).inputs == ("model",)
    entry = dataclasses.replace(AGGREGATORS.get("mean"), reads=("no_such_input",))
    with pytest.raises(ConfigError, match="^aggregator 'mine' reads 'no_such_input', which no round input provides"):
        Aggregator("mine", entry, 0).inputs  # noqa: B018


def test_pipeline_holds_the_rules_certificate_with_its_hyperparameters_or_nothing():
    assert make_aggregator({"name": "mean"}, f=0).pipeline() == Pipeline()
    pipe = make_aggregator({"name": "crfl", "samples": 7}, f=0).pipeline()
    (stage,) = pipe.evaluation
    assert stage.func is AGGREGATORS.get("crfl").certify
    assert stage.keywords == {"clip": 15.0, "sigma": 0.01, "test_sigma": None, "samples": 7, "alpha": 0.001}


def test_for_round_sets_the_draw_and_keeps_the_rest():
    agg = make_aggregator({"name": "krum"}, f=1)
    draw = RoundDraw(torch.arange(3), seed=5)
    got = agg.for_round(draw)
    assert got.round is draw and agg.round is None and got.f == 1 and got.name == "krum"


# ---- pre-aggregators -----------------------------------------------------------------------------------------------

def test_pre_aggregated_applies_the_pre_aggregators_in_order():
    # nnm with f = 0: each row becomes the mean of its n - f = 3 nearest rows, i.e. of all three
    agg = make_aggregator({"name": "mean", "pre": ["nnm"]}, f=0)
    out = agg.pre_aggregated(t([[0.0, 3.0], [3.0, 0.0], [6.0, 6.0]]))
    torch.testing.assert_close(out, t([[3.0, 3.0]] * 3), rtol=0, atol=1e-12)
    assert make_aggregator({"name": "mean"}, f=0).pre_aggregated(t([[1.0, 2.0]])).tolist() == [[1.0, 2.0]]


def test_pre_functions_and_their_options_must_pair_up():
    lopsided = Aggregator("mean", AGGREGATORS.get("mean"), 0, pre=("nnm",), pre_fns=(PRE_AGGREGATORS.get("nnm"),))
    with pytest.raises(ValueError):
        lopsided.pre_aggregated(t([[1.0], [2.0]]))
    with pytest.raises(ValueError):
        lopsided.merged_rows(2)
    with pytest.raises(ValueError):
        check_rule(lopsided, n=3)


def test_merged_rows_is_none_without_a_merging_pre_aggregator():
    assert make_aggregator({"name": "mean", "pre": ["clip"]}, f=0).merged_rows(4) is None
    assert make_aggregator({"name": "mean"}, f=0).merged_rows(4) is None


def test_merged_rows_of_one_bucketing_are_the_seeded_permutation_cut_in_s():
    agg = make_aggregator({"name": "mean", "pre": [{"name": "bucketing", "s": 2}]}, f=0)
    got = agg.merged_rows(5)
    assert [g.tolist() for g in got] == [g.tolist() for g in buckets(5, 2)]
    drawn = agg.for_round(RoundDraw(torch.arange(5), seed=9)).merged_rows(5)
    assert [g.tolist() for g in drawn] == [g.tolist() for g in buckets(5, 2, seed=9)]


def test_two_bucketings_compose_into_groups_of_the_input_rows():
    agg = make_aggregator({"name": "mean", "pre": ["bucketing", "bucketing"]}, f=0)
    first, second = buckets(8, 2), buckets(4, 2)
    expected = [torch.cat([first[i] for i in rows.tolist()]).tolist() for rows in second]
    got = agg.merged_rows(8)
    assert [g.tolist() for g in got] == expected
    assert sorted(sum(expected, [])) == list(range(8))


def test_after_bucketing_the_rule_gets_the_groups_summed_weights():
    # n = 4 rows, d = 3, s = 2: two buckets of two; weighted_mean of the bucket means with summed weights
    updates = t([[1.0, 0.0, 2.0], [3.0, 4.0, -2.0], [5.0, 8.0, 0.0], [-1.0, 2.0, 6.0]])
    weights = t([1.0, 2.0, 3.0, 4.0])
    groups = buckets(4, 2)
    means = torch.stack([updates[g].mean(dim=0) for g in groups])
    sums = torch.stack([weights[g].sum() for g in groups])
    expected = (sums[:, None] * means).sum(dim=0) / sums.sum()
    agg = make_aggregator({"name": "weighted_mean", "pre": ["bucketing"]}, f=0)
    torch.testing.assert_close(agg(updates, weights), expected, rtol=0, atol=1e-12)
    # equal weights, equal buckets: the plain mean of the rows whatever the permutation
    torch.testing.assert_close(agg(updates, torch.ones(4, dtype=F64)), updates.mean(dim=0), rtol=0, atol=1e-12)


# ---- the rule's round ----------------------------------------------------------------------------------------------

def test_rule_round_is_nothing_for_a_rule_that_reads_no_round():
    assert make_aggregator({"name": "mean"}, f=0)._rule_round(None) == {}
    assert make_aggregator({"name": "mean"}, f=0).for_round(RoundDraw(torch.arange(2)))._rule_round(None) == {}


def test_rule_round_is_the_draw_itself_without_merging_or_without_a_draw():
    agg = make_aggregator({"name": "krum"}, f=0)
    assert agg._rule_round(None) == {"round": None}
    assert agg._rule_round([torch.tensor([0, 1])]) == {"round": None}
    draw = RoundDraw(torch.tensor([2, 0, 1]), seed=4)
    assert agg.for_round(draw)._rule_round(None)["round"] is draw


def test_rule_round_after_merging_orders_the_groups_and_drops_the_ids():
    draw = RoundDraw(torch.tensor([3, 1, 0, 2]), seed=11, ids=torch.tensor([10, 11, 12, 13]))
    agg = make_aggregator({"name": "krum"}, f=0).for_round(draw)
    (key, got), = agg._rule_round([torch.tensor([0, 2]), torch.tensor([1, 3])]).items()
    assert key == "round"
    assert got.order.tolist() == [0, 1] and got.ids is None and got.seed == 11


# ---- kept ----------------------------------------------------------------------------------------------------------

FIVE = [[0.0, 0.0], [0.1, 0.0], [0.0, 0.1], [-0.1, 0.0], [10.0, 10.0]]


def test_kept_is_krums_choice_as_a_mask_over_the_rows():
    # f = 1, n = 5: score = sum of the n - f - 2 = 2 smallest squared distances; row 0 scores 0.02, the least
    mask = make_aggregator({"name": "krum"}, f=1).kept(t(FIVE))
    assert mask.dtype == torch.bool
    assert mask.tolist() == [True, False, False, False, False]


def test_kept_of_a_rule_that_selects_nothing_is_refused_in_words():
    with pytest.raises(ConfigError) as err:
        make_aggregator({"name": "mean"}, f=0).kept(t(FIVE))
    assert str(err.value) == "aggregator 'mean' keeps no subset of the rows; it has no selection to check"


def test_kept_after_bucketing_keeps_every_client_of_the_kept_bucket():
    updates = t([[0.0, 0.0, 1.0], [0.5, 0.0, 0.0], [9.0, 1.0, 0.0], [0.0, 0.25, 0.0], [4.0, -3.0, 0.0],
                 [0.0, 0.0, -0.5], [7.0, 7.0, 7.0], [-2.0, 1.0, 0.0]])
    groups = buckets(8, 2)
    means = torch.stack([updates[g].mean(dim=0) for g in groups])
    sq = ((means[:, None, :] - means[None, :, :]) ** 2).sum(dim=2)
    # krum with f = 0 over the 4 bucket means: sum of the n - f - 2 = 2 nearest squared distances
    scores = torch.stack([torch.sort(torch.cat([sq[i, :i], sq[i, i + 1:]])).values[:2].sum() for i in range(4)])
    best = int(torch.argmin(scores))
    expected = [i in groups[best].tolist() for i in range(8)]
    assert make_aggregator({"name": "krum", "pre": ["bucketing"]}, f=0).kept(updates).tolist() == expected


# ---- client weights ------------------------------------------------------------------------------------------------

def test_client_weights_scale_the_updates_by_n_p_for_a_rule_that_ignores_weights():
    agg = make_aggregator({"name": "mean"}, f=0)
    updates, weights, p = t([[1.0, 2.0], [3.0, 4.0]]), t([5.0, 7.0]), t([0.25, 0.75])
    got_u, got_w = agg.with_client_weights(updates, weights, p)
    assert got_u.tolist() == [[0.5, 1.0], [4.5, 6.0]] and got_w.tolist() == [5.0, 7.0]
    # the uniform mean is then sum_i p_i u_i
    assert agg(updates, weights, client_weights=p).tolist() == [2.5, 3.5]
    assert agg(updates, weights).tolist() == [2.0, 3.0]


def test_client_weights_multiply_the_weights_and_scale_by_sum_p_for_a_rule_that_reads_weights():
    agg = make_aggregator({"name": "weighted_mean"}, f=0)
    updates, weights, p = t([[1.0, 2.0], [3.0, 4.0]]), t([1.0, 3.0]), t([0.5, 1.5])
    got_u, got_w = agg.with_client_weights(updates, weights, p)
    assert got_u.tolist() == [[2.0, 4.0], [6.0, 8.0]] and got_w.tolist() == [0.5, 4.5]
    # sum(p) * sum_i a_i p_i u_i / sum_i a_i p_i = 2 * (0.1 u_0 + 0.9 u_1) = (5.6, 7.6)
    torch.testing.assert_close(agg(updates, weights, client_weights=p), t([5.6, 7.6]), rtol=0, atol=1e-12)


# ---- pre specs -----------------------------------------------------------------------------------------------------

def test_pre_specs_fill_defaults_and_keep_order():
    assert pre_specs({}) == ()
    assert pre_specs({"pre": None}) == ()
    assert pre_specs({"pre": ("clip",)}) == (("clip", {}),)
    assert pre_specs({"pre": ["clip", {"name": "bucketing", "s": 3}, "bucketing"]}) == (
        ("clip", {}), ("bucketing", {"s": 3}), ("bucketing", {"s": 2}))
    assert pre_names({"pre": ["nnm", {"name": "arc"}]}) == ("nnm", "arc")
    assert pre_defaults("bucketing") == {"s": 2} and pre_defaults("clip") == {}


def test_pre_that_is_not_a_list_is_refused_listing_the_pre_aggregators():
    with pytest.raises(ConfigError) as err:
        pre_specs({"pre": "clip"})
    assert str(err.value) == (f"aggregator 'pre' must be a list of pre-aggregators ({ALLOWED_PRE}), each a name or "
                              "{name: ..., option: value}; got 'clip'")


@pytest.mark.parametrize("item", [5, {"s": 2}, {"name": 3}])
def test_a_pre_entry_without_a_name_is_refused_in_words(item):
    with pytest.raises(ConfigError) as err:
        pre_specs({"pre": [item]})
    assert str(err.value) == (f"each aggregator 'pre' entry needs a name ({ALLOWED_PRE}): a name or {{name: ..., "
                              f"option: value}}; got {item!r}")


def test_an_unknown_pre_option_is_refused_listing_the_allowed_ones():
    with pytest.raises(ConfigError) as err:
        pre_specs({"pre": [{"name": "bucketing", "t": 1, "a": 2}]})
    assert str(err.value) == "pre-aggregator 'bucketing' has no option 'a', 't' (allowed: s)"
    with pytest.raises(ConfigError) as err:
        pre_specs({"pre": [{"name": "clip", "s": 1}]})
    assert str(err.value) == "pre-aggregator 'clip' has no option 's' (it takes no option)"


def test_pre_canonical_names_a_pre_aggregator_at_its_defaults_and_keeps_changed_options():
    section = {"pre": ["bucketing", {"name": "bucketing", "s": 2}, {"name": "bucketing", "s": 3}, {"name": "clip"}]}
    assert pre_canonical(section) == ["bucketing", "bucketing", {"name": "bucketing", "s": 3}, "clip"]
    assert pre_canonical({}) == []


# ---- f -------------------------------------------------------------------------------------------------------------

def test_resolve_f_takes_the_sections_f_over_the_engines():
    assert resolve_f({}, 3) == 3
    assert resolve_f({"f": None}, 3) == 3
    assert resolve_f({"f": 2}, 5) == 2
    assert resolve_f({"f": 0}, 5) == 0
    assert resolve_f({}, 0) == 0
    assert make_aggregator({"name": "mean", "f": 1}, f=4).f == 1


@pytest.mark.parametrize("bad", [-1, True, 1.5, "1"])
def test_resolve_f_refuses_what_is_not_an_integer_at_least_zero_in_words(bad):
    with pytest.raises(ConfigError) as err:
        resolve_f({"f": bad}, 2)
    assert str(err.value) == f"aggregator f (number of malicious clients assumed) must be an integer >= 0, got {bad!r}"


# ---- check_rule ----------------------------------------------------------------------------------------------------

def test_the_rule_is_checked_on_the_rows_it_sees_after_bucketing():
    check_aggregator({"name": "trimmed_mean"}, n=3, f=1)  # 2f = 2 < 3
    check_aggregator({"name": "trimmed_mean", "pre": ["bucketing"]}, n=6, f=1)  # 3 buckets
    with pytest.raises(ConfigError):
        check_aggregator({"name": "trimmed_mean", "pre": ["bucketing"]}, n=4, f=1)  # 2 buckets: 2f >= 2


def test_pre_aggregators_without_a_check_pass_and_those_with_one_are_checked():
    check_aggregator({"name": "mean", "pre": ["clip"]}, n=3, f=0)
    check_aggregator({"name": "k_loss", "pre": ["clip"]}, n=3, f=0)
    check_aggregator({"name": "foolsgold", "pre": ["clip"]}, n=3, f=0)
    check_aggregator({"name": "mean", "pre": ["bucketing"]}, n=3, f=0)
    with pytest.raises(ConfigError, match="pre-aggregator 'arc'"):
        check_aggregator({"name": "mean", "pre": ["arc"]}, n=3, f=3)


def test_a_loss_reading_rule_after_bucketing_is_refused_in_words():
    with pytest.raises(ConfigError) as err:
        check_aggregator({"name": "k_loss", "pre": ["bucketing"]}, n=6, f=0)
    assert str(err.value) == ("aggregator 'k_loss' reads each client's training loss, which pre-aggregator "
                              "'bucketing' merges away (it averages clients' rows); drop one of them")


def test_a_per_client_rule_after_bucketing_is_refused_in_words():
    with pytest.raises(ConfigError) as err:
        check_aggregator({"name": "foolsgold", "pre": ["bucketing"]}, n=6, f=0)
    assert str(err.value) == ("aggregator 'foolsgold' keeps per-client state across rounds, which pre-aggregator "
                              "'bucketing' cannot give it (it averages clients' rows); drop one of them")


# ---- expected_malicious --------------------------------------------------------------------------------------------

def test_expected_malicious_is_the_floor_of_the_expected_count():
    assert expected_malicious(5, 2, 4) == 2 and isinstance(expected_malicious(5, 2, 4), int)  # floor(10 / 4)
    assert expected_malicious(10, 3, 100) == 0
    assert expected_malicious(10, 30, 100) == 3


def test_expected_malicious_accepts_its_edges():
    assert expected_malicious(3, 1, 1) == 3  # one client
    assert expected_malicious(0, 2, 4) == 0  # no client drawn
    assert expected_malicious(4, 0, 4) == 0  # none corrupted
    assert expected_malicious(4, 4, 4) == 4  # all corrupted


@pytest.mark.parametrize("args", [(3, 0, 0), (-1, 1, 4), (3, -1, 4), (3, 5, 4)])
def test_expected_malicious_refuses_out_of_range_counts_in_words(args):
    with pytest.raises(ConfigError) as err:
        expected_malicious(*args)
    assert str(err.value) == ("expected_malicious needs num_clients >= 1, clients_per_round >= 0 and 0 <= "
                              f"num_corrupted <= num_clients; got {args[0]}, {args[1]}, {args[2]}")


def test_the_records_annotations_resolve():
    import typing

    hints = typing.get_type_hints(Aggregator)
    assert hints["round"] == RoundDraw | None and hints["f"] is int


def test_an_unknown_option_of_a_pre_aggregator_with_several_lists_each_in_order():
    # no built-in pre-aggregator has two options; a user's may (a registered one, removed after the test)
    from fedarena.methods.aggregators.base import pre_aggregator

    pre_aggregator("_builder_exact_two")(lambda updates, *, f, width=1.0, depth=2: updates)
    try:
        with pytest.raises(ConfigError) as err:
            pre_specs({"pre": [{"name": "_builder_exact_two", "height": 3}]})
        assert str(err.value) == "pre-aggregator '_builder_exact_two' has no option 'height' (allowed: depth, width)"
    finally:
        PRE_AGGREGATORS.remove("_builder_exact_two")
