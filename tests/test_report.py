"""`fedarena report SUITE`: one self-contained HTML page from a real MLflow store; provenance and the
fairness view as pure functions; one-line errors for an empty store, no finished runs, an unwritable folder."""

import os
import re

import pandas as pd
import pytest
import store_for_views
from store_for_views import BASE, FINGERPRINT, NAME, SUITE, fill_store

from fedarena.cli import main
from fedarena.leaderboards.build import leaderboard_tables
from fedarena.leaderboards.figures import shown_methods
from fedarena.report.compose import ReportError, build_report, writable_folder
from fedarena.report.devices import device_accuracy_data
from fedarena.report.provenance import code_versions, dataset_provenance
from fedarena.tracking.reading import read_runs


def test_code_versions_and_dataset_provenance_count_runs():
    # Prepare
    runs = pd.DataFrame({"git_sha": ["a1", "a1", "b2"], "torch_version": ["2.1"] * 3,
                         "dataset_label": ["digits"] * 3, "dataset_name": ["digits"] * 3,
                         "dataset_fingerprint": ["f0", "f0", "f1"], "scale": ["quick"] * 3, "seed": ["0", "0", "1"]})
    # Execute
    code = code_versions(runs)
    data = dataset_provenance(runs)
    # Assert
    assert code.values.tolist() == [["git_sha", "a1", 2], ["git_sha", "b2", 1], ["torch_version", "2.1", 3]]
    assert data.values.tolist() == [["digits", "digits", "f0", "quick", "0", 2], ["digits", "digits", "f1", "quick",
                                                                                 "1", 1]]


def test_device_accuracies_are_the_benign_clients_of_the_main_methods():
    # Prepare: three rows; client 1 of r1 is malicious
    runs = pd.DataFrame({"run_id": ["r1", "r2", "r3"], "method_label": ["krum", "ditto", "local"],
                         "dataset_label": ["d", "d", "d"], "attack_label": ["a1"] * 3, "level": [0.5] * 3})
    clients = pd.DataFrame({"run_id": ["r1", "r1", "r2", "r3"], "client": [0, 1, 0, 0],
                            "malicious": [False, True, False, False], "accuracy": [0.8, 0.1, 0.9, 0.5]})
    # Execute
    data = device_accuracy_data(runs, clients, "d")
    # Assert
    assert shown_methods(["local", "ditto", "krum"]) == ["local", "krum", "ditto"]  # table order
    assert data.values.tolist() == [["krum", "a1", 0.5, 0.8], ["ditto", "a1", 0.5, 0.9], ["local", "a1", 0.5, 0.5]]


@pytest.mark.slow  # real MLflow stores
def test_report_has_every_table_the_figures_and_the_provenance(report):
    # Prepare
    page, uri, path = report
    tables, _, _ = leaderboard_tables(read_runs(uri, NAME))
    # Execute
    images = re.findall(r'<img alt="([^"]+)" src="([^"]+)"', page)
    # Assert
    assert path.name == f"{NAME}.html"
    assert all(f"<h2 id=\"{t.name}\">" in page for t in tables)
    assert [alt for alt, _ in images] == ["figure3_syn", "figure5_syn", "curves_syn", "devices_syn"]
    assert all(src.startswith("data:image/png;base64,iVBOR") for _, src in images)
    assert "No paper dataset was run" in page
    assert "<td>git_sha</td><td>abc1234</td><td>12</td>" in page
    assert f"<td>syn</td><td>synthetic</td><td>{FINGERPRINT}</td><td>smoke</td><td>0, 1</td><td>12</td>" in page


@pytest.mark.slow  # real MLflow stores
def test_report_is_self_contained(report):
    # Prepare
    page, _, _ = report
    # Execute
    references = re.findall(r'(?:src|href)="([^"]*)"', page)
    # Assert: only inlined images and links inside the page; no script
    assert references and all(r.startswith(("data:image/png;base64,", "#")) for r in references)
    assert "<script" not in page


@pytest.mark.slow  # real MLflow stores
def test_report_shows_the_reproduction_view_where_a_paper_dataset_ran(tmp_path):
    # Prepare: the same runs, recorded as runs on fmnist (a paper's dataset)
    uri = fill_store(tmp_path, ran="fmnist")
    # Execute
    page = build_report(NAME, uri, tmp_path / "out").read_text(encoding="utf-8")
    # Assert
    assert '<h2 id="reproduction">Reproduction: our numbers beside the papers' in page
    assert "No paper dataset was run" not in page


@pytest.mark.slow  # real MLflow stores
def test_report_has_no_worst_case_where_one_attack_ran_per_level(report):
    # Prepare
    page, _, _ = report
    # Execute / Assert: the store has A1 alone at 50%
    assert '<section id="worst-case">' in page and "worst@" not in page
    assert "No dataset ran two or more attacks at one level: no worst case over attacks." in page


