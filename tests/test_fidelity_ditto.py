"""Ditto's lambdas and the appendix rows in the paper-scale suites (issue 17 items 6 and 8): StackOverflow's
dynamic-lambda candidates, each table's fixed lambdas, finetuning, MOCHA, FEMNIST-skewed, and the best
fixed lambda of Tables 5 and 6."""

from collections import defaultdict

from fedarena.methods.base import build_method
from fedarena.suites.grid import expand
from fedarena.suites.parse import load_suite

SO_CANDIDATES = {"normal": (0.05, 0.1, 0.3), "strong": (0.01, 0.05, 0.1)}  # Appendix D.2
DEFAULT_CANDIDATES = {"normal": (0.1, 1.0, 2.0), "strong": (0.05, 0.1, 0.2)}


def rows_by_dataset(trials) -> dict[str, set[str]]:
    rows = defaultdict(set)
    for t in trials:
        rows[t.dataset_label].add(t.method_label)
    return rows


def test_stackoverflow_dynamic_lambda_picks_from_appendix_d2_sets_in_every_suite():
    # Prepare / Execute
    trials = [t for name in ("robustness", "fairness", "ditto_lambda") for t in expand(load_suite(name), "paper")
              if t.config.method["name"] == "ditto" and t.config.method["dynamic_lam"]]
    built = {(t.suite, t.dataset_label): build_method(t.config.method).candidates for t in trials}
    # Assert
    assert {k: v for k, v in built.items() if k[1] == "stackoverflow"} == {
        ("robustness", "stackoverflow"): SO_CANDIDATES, ("fairness", "stackoverflow"): SO_CANDIDATES,
        ("ditto_lambda", "stackoverflow"): SO_CANDIDATES}
    assert all(v == DEFAULT_CANDIDATES for k, v in built.items() if k[1] != "stackoverflow")


def test_robustness_paper_scale_has_the_rows_of_tables_7_to_12():
    # Execute
    rows = rows_by_dataset(expand(load_suite("robustness"), "paper"))
    # Assert: each table's fixed lambdas, finetuning on the neural networks, MOCHA on Vehicle
    appendix = {d: sorted(r for r in rows[d] if r.startswith(("ditto_lam", "finetuning", "mocha"))) for d in rows}
    assert appendix == {
        "fmnist": ["ditto_lam0.1", "ditto_lam1", "ditto_lam2", "finetuning"],
        "femnist": ["ditto_lam0.01", "ditto_lam0.1", "ditto_lam1", "finetuning"],
        "femnist_skewed": ["ditto_lam0.01", "ditto_lam0.1", "ditto_lam1", "finetuning"],
        "celeba": ["ditto_lam0.1", "ditto_lam1", "ditto_lam2", "finetuning"],
        "vehicle": ["ditto_lam0.1", "ditto_lam1", "ditto_lam2", "mocha"],
        "stackoverflow": ["ditto_lam0.05", "ditto_lam0.1", "ditto_lam0.3"],
    }


def test_femnist_skewed_runs_table_10_settings_and_quick_keeps_its_rows():
    # Prepare
    suite = load_suite("robustness")
    # Execute
    skewed = {(t.attack_label, t.level) for t in expand(suite, "paper", dataset="femnist_skewed")}
    quick = {t.method_label for t in expand(suite, "quick")}
    # Assert
    assert {("a3", 0.1), ("a3", 0.15), ("a3", 0.2), ("a1", 0.8), ("clean", 0.0)} <= skewed
    assert ("a3", 0.5) not in skewed
    assert not {m for m in quick if m.startswith(("ditto_lam", "finetuning", "mocha"))}


def test_best_lambda_rows_run_each_datasets_fixed_lambdas():
    # Prepare / Execute
    table5 = expand(load_suite("ditto_lambda"), "paper")
    table6 = expand(load_suite("ditto_robust"), "paper")
    best5 = {(t.dataset_label, t.config.method["lam"]) for t in table5 if t.select_group == "ditto_best_lam"}
    best6 = {(t.dataset_label, t.config.method["lam"], t.config.method["dynamic_lam"])
             for t in table6 if t.select_group == "ditto"}
    # Assert: Tables 7-12's lambdas per dataset; Table 6's Ditto is fixed lambda, its Ditto + defenses dynamic
    lams = {"fmnist": (0.1, 1.0, 2.0), "femnist": (0.01, 0.1, 1.0), "celeba": (0.1, 1.0, 2.0),
            "vehicle": (0.1, 1.0, 2.0), "stackoverflow": (0.05, 0.1, 0.3)}
    assert best5 == {(d, lam) for d, values in lams.items() for lam in values}
    assert best6 == {(d, lam, False) for d in ("femnist", "celeba") for lam in lams[d]}
    defended = [t for t in table6 if t.method_label in ("ditto_clipping", "ditto_multi_krum")]
    assert defended and all(t.config.method["dynamic_lam"] for t in defended)
    assert {t.select_by for t in table5 + table6 if t.select_group.startswith("ditto")} == {"val_acc_pooled"}
