"""Per paper table, the published cells the suites' paper scales produce (``fedarena bench list``, issue 17)."""

from pathlib import Path

import pytest
import yaml

from fedarena.bench.coverage import coverage, gaps, shipped_suites
from fedarena.cli import main
from fedarena.config import SCALES
from fedarena.errors import ConfigError
from fedarena.leaderboards.paper import load_paper_tables
from fedarena.suites.parse import load_suite

TINY = {"rounds": 2, "eval_every": 1, "clients_per_round": 2, "local_steps": 1}
CSV_HEADER = "paper,table,dataset,method,attack,level,acc_mean,acc_std\n"


def test_reproduces_lists_shipped_tables_per_paper(tmp_path):
    suite = load_suite(write(tmp_path, "both", {"ditto": [7, 1, 7], "fedtilt": [2]}), check_names=False)
    assert suite.reproduces == {"ditto": (1, 7), "fedtilt": (2,)}  # sorted, once each
    assert load_suite(write(tmp_path, "plain", None), check_names=False).reproduces == {}


@pytest.mark.parametrize("reproduces, message", [
    ({"ditto": [4]}, r"reproduces\.ditto: no published ditto table \[4\]; its tables: 1, 2, 3, 5, 6, 7"),
    ({"ditto": ["Table 1"]}, r"no published ditto table \['Table 1'\]"),
    ({"fedavg": [1]}, r"reproduces.*fedavg.*allowed: ditto, fedtilt"),
])
def test_reproduces_names_only_published_tables(tmp_path, reproduces, message):
    with pytest.raises(ConfigError, match=message):
        load_suite(write(tmp_path, "bad", reproduces), check_names=False)


def write(tmp_path: Path, name: str, reproduces: dict | None) -> Path:
    """A suite whose paper scale runs global and krum on fmnist (clean, A1 20%) and global on digits."""
    scale = {"fixed": TINY, "seeds": [0], "datasets": [
        {"label": "fmnist", "dataset": {"name": "fmnist"}}, {"label": "digits", "dataset": {"name": "digits"}}]}
    data = {"name": name, "reference": "prose for people", **({"reproduces": reproduces} if reproduces else {}),
            "methods": [{"label": "global", "method": {"name": "global"}},
                        {"label": "krum", "aggregator": {"name": "krum"}}],
            "attacks": [{"label": "clean", "attack": {"name": "none"}, "levels": [0.0]},
                        {"label": "a1", "attack": {"name": "a1"}, "levels": [0.2]}],
            "exclude": [{"method": "krum", "dataset": "digits"}],
            "scales": {s: scale for s in SCALES}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_cell_counts_where_a_suite_referencing_its_table_runs_it_on_the_paper_dataset(tmp_path):
    # Prepare: Table 9 has 4 cells (global clean, global A1 20%, krum A1 80%, median A1 20%); Table 1 prints
    # global clean as well; digits runs never count
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "ditto_table9.csv").write_text(CSV_HEADER + "".join(
        f"ditto,9,fmnist,{m},{a},{lv},0.9,0.1\n" for m, a, lv in
        [("global", "clean", 0), ("global", "a1", 0.2), ("krum", "a1", 0.8), ("median", "a1", 0.2)]))
    (tmp_path / "tables" / "ditto_table1.csv").write_text(CSV_HEADER + "ditto,1,fmnist,global,clean,0,0.9,0.1\n")
    paper = load_paper_tables(tmp_path / "tables")
    nine, one = (load_suite(write(tmp_path, n, r), check_names=False)
                 for n, r in (("nine", {"ditto": [9]}), ("one", {"ditto": [1]})))
    # Execute
    table = coverage([nine, one], paper)
    missing = gaps([one], paper)
    # Assert: Table 9: global clean, global A1 20% (krum A1 80% and median not run); Table 1 by suite "one"
    assert table.values.tolist() == [["ditto", 1, 1, 1, "one"], ["ditto", 9, 4, 2, "nine"]]
    assert sorted(missing["method_label"]) == ["global", "global", "krum", "median"]  # one names Table 1 only


def test_every_published_cell_is_produced_by_a_suite_that_reproduces_its_table():
    # Execute
    suites = shipped_suites()
    table = coverage(suites)
    # Assert: 1,171 published cells (Ditto Tables 1-3, 5-12; FedTilt II, III, V, VI, VII), every one produced
    assert table["cells"].sum() == 1171 and (table["produced"] == table["cells"]).all()
    assert gaps(suites).empty
    by_table = {(r.paper, r.table): r.suites for r in table.itertuples()}
    assert by_table[("ditto", 5)] == "ditto_lambda" and by_table[("ditto", 10)] == "robustness"
    assert by_table[("ditto", 6)] == "ditto_robust" and by_table[("fedtilt", 5)] == "fedtilt"


def test_bench_list_prints_the_cells_per_table(capsys):
    # Execute
    code = main(["bench", "list", "--no-check"])
    # Assert
    out = capsys.readouterr().out
    assert code == 0
    assert next(line for line in out.splitlines() if line.startswith("ditto 7 ")).split()[2:4] == ["140", "140"]
    assert next(line for line in out.splitlines() if line.startswith("all ")).split()[1:] == ["1171", "1171"]
