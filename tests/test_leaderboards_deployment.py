"""The deployment table and figure (fedarena.leaderboards.deployment_table, deployment_figure) from a hand-made frame
of runs: worst case over the attacks per deployment, the clean reference, excluded cells with their reasons."""

import pandas as pd
from test_leaderboards_tables import run, texts

from fedarena.leaderboards import deployment_figure
from fedarena.leaderboards.build import leaderboard_tables
from fedarena.leaderboards.deployment_figure import deployment_data, write_deployment_figures
from fedarena.leaderboards.deployment_table import (
    deployment_facts,
    excluded_frame,
    grid_exclusions,
)
from fedarena.leaderboards.render import html_fragment, render
from fedarena.leaderboards.specs import SPECS, build_table

SYSTEMS = {"synchronous": ("synchronous", 0.0, 0.0, "drop", ""), "fail0.3": ("synchronous", 0.3, 0.0, "drop", ""),
           "fail0.6": ("synchronous", 0.6, 0.0, "drop", ""),
           "straggle0.5_drop": ("synchronous", 0.0, 0.5, "drop", ""),
           "straggle0.5_include": ("synchronous", 0.0, 0.5, "include", ""),
           "async_k5": ("asynchronous", 0.0, 0.0, "drop", ""), "f_double": ("synchronous", 0.0, 0.0, "drop", "double")}
# accuracy of (method, deployment): clean, then under ALIE and Min-Max (each seed +- 0.01)
ACC = {("global", "synchronous"): (0.90, 0.60, 0.70), ("global", "fail0.3"): (0.88, 0.55, 0.72),
       ("global", "fail0.6"): (0.85, 0.50, 0.71), ("global", "straggle0.5_drop"): (0.87, 0.58, 0.66),
       ("global", "straggle0.5_include"): (0.89, 0.61, 0.64), ("global", "async_k5"): (0.86, 0.52, 0.62),
       ("global", "f_double"): (None, 0.60, 0.70),
       ("krum", "synchronous"): (0.80, 0.75, 0.78), ("krum", "fail0.3"): (0.79, 0.74, 0.70),
       ("krum", "fail0.6"): (0.78, 0.62, 0.73), ("krum", "straggle0.5_drop"): (0.79, 0.72, 0.75),
       ("krum", "straggle0.5_include"): (0.77, 0.65, 0.76), ("krum", "async_k5"): (0.76, 0.70, 0.71),
       ("krum", "f_double"): (None, None, None)}
UNDEFINED = "krum scores the n - f - 2 nearest neighbours and needs n - f - 2 >= 1, got n=5, f=4"
SKIPPED = {("krum", "fail0.6", "alie"): (6, 7)}  # rounds skipped by seed (of 10): Krum aggregated 3.5 on average


def deployed_run(method, deployment, attack, seed, acc):
    name, failure, stragglers, policy, declared = SYSTEMS[deployment]
    level = 0.0 if attack == "clean" else 0.2
    tags = {"deployment_label": deployment} if deployment != "synchronous" else {}
    tags.update({"f_declared": declared} if declared else {})
    # a deployment other than the lab records its skips and the attackers' share (failures raise it)
    recorded = {"rounds_skipped": float(SKIPPED.get((method, deployment, attack), (0, 0))[seed]),
                "attacker_share": 0.0 if attack == "clean" else 0.2 + 0.4 * failure} if (
        name != "synchronous" or failure or stragglers) else {}
    return run("digits", method, attack, level, seed, acc + (0.01 if seed else -0.01), 0.05,
               cell_hash=f"digits/{method}/{attack}/{level}/{deployment}", **tags, **recorded, rounds="10", **{
                   "system.name": name, "system.failure_rate": str(failure), "system.stragglers": str(stragglers),
                   "system.straggler_policy": policy, **({"system.buffer": "5"} if name == "asynchronous" else {})})


RUNS = [deployed_run(m, d, attack, seed, acc) for (m, d), accs in ACC.items()
        for attack, acc in zip(("clean", "alie", "min_max"), accs, strict=True) if acc is not None for seed in (0, 1)]
