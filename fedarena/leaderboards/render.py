"""Render a :class:`~fedarena.leaderboards.tables.Table` as LaTeX, Markdown, HTML or CSV.

LaTeX: a standalone-compilable ``article`` (booktabs rules, plain rules where booktabs is not installed;
``longtable`` so long tables break across pages); every special character of names and values is escaped.
Markdown and HTML show the same blocks. CSV holds the tidy numbers behind the table (one row per cell), not
the formatted text.
"""

from __future__ import annotations

import html

from fedarena.errors import ConfigError
from fedarena.leaderboards.tables import Block, Cell, Table

FORMATS = {"latex": "tex", "markdown": "md", "html": "html", "csv": "csv"}

LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "_": r"\_",
    "%": r"\%",
    "&": r"\&",
    "#": r"\#",
    "$": r"\$",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "|": r"\textbar{}",
    "σ": r"$\sigma$",
    "μ": r"$\mu$",
    "±": r"$\pm$",
    "†": r"$^\dagger$",
    "‡": r"$^\ddagger$",
    "–": "--",
}

LATEX_PREAMBLE = r"""\documentclass{article}
\usepackage[T1]{fontenc}
\usepackage[utf8]{inputenc}
\usepackage[landscape,margin=1.5cm]{geometry}
\usepackage{longtable}
\IfFileExists{booktabs.sty}{\usepackage{booktabs}}{% a minimal TeX install: plain rules instead
  \newcommand{\toprule}{\hline}\newcommand{\midrule}{\hline}\newcommand{\bottomrule}{\hline}
  \def\cmidrule(##1)##2{\cline{##2}}}
\begin{document}
"""


def latex_escape(text: object) -> str:
    """``text`` with every LaTeX special character (and the Greek letters used) made literal."""
    return "".join(LATEX_SPECIAL.get(ch, ch) for ch in str(text))


def render(table: Table, fmt: str) -> str:
    """The whole table in ``fmt`` (one of FORMATS)."""
    if fmt not in FORMATS:
        raise ConfigError(f"unknown leaderboard format {fmt!r}; allowed: {', '.join(FORMATS)}")
    writers = {"latex": to_latex, "markdown": to_markdown, "html": to_html, "csv": to_csv}
    return writers[fmt](table)


def to_csv(table: Table) -> str:
    return table.tidy.to_csv(index=False)


def _latex_cell(cell: Cell) -> str:
    text = latex_escape(cell.text)
    return rf"\textbf{{{text}}}" if cell.bold else text


def _latex_block(block: Block) -> list[str]:
    ncols = len(block.header)
    lines = [rf"\begin{{longtable}}{{{'l' * block.stub}{'c' * (ncols - block.stub)}}}", r"\toprule"]
    if block.groups:
        cells = [latex_escape(block.title)] + [""] * (block.stub - 1)
        cells += [rf"\multicolumn{{{n}}}{{c}}{{{latex_escape(g)}}}" for g, n in block.groups]
        lines.append(" & ".join(cells) + r" \\")
        rules, start = [], block.stub + 1
        for group, span in block.groups:
            if group:
                rules.append(rf"\cmidrule(lr){{{start}-{start + span - 1}}}")
            start += span
        lines += [" ".join(rules)] if rules else []
    elif block.title:
        lines.append(rf"\multicolumn{{{ncols}}}{{l}}{{{latex_escape(block.title)}}} \\")
        lines.append(r"\midrule")
    lines += [" & ".join(latex_escape(h) for h in block.header) + r" \\", r"\midrule"]
    lines += [" & ".join(_latex_cell(c) for c in row) + r" \\" for row in block.rows]
    lines += [r"\bottomrule", r"\end{longtable}"]
    return lines


def to_latex(table: Table, standalone: bool = True) -> str:
    """booktabs tables, one ``longtable`` per block; a full document when ``standalone``."""
    lines = [rf"\section*{{{latex_escape(table.title)}}}"]
    for block in table.blocks:
        lines += _latex_block(block)
    if table.footnotes:
        lines.append(r"\begin{itemize}")
        lines += [rf"\item {latex_escape(note)}" for note in table.footnotes]
        lines.append(r"\end{itemize}")
    body = "\n".join(lines) + "\n"
    return LATEX_PREAMBLE + body + "\\end{document}\n" if standalone else body


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def _md_header(block: Block) -> list[str]:
    """Markdown has one header row: a group label is prefixed to its columns' labels."""
    groups = [""] * block.stub
    for group, span in block.groups:
        groups += [group] * span
    if not block.groups:
        groups = [""] * len(block.header)
    return [f"{g} {h}".strip() for g, h in zip(groups, block.header, strict=True)]


def to_markdown(table: Table) -> str:
    lines = [f"## {table.title}", ""]
    for block in table.blocks:
        if block.title:
            lines += [f"**{_md(block.title)}**", ""]
        header = _md_header(block)
        lines.append("| " + " | ".join(_md(h) for h in header) + " |")
        lines.append("|" + "|".join([":---"] * block.stub + [":---:"] * (len(header) - block.stub)) + "|")
        for row in block.rows:
            cells = [f"**{_md(c.text)}**" if c.bold else _md(c.text) for c in row]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    lines += [f"- {_md(note)}" for note in table.footnotes]
    return "\n".join(lines) + "\n"


def _html_block(block: Block) -> list[str]:
    esc = html.escape
    lines = ["<table>", "<thead>"]
    if block.groups:
        cells = [f'<th colspan="{block.stub}">{esc(block.title)}</th>']
        cells += [f'<th colspan="{n}">{esc(g)}</th>' for g, n in block.groups]
        lines.append("<tr>" + "".join(cells) + "</tr>")
    elif block.title:
        lines.append(f'<tr><th colspan="{len(block.header)}">{esc(block.title)}</th></tr>')
    lines.append("<tr>" + "".join(f"<th>{esc(h)}</th>" for h in block.header) + "</tr>")
    lines += ["</thead>", "<tbody>"]
    for row in block.rows:
        cells = [f"<td><b>{esc(c.text)}</b></td>" if c.bold else f"<td>{esc(c.text)}</td>" for c in row]
        lines.append("<tr>" + "".join(cells) + "</tr>")
    lines += ["</tbody>", "</table>"]
    return lines


def html_fragment(table: Table, anchor: str = "") -> list[str]:
    """The table's title, blocks and footnotes as HTML lines (a page section; ``anchor``: the title's id)."""
    ident = f' id="{html.escape(anchor)}"' if anchor else ""
    lines = [f"<h2{ident}>{html.escape(table.title)}</h2>"]
    for block in table.blocks:
        lines += _html_block(block)
    if table.footnotes:
        lines += ["<ul>"] + [f"<li>{html.escape(n)}</li>" for n in table.footnotes] + ["</ul>"]
    return lines


def to_html(table: Table) -> str:
    style = "table{border-collapse:collapse;margin:1em 0}th,td{padding:2px 8px;text-align:center}"
    lines = [
        "<!DOCTYPE html>",
        '<html><head><meta charset="utf-8">',
        f"<title>{html.escape(table.title)}</title>",
    ]
    lines += [f"<style>{style}</style></head><body>", *html_fragment(table), "</body></html>"]
    return "\n".join(lines) + "\n"