@pytest.mark.slow  # real MLflow stores
def test_report_shows_each_rows_worst_attack(tmp_path, monkeypatch):
    # Prepare: A2 at 50% too; A1 costs every method .2, A2 costs median .3 and the others .1. Seeds 0, 1 add
    # .01 * seed: worst global = A1 .505, median = A2 .305, ditto = A1 .605 (± t(.975, 1) * .00707 / sqrt 2)
    drop = {("a1", m): 0.2 for m in BASE} | {("a2", m): 0.1 for m in BASE} | {("a2", "median"): 0.3}
    monkeypatch.setitem(SUITE, "attacks", [*SUITE["attacks"], {"label": "a2", "attack": {"name": "a2"},
                                                               "levels": [0.5]}])
    monkeypatch.setattr(store_for_views, "final_accuracy", lambda spec: BASE[spec.method_label] - drop.get(
        (spec.attack_label, spec.method_label), 0.0) + 0.01 * spec.seed)
    uri = fill_store(tmp_path)
    # Execute
    page = build_report(NAME, uri, tmp_path / "out").read_text(encoding="utf-8")
    section = page.split('<section id="worst-case">', 1)[1].split("</section>", 1)[0]
    # Assert: its own section with the worst_case table; the column also in the leaderboards
    assert '<h2 id="worst_case">Worst case:' in section and '<th colspan="1">worst@50%</th>' in section
    assert "<tr><td>global</td><td>.505±.064 (.10) [A1]</td></tr>" in section
    assert "<tr><td>median§</td><td>.305±.064 (.10) [A2]</td></tr>" in section  # §: needs each update
    assert "<tr><td>ditto</td><td><b>.605±.064 (.10) [A1]</b></td></tr>" in section
    assert "<li>worst@50% on syn: over A1, A2.</li>" in section
    leaderboards = page.split('<section id="leaderboards">', 1)[1].split("</section>", 1)[0]
    assert '<h2 id="worst_case">' not in leaderboards
    assert "<td>.305±.064 (.10) [A2]</td></tr>" in leaderboards


def test_an_unwritable_report_folder_is_refused_before_reading(tmp_path):
    # Prepare
    blocker = tmp_path / "file"
    blocker.write_text("x")
    # Execute / Assert
    with pytest.raises(ReportError, match=r"report folder .*/file is a file; give a folder with --out"):
        writable_folder(blocker)
    with pytest.raises(ReportError, match=r"cannot write the report into .*/file/sub: Not a directory; give a "
                                          r"writable folder with --out"):
        build_report(NAME, f"sqlite:///{tmp_path}/none.db", blocker / "sub")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_report_folder_is_refused(tmp_path):
    # Prepare
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o500)
    # Execute / Assert
    with pytest.raises(ReportError, match=r"cannot write the report into .*/ro: Permission denied"):
        writable_folder(folder)


def run_cli(argv, capsys) -> tuple[int, list[str]]:
    capsys.readouterr()  # what the preparation printed
    code = main(argv)
    captured = capsys.readouterr()
    return code, [line for line in (captured.out + captured.err).splitlines() if line.strip()]


@pytest.mark.slow  # real MLflow stores
def test_cli_writes_the_page_and_prints_its_path(report, tmp_path, capsys):
    # Prepare
    _, uri, _ = report
    # Execute
    code, lines = run_cli(["report", NAME, "--tracking-uri", uri, "--out", str(tmp_path / "r")], capsys)
    # Assert
    assert (code, lines) == (0, [str(tmp_path / "r" / f"{NAME}.html")])


@pytest.mark.slow  # real MLflow stores
@pytest.mark.parametrize("case", ["empty store", "no finished runs", "unwritable folder"])
def test_cli_errors_are_one_line(case, tmp_path, capsys):
    # Prepare
    uri = fill_store(tmp_path, status="FAILED") if case == "no finished runs" else f"sqlite:///{tmp_path}/e.db"
    if case == "empty store":
        from mlflow.tracking import MlflowClient

        MlflowClient(tracking_uri=uri).search_experiments()  # a real store without any experiment of ours
    out = tmp_path / ("file" if case == "unwritable folder" else "out")
    if case == "unwritable folder":
        out.write_text("x")
    expected = {
        "empty store": f"no experiment named '{NAME}' in the tracking store {uri}; experiments there: Default (empty)",
        "no finished runs": f"suite '{NAME}' in {uri}: no finished runs to tabulate (12 failed or interrupted run(s) "
                            "are left out.); fill it with `make benchmark SUITE=viewgrid`",
        "unwritable folder": f"report folder {out} is a file; give a folder with --out",
    }[case]
    # Execute
    code, lines = run_cli(["report", NAME, "--tracking-uri", uri, "--out", str(out)], capsys)
    # Assert
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("fedarena: error: " + expected), lines[0]