EXCLUDED = excluded_frame(
    [{"name": "", "method_label": m, "dataset_label": "digits", "attack_label": "clean", "level": 0.0, "seed": s,
      "privacy_label": "none", "deployment_label": "f_double", "reason": "f declared double is 0 ...",
      "same_as": "synchronous"} for m in ("global", "krum") for s in (0, 1)]
    + [{"name": "", "method_label": "krum", "dataset_label": "digits", "attack_label": a, "level": 0.2, "seed": 0,
        "privacy_label": "none", "deployment_label": "f_double", "reason": UNDEFINED, "same_as": ""}
       for a in ("alie", "min_max")])


def tables(runs=RUNS, excluded=EXCLUDED):
    found, cells, prepared = leaderboard_tables(pd.DataFrame(runs), ci=False, excluded=excluded)
    return {t.name: t for t in found}, cells, prepared


def test_the_table_holds_each_rows_worst_case_and_clean_accuracy_per_deployment():
    # Execute
    table = tables()[0]["deployment"]
    # Assert: a clean block and a worst-case block, one column per deployment in the suite's order
    clean, worst = table.blocks
    assert (clean.title, worst.title) == ("digits clean", "digits worst@20%")
    assert worst.header == ["method", "synchronous", "fail0.3", "fail0.6", "straggle0.5_drop", "straggle0.5_include",
                            "async_k5", "f_double"]
    rows = {row[0]: row[1:] for row in texts(worst)}
    assert rows["global"][:2] == [".600 [alie] (agg 10/10, att as drawn)", ".550 [alie] (agg 10/10, att 32%)"]
    assert rows["global"][4] == ".610 [alie] (agg 10/10, att 20%)"  # straggle0.5_include
    assert rows["krum"][4] == "**.650 [alie] (agg 10/10, att 20%)**"
    assert rows["krum"][1] == "**.700 [min_max] (agg 10/10, att 32%)**"
    assert rows["krum"][6] == f"undefined: {UNDEFINED}"


def test_a_cell_whose_rule_aggregated_fewer_than_half_its_rounds_is_marked_and_never_bold():
    # Execute: Krum under ALIE at fail0.6 skipped 6 and 7 of 10 rounds; its .620 is the column's highest
    rows = {row[0]: row[1:] for row in texts(tables()[0]["deployment"].blocks[1])}
    tidy = tables()[0]["deployment"].tidy
    # Assert: marked, not bold; the column's bold is the best cell that is a robustness number
    assert rows["krum"][2] == ".620 [alie] (agg 3.5/10, att 44%) undertrained"
    assert rows["global"][2] == "**.500 [alie] (agg 10/10, att 44%)**"
    marked = tidy[tidy["undertrained"]]
    assert list(zip(marked["method_label"], marked["deployment_label"], strict=True)) == [("krum", "fail0.6")]
    # Krum's clean cell there aggregated every round: a robustness number like any other
    assert {row[0]: row[1:] for row in texts(tables()[0]["deployment"].blocks[0])}["krum"][2] == \
        ".780 (agg 10/10, att 0%)"


def test_a_cell_that_is_the_same_trial_as_the_synchronous_one_shows_its_numbers():
    # Execute
    clean = tables()[0]["deployment"].blocks[0]
    # Assert: f = 0 without attackers: f_double's clean cells are the synchronous trials
    rows = {row[0]: row[1:] for row in texts(clean)}
    assert rows["global"][0] == "**.900 (agg 10/10, att 0%)**"
    assert rows["global"][-1] == "**.900 (= synchronous) (agg 10/10, att 0%)**"
    assert rows["krum"][-1] == ".800 (= synchronous) (agg 10/10, att 0%)"


