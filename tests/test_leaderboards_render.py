"""Leaderboard output formats: LaTeX escaping and structure (or a real compile), Markdown, HTML, CSV."""

import io
import re
import shutil
import subprocess

import pandas as pd
import pytest

from fedarena.errors import ConfigError
from fedarena.leaderboards.build import leaderboard_tables
from fedarena.leaderboards.render import latex_escape, render, to_latex
from fedarena.leaderboards.tables import Block, Cell, Table


def sample_table():
    """Two blocks: one with group headers, one without; names full of special characters."""
    grouped = Block(
        header=["method", "", "20%", "50%"],
        groups=[("clean", 1), ("A1", 2)],
        rows=[
            [Cell("k_norm"), Cell(".911 (.08)", bold=True), Cell("–"), Cell(".855±.012 (.10)")],
            [
                Cell("a&b #1 $x$ {y}"),
                Cell("mixed"),
                Cell(".700 (.10)", bold=True),
                Cell(".900 (.10)†", bold=True),
            ],
        ],
        title="fmnist_50%",
    )
    plain = Block(
        header=["method", "test acc. (%)", "client σ", "μσ"],
        rows=[[Cell("fedtilt"), Cell("98.53"), Cell("1.67"), Cell("4.33")]],
        title="mnist clean",
    )
    tidy = pd.DataFrame({"method_label": ["k_norm", "a&b"], "acc_pooled": [0.911, 0.7]})
    return Table("t1", "Table 1: 100% of ~runs", [grouped, plain], ["Bold: mean - std; x_y & z."], tidy)


def test_latex_escape_every_special_character():
    assert latex_escape("a_b%c&d#e$f{g}h") == r"a\_b\%c\&d\#e\$f\{g\}h"
    assert latex_escape("~^\\") == r"\textasciitilde{}\textasciicircum{}\textbackslash{}"
    assert latex_escape("σ ± –") == r"$\sigma$ $\pm$ --"


def cells_in(row: str) -> int:
    """Columns a tabular row spans: cells split on unescaped &, \\multicolumn{n} counting n."""
    cells = re.split(r"(?<!\\)&", row.removesuffix(r"\\"))
    return sum(int(m.group(1)) if (m := re.search(r"\\multicolumn\{(\d+)\}", c)) else 1 for c in cells)


def check_latex_structure(tex: str) -> None:
    stack = []
    for kind, name in re.findall(r"\\(begin|end)\{(\w+)\}", tex):
        if kind == "begin":
            stack.append(name)
        else:
            assert stack.pop() == name
    assert stack == []
    for spec, body in re.findall(r"\\begin\{longtable\}\{(\w+)\}(.*?)\\end\{longtable\}", tex, re.S):
        rows = [line for line in body.splitlines() if line.rstrip().endswith(r"\\")]
        assert rows and all(cells_in(r) == len(spec) for r in rows), (spec, rows)


def test_latex_is_escaped_booktabs_and_structurally_sound():
    tex = to_latex(sample_table())
    assert tex.startswith(r"\documentclass{article}") and tex.rstrip().endswith(r"\end{document}")
    assert r"\usepackage{booktabs}" in tex and r"\toprule" in tex and r"\bottomrule" in tex
    assert r"k\_norm & \textbf{.911 (.08)} & -- & .855$\pm$.012 (.10) \\" in tex
    assert r"a\&b \#1 \$x\$ \{y\}" in tex
    assert r"fmnist\_50\% & \multicolumn{1}{c}{clean} & \multicolumn{2}{c}{A1} \\" in tex
    assert r"\cmidrule(lr){2-2} \cmidrule(lr){3-4}" in tex
    assert r"\section*{Table 1: 100\% of \textasciitilde{}runs}" in tex
    assert r"\item Bold: mean - std; x\_y \& z." in tex
    check_latex_structure(tex)


def test_structure_check_catches_a_wrong_column_count():
    tex = to_latex(sample_table()).replace(r"k\_norm & ", "k", 1)
    with pytest.raises(AssertionError):
        check_latex_structure(tex)


