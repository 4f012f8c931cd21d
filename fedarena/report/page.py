"""The report as one self-contained HTML page: no script, no external resource, every figure an inlined PNG
(``data:image/png;base64,...``), so the file can be mailed or archived alone and opened offline."""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass
from pathlib import Path

from fedarena.leaderboards.render import html_fragment
from fedarena.leaderboards.tables import Table

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1500px;padding:0 2em;
color:#1b1f24;line-height:1.4}
h1{margin-top:1em}h2{margin-top:1.6em;border-bottom:1px solid #d0d7de;padding-bottom:.2em}
table{border-collapse:collapse;margin:.8em 0;font-size:14px}th,td{padding:3px 9px;text-align:center;
border-bottom:1px solid #eaeef2}thead th{background:#f6f8fa}td:first-child,th:first-child{text-align:left}
ul{font-size:13px;color:#57606a}nav ol{columns:2}figure{margin:1.2em 0}img{max-width:100%;height:auto;
border:1px solid #eaeef2}figcaption{font-size:13px;color:#57606a}.meta td{text-align:left}
""".strip()

CAPTIONS = {
    "figure3": "Robustness (Ditto Figure 3): benign test accuracy per attack and fraction of adversaries; error "
               "bars: 95% confidence interval over seeds.",
    "figure5": "Accuracy vs fairness under data poisoning (Ditto Figure 5): x = benign test accuracy, y = std of "
               "the accuracies across benign devices; lower right is better.",
    "curves": "Learning curves: benign test accuracy per evaluation round, mean over seeds.",
    "devices": "Fairness: test accuracy of every benign device (all seeds pooled) per method; box = quartiles, "
               "whiskers = 1.5 IQR, circles = devices beyond them.",
    "tuning": "Tuning (fedarena tune): per row, the best worst-case benign validation accuracy among the "
              "configurations drawn so far; every row had the same budget.",
    "privacy": "Privacy vs accuracy: benign test accuracy (solid) and the worst 10% of devices' (dashed) against the "
               "epsilon spent, at the delta its axis names (log scale; ∞: clipped without noise; no DP); dotted: a "
               "method that shares nothing.",
    "deployment": "Deployment under attack: each method's worst benign test accuracy over the attacks against the "
                  "failure rate and against the share of stragglers (their partial work dropped: solid; included: "
                  "dashed), from the synchronous lab at 0.",
}


@dataclass
class Section:
    anchor: str
    title: str
    lines: list[str]


def image_tag(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def figure_lines(paths: list[Path]) -> list[str]:
    """Each PNG inlined with its caption (the kind is the file name's prefix: figure3_digits.png)."""
    lines = []
    for path in paths:
        kind = path.stem.split("_", 1)[0]
        caption = html.escape(CAPTIONS.get(kind, path.stem))
        lines += ["<figure>", image_tag(path, path.stem), f"<figcaption>{caption}</figcaption>", "</figure>"]
    return lines


def table_lines(tables: list[Table]) -> list[str]:
    return [line for table in tables for line in html_fragment(table, anchor=table.name)]


def meta_lines(rows: list[tuple[str, str]]) -> list[str]:
    cells = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    return [f'<table class="meta">{cells}</table>']


def render_page(title: str, meta: list[tuple[str, str]], sections: list[Section]) -> str:
    """The whole document: title, the facts of the report, a table of contents, then the sections."""
    contents = "".join(f'<li><a href="#{s.anchor}">{html.escape(s.title)}</a></li>' for s in sections)
    lines = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>{html.escape(title)}</title>", f"<style>{STYLE}</style></head><body>",
             f"<h1>{html.escape(title)}</h1>", *meta_lines(meta), f"<nav><ol>{contents}</ol></nav>"]
    for section in sections:
        lines += [f'<section id="{section.anchor}">', f"<h1>{html.escape(section.title)}</h1>", *section.lines,
                  "</section>"]
    lines.append("</body></html>")
    return "\n".join(lines) + "\n"