def test_the_notes_say_what_each_deployment_is_and_what_a_cell_means():
    # Execute
    table = tables()[0]["deployment"]
    # Assert
    notes = "\n".join(table.footnotes)
    assert "fail0.3: synchronous, failure rate 0.3, attackers stay online." in notes
    assert ("straggle0.5_include: synchronous, 0.5 stragglers (local steps or epochs uniform in {1, ..., E - 1}, "
            "FedProx's draw), their partial work included, attackers never straggle.") in notes
    assert "async_k5: asynchronous buffered aggregation (FedBuff) of the first 5 arrivals." in notes
    assert "f_double: synchronous rounds, every drawn device reports; the server declares twice the f" in notes
    assert "undefined: the deployment makes the row's rule undefined there" in notes
    assert "(agg a/T, att s): the rule aggregated a of the T rounds" in notes
    assert "undertrained: the rule aggregated fewer than half its rounds" in notes
    assert "floor(f n / m)" in notes
    assert "(= d): the same trial as deployment d's" in notes and "worst@20% on digits: over Min-Max" not in notes
    assert "| method | synchronous | fail0.3 |" in render(table, "markdown") and render(table, "csv")


def test_a_control_deployment_says_that_attackers_fail_or_straggle_alike():
    # Prepare: the control columns of fail0.3 and straggle0.5_drop (attackers_fail, attackers_straggle)
    SYSTEMS.update({"fail0.3_all": ("synchronous", 0.3, 0.0, "drop", ""),
                    "straggle0.5_drop_all": ("synchronous", 0.0, 0.5, "drop", "")})
    controls = {"fail0.3_all": {"system.attackers_fail": "True"},
                "straggle0.5_drop_all": {"system.attackers_straggle": "True"}}
    try:
        runs = RUNS + [{**deployed_run("global", d, a, seed, 0.7), **extra} for d, extra in controls.items()
                       for a in ("clean", "alie", "min_max") for seed in (0, 1)]
        table = tables(runs)[0]["deployment"]
    finally:
        for label in controls:
            del SYSTEMS[label]
    # Assert
    notes = "\n".join(table.footnotes)
    assert "fail0.3_all: synchronous, failure rate 0.3, attackers fail alike (control)." in notes
    assert "their partial work dropped, attackers straggle alike (control)." in notes


def test_without_a_deployment_axis_there_is_no_deployment_table_and_the_csv_has_no_new_column():
    # Prepare
    runs = [r for r in RUNS if "deployment_label" not in r]
    # Execute
    found, _, _ = tables(runs, None)
    # Assert
    assert "deployment" not in found
    assert "deployment_label" not in found["full"].tidy.columns and "privacy_label" in found["full"].tidy.columns


def test_a_generic_table_shows_each_deployment_in_a_block_of_its_own():
    # Execute
    _, cells, _ = tables()
    full = build_table(cells, next(s for s in SPECS if s.name == "full"))
    # Assert
    assert [b.title for b in full.blocks][:2] == ["digits synchronous", "digits fail0.3"]


def test_the_facts_of_each_deployment_come_from_its_runs():
    # Execute
    facts = deployment_facts(tables()[2]).set_index("deployment_label")
    # Assert
    assert facts.loc["fail0.6", "failure_rate"] == 0.6 and facts.loc["f_double", "f_declared"] == "double"
    assert facts.loc["straggle0.5_include", "straggler_policy"] == "include"
    assert facts.loc["synchronous", "system_name"] == "synchronous" and facts.loc["async_k5", "f_declared"] == ""


def test_the_figure_places_the_failure_rates_and_the_stragglers_from_the_lab(tmp_path):
    # Prepare
    _, cells, prepared = tables()
    facts = deployment_facts(prepared)
    # Execute
    data = deployment_data(cells, facts, "digits")
    paths = write_deployment_figures(cells, facts, tmp_path)
    # Assert: asynchronous and declared-f deployments are the table's only
    assert set(data["deployment_label"]) == {"synchronous", "fail0.3", "fail0.6", "straggle0.5_drop",
                                             "straggle0.5_include"}
    krum = data[data["method_label"] == "krum"].set_index("deployment_label")
    assert krum.loc["fail0.6", "acc_pooled"] == 0.62 and krum.loc["straggle0.5_include", "acc_pooled"] == 0.65
    # the one point whose rule aggregated fewer than half its rounds carries the mark
    assert data.loc[data["undertrained"], ["method_label", "deployment_label"]].values.tolist() == [["krum", "fail0.6"]]
    assert [p.name for p in paths] == ["deployment_digits.png"] and paths[0].stat().st_size > 10_000