PDFLATEX = pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex is not installed")


def compile_latex(folder, tex: str, name: str = "t") -> str:
    """Run pdflatex on ``tex`` in ``folder``; returns its log after asserting a PDF came out, every glyph set."""
    (folder / f"{name}.tex").write_text(tex, encoding="utf-8")
    cmd = ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape", f"{name}.tex"]
    done = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:]
    assert (folder / f"{name}.pdf").stat().st_size > 1000
    log = (folder / f"{name}.log").read_text(errors="replace")
    assert "Missing character" not in log
    return log


@PDFLATEX
@pytest.mark.integration  # pdflatex as a process
@pytest.mark.parametrize("booktabs", [True, False], ids=["booktabs-if-installed", "plain-rules"])
def test_latex_compiles_standalone_with_or_without_booktabs(tmp_path, booktabs):
    # Prepare: the plain-rules branch is what a minimal TeX install (no booktabs.sty) takes
    tex = to_latex(sample_table())
    if not booktabs:
        tex = tex.replace(r"\IfFileExists{booktabs.sty}", r"\IfFileExists{no-such-package.sty}", 1)
    # Execute / Assert
    log = compile_latex(tmp_path, tex)
    assert booktabs or "booktabs.sty" not in log


def test_markdown_merges_group_headers_and_marks_bold():
    md = render(sample_table(), "markdown")
    assert "| method | clean | A1 20% | A1 50% |" in md
    assert "| k_norm | **.911 (.08)** | – | .855±.012 (.10) |" in md
    assert "**fmnist_50%**" in md
    assert "| method | test acc. (%) | client σ | μσ |" in md
    assert md.rstrip().endswith("- Bold: mean - std; x_y & z.")


def test_html_escapes_and_spans_groups():
    page = render(sample_table(), "html")
    assert '<th colspan="2">A1</th>' in page
    assert "<td>a&amp;b #1 $x$ {y}</td>" in page
    assert "<td><b>.911 (.08)</b></td>" in page
    assert page.count("<table>") == 2 and page.count("</table>") == 2


def test_csv_holds_the_tidy_numbers():
    back = pd.read_csv(io.StringIO(render(sample_table(), "csv")))
    assert back.to_dict("list") == {"method_label": ["k_norm", "a&b"], "acc_pooled": [0.911, 0.7]}


def test_unknown_format_is_a_config_error():
    with pytest.raises(
        ConfigError, match="unknown leaderboard format 'pdf'; allowed: latex, markdown, html, csv"
    ):
        render(sample_table(), "pdf")


def built_tables() -> list[Table]:
    """Every table kind, from a hand-made frame of runs."""
    runs = pd.DataFrame(
        [
            dict(run_id=f"r{i}", status="FINISHED", dataset_label=ds, method_label=m, attack_label=a, level=lv,
                 seed="0", cell_hash=f"h{i}", dataset_fingerprint="fp", git_sha="sha", acc_pooled=acc, acc_std=0.1,
                 class_std_mean=0.05, class_std_std=0.02)
            for i, (ds, m, a, lv, acc) in enumerate([
                ("fmnist", "global", "clean", "0.0", 0.9), ("fmnist", "k_norm", "a1", "0.5", 0.8),
                ("femnist", "ewc", "a1", "0.5", 0.7), ("mnist", "fedtilt", "persistent_random_corruption", "0.3", 0.98),
            ])
        ]
    )  # fmt: skip
    return leaderboard_tables(runs, ci=True)[0]


def test_every_built_table_renders_sound_latex():
    tables = built_tables()
    names = [t.name for t in tables]
    assert names == ["ditto_table1", "ditto_table2", "full", "fedtilt_table3", "reproduction"]
    for table in tables:
        check_latex_structure(to_latex(table))


@PDFLATEX
@pytest.mark.integration  # pdflatex as a process
def test_every_built_table_compiles(tmp_path):
    # Prepare
    tables = built_tables()
    # Execute / Assert
    for table in tables:
        compile_latex(tmp_path, to_latex(table), table.name)