def test_the_figure_crosses_an_undertrained_point_and_draws_the_control_apart(tmp_path, monkeypatch):
    # Prepare: record what is plotted
    _, cells, prepared = tables()
    drawn = []
    real = deployment_figure.plt.Axes.plot

    def spy(ax, x, y, *args, **kwargs):
        drawn.append((kwargs.get("marker"), list(x), [round(v, 3) for v in y]))
        return real(ax, x, y, *args, **kwargs)
    monkeypatch.setattr(deployment_figure.plt.Axes, "plot", spy)
    facts = deployment_facts(prepared)
    facts.loc[facts["deployment_label"] == "fail0.3", "attackers_fail"] = True  # as if fail0.3 were the control
    # Execute
    deployment_figure.write_deployment_figures(cells, facts, tmp_path)
    # Assert: Krum's fail0.6 point crossed; fail0.3 on a line of squares of its own, fail0.6 on the circles'
    assert ("x", [0.6], [0.62]) in drawn
    assert ("s", [0.0, 0.3], [0.75, 0.7]) in drawn and ("o", [0.0, 0.6], [0.75, 0.62]) in drawn


def test_exclusions_are_read_from_the_shipped_suite_only_for_runs_with_the_axis():
    # Prepare: runs of the shipped deployment suite's smoke scale
    runs = pd.DataFrame([{"scale": "smoke", "deployment_label": "f_double"}])
    # Execute
    excluded = grid_exclusions("deployment", runs)
    # Assert: Krum's doubled f under ALIE at 40%, and the clean cells of f_double (the synchronous trials)
    assert set(zip(excluded["method_label"], excluded["attack_label"], excluded["same_as"], strict=True)) == {
        ("krum", "alie", ""), ("global", "clean", "synchronous"), ("krum", "clean", "synchronous")}
    assert grid_exclusions("deployment", pd.DataFrame([{"scale": "smoke"}])).empty
    assert grid_exclusions("no_such_suite", runs).empty


def test_rows_with_the_same_cells_in_every_column_are_named_and_the_report_shows_the_notes():
    # Prepare: a trimmed mean whose cells are FedAvg's everywhere (its f is 0) and Krum's in the worst case but one
    # and a median that agrees with them everywhere but fail0.6 (no note: it is another result)
    runs = RUNS + [{**r, "method_label": "trimmed_mean", "run_id": r["run_id"] + "-tm",
                    "cell_hash": r["cell_hash"] + "/tm"} for r in RUNS if r["method_label"] == "global"]
    runs += [{**r, "method_label": "median", "run_id": r["run_id"] + "-md", "cell_hash": r["cell_hash"] + "/md",
              "acc_pooled": r["acc_pooled"] - (0.05 if r.get("deployment_label") == "fail0.6" else 0.0)}
             for r in RUNS if r["method_label"] == "global"]
    # Execute
    table = tables(runs)[0]["deployment"]
    # Assert: named in both blocks, and on the report page (its sections render the tables' notes)
    notes = "\n".join(table.footnotes)
    assert "digits clean: global, trimmed_mean have the same cells in every column" in notes
    assert "digits worst@20%: global, trimmed_mean have the same cells" in notes
    assert "krum" not in notes and "median" not in notes
    page = "\n".join(html_fragment(table, anchor="deployment"))
    assert "global, trimmed_mean have the same cells" in page and "(agg a/T, att s)" in page
    assert "same cells" not in "\n".join(tables()[0]["deployment"].footnotes)


def test_a_setting_whose_rounds_aggregated_about_one_report_says_why_its_rows_agree():
    # Prepare: straggle0.5_drop's clean runs aggregated about one report a round (every rule returns it)
    runs = [{**r, "reports_mean": 1.2 if r.get("deployment_label") == "straggle0.5_drop" and r["attack_label"] ==
             "clean" else 4.0} for r in RUNS]
    # Execute
    notes = "\n".join(tables(runs)[0]["deployment"].footnotes)
    # Assert: that setting only
    assert "straggle0.5_drop, clean: the rules aggregated 1.2 to 1.2 reports a round on average" in notes
    assert notes.count("reports a round on average") == 1


def test_a_worst_case_that_met_about_one_honest_report_a_round_says_the_attack_was_void():
    # Prepare: straggle0.5_drop's attacked runs aggregated 3 reports a round, two thirds of them the attackers'
    # (one honest report: ALIE and Min-Max measure no spread); fail0.3's 4 reports at a 32% share (2.7 honest)
    runs = [{**r, "reports_mean": (1.5 if r["attack_label"] == "clean" else 3.0) if r.get("deployment_label") ==
             "straggle0.5_drop" else 4.0} for r in RUNS]
    runs = [{**r, "attacker_share": 2 / 3} if r.get("deployment_label") == "straggle0.5_drop" and r["attack_label"]
            != "clean" else r for r in runs]
    # Execute
    notes = "\n".join(tables(runs)[0]["deployment"].footnotes)
    # Assert: that worst case only (clean cells have no attack to void)
    assert "straggle0.5_drop, worst@20%: the rounds the rules aggregated held 1.0 to 1.0 honest reports on" in notes
    assert notes.count("honest reports on average") == 1


def test_a_control_column_that_is_its_plain_column_without_attackers_is_named_as_one_computation():
    # Prepare: fail0.3_all (attackers fail alike): without attackers its clean cells are fail0.3's own; under attack
    # they differ (the share stays as declared)
    SYSTEMS["fail0.3_all"] = ("synchronous", 0.3, 0.0, "drop", "")
    try:
        runs = RUNS + [{**deployed_run(r["method_label"], "fail0.3_all", r["attack_label"], int(r["seed"]),
                                       r["acc_pooled"] + (0.0 if r["attack_label"] == "clean" else 0.05)
                                       - (0.01 if int(r["seed"]) else -0.01)),
                        "system.attackers_fail": "True"}
                       for r in RUNS if r.get("deployment_label") == "fail0.3"]
        table = tables(runs)[0]["deployment"]
    finally:
        del SYSTEMS["fail0.3_all"]
    # Assert: the clean block names the pair and why; the worst case, where they differ, does not
    notes = "\n".join(table.footnotes)
    assert ("digits clean: fail0.3, fail0.3_all have the same cells in every row (without attackers, attackers "
            "failing or straggling alike changes nothing): one computation shown twice") in notes
    assert "digits worst@20%: fail0.3, fail0.3_all" not in notes


def test_a_buffer_of_every_device_in_flight_is_named_a_synchronous_round_and_its_equal_column_is_found():
    # Prepare: async_k5 with 5 devices a round in flight (concurrency: clients_per_round): its buffer takes them all;
    # its cells are the synchronous ones, whose runs record no share ("as drawn" there, "20%" here)
    runs = [{**r, "clients_per_round": "5"} for r in RUNS if r.get("deployment_label") != "async_k5"]
    runs += [{**deployed_run(r["method_label"], "async_k5", r["attack_label"], int(r["seed"]),
                             r["acc_pooled"] - (0.01 if int(r["seed"]) else -0.01)), "clients_per_round": "5"}
             for r in RUNS if "deployment_label" not in r]
    # Execute
    table = tables(runs)[0]["deployment"]
    # Assert
    notes = "\n".join(table.footnotes)
    assert ("async_k5: asynchronous buffered aggregation (FedBuff) of the first 5 arrivals of 5 devices in flight: "
            "the buffer takes every device in flight") in notes and "not asynchrony" in notes
    assert "digits worst@20%: synchronous, async_k5 have the same cells in every row" in notes
    assert "digits clean: synchronous, async_k5 have the same cells in every row" in notes
    # ten in flight: a buffer of five is FedBuff's
    ten = "\n".join(tables([{**r, "clients_per_round": "10"} for r in RUNS])[0]["deployment"].footnotes)
    assert "of the first 5 arrivals of 10 devices in flight." in ten and "not asynchrony" not in ten


def test_a_setting_whose_mean_round_gives_the_rule_f_zero_says_it_ran_as_its_f_zero_form():
    # Prepare: f = 10 x int(0.2 x 30) // 30 = 2; fail0.6's attacked rounds aggregated 4 reports (floor(2 x 4 / 10) =
    # 0), fail0.3's 7 (f 1); the clean cells have no attackers to miss
    def reported(r):
        n = {"fail0.6": 4.0, "fail0.3": 7.0}.get(r.get("deployment_label"), 10.0)
        return {**r, "reports_mean": n, "clients_per_round": "10", "dataset.num_clients": "30"}
    # Execute
    notes = "\n".join(tables([reported(r) for r in RUNS])[0]["deployment"].footnotes)
    # Assert
    assert ("fail0.6, worst@20%: the rules aggregated 4.0 to 4.0 reports a round on average, 1.8 to 1.8 of them the "
            "attackers'; f follows them to floor(2 n / 10) = 0 in the mean round: a rule that reads f ran as its "
            "f = 0 form there") in notes
    assert notes.count("= 0 in the mean round") == 1
    assert "Rounded down, it is 0 in a round of n < m / f reports" in notes
    # runs that do not say the devices: no f to compute, no note
    bare = "\n".join(tables([{**reported(r), "dataset.num_clients": None} for r in RUNS])[0]["deployment"].footnotes)
    assert "= 0 in the mean round" not in bare


def test_an_included_stragglers_control_says_it_moves_only_the_attackers_own_work():
    # Prepare
    SYSTEMS["straggle0.5_include_all"] = ("synchronous", 0.0, 0.5, "include", "")
    try:
        runs = RUNS + [{**deployed_run("global", "straggle0.5_include_all", a, seed, 0.7),
                        "system.attackers_straggle": "True"} for a in ("clean", "alie") for seed in (0, 1)]
        notes = "\n".join(tables(runs)[0]["deployment"].footnotes)
    finally:
        del SYSTEMS["straggle0.5_include_all"]
    # Assert
    assert ("straggle0.5_include_all: synchronous, 0.5 stragglers (local steps or epochs uniform in {1, ..., E - 1}, "
            "FedProx's draw), their partial work included, attackers straggle alike (control) - every drawn device "
            "reports, so the attackers' share is as drawn in both columns") in notes
    assert "straggle0.5_include: synchronous, 0.5 stragglers" in notes
    assert notes.count("as drawn in both columns") == 1


def test_the_figure_rings_a_void_attack_and_its_ticks_carry_the_attackers_share(tmp_path, monkeypatch):
    # Prepare: straggle0.5_drop's attacked rounds held one honest report (3 reports, two thirds the attackers')
    runs = [{**r, "reports_mean": 3.0, "attacker_share": 2 / 3} if r.get("deployment_label") == "straggle0.5_drop"
            and r["attack_label"] != "clean" else r for r in RUNS]
    _, cells, prepared = tables(runs)
    drawn, ticks = [], []
    real_plot, real_ticks = deployment_figure.plt.Axes.plot, deployment_figure.plt.Axes.set_xticks

    def plot(ax, x, y, *args, **kwargs):
        drawn.append((kwargs.get("marker"), kwargs.get("markerfacecolor"), list(x), [round(v, 3) for v in y]))
        return real_plot(ax, x, y, *args, **kwargs)

    def set_xticks(ax, values, labels=None, **kwargs):
        ticks.append(list(labels or []))
        return real_ticks(ax, values, labels, **kwargs)
    monkeypatch.setattr(deployment_figure.plt.Axes, "plot", plot)
    monkeypatch.setattr(deployment_figure.plt.Axes, "set_xticks", set_xticks)
    # Execute
    deployment_figure.write_deployment_figures(cells, deployment_facts(prepared), tmp_path)
    # Assert: global's and Krum's straggle0.5_drop points ringed, nothing else; shares under the ticks
    rings = [d for d in drawn if d[0] == "D"]
    assert rings == [("D", "none", [0.5], [0.58]), ("D", "none", [0.5], [0.72])]
    assert ["0 (lab)", "0.3\natt 32% / ?", "0.6\natt 44% / ?"] in ticks
    assert ["0 (lab)", "0.5\ndrop att 67% / ?\nincl att 20% / ?"] in ticks
