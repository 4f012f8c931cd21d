"""The site's HTML: the index table of one battery version and scale, an entry's page, the landing and the
how-to-submit pages. Static, self-contained (the style and the one script inlined, nothing fetched at view
time) and deterministic (no clock, sorted input).

Every string that comes from a store or a submission reaches the page through ``esc`` (HTML-escaped, quotes
included) and a link only through ``link`` (http and https only); the pages' Content-Security-Policy allows no
script but the site's own (by its hash), so markup a submission smuggles in would not run either.
"""

from __future__ import annotations

import base64
import hashlib
import html
from importlib import resources
from pathlib import Path
from urllib.parse import urlparse

from fedarena.website.entries import Entry
from fedarena.website.per_seed import TOLERANCE

LEVELS_SHOWN = ("0.1", "0.2")  # the index's worst-case columns


def _asset(name: str) -> str:
    return Path(str(resources.files("fedarena.website") / name)).read_text(encoding="utf-8")


STYLE, SCRIPT = _asset("site.css"), _asset("site.js")
SCRIPT_HASH = base64.b64encode(hashlib.sha256(SCRIPT.encode("utf-8")).digest()).decode()
POLICY = (f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src 'sha256-{SCRIPT_HASH}'; "
          f"base-uri 'none'; form-action 'none'")


def esc(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def link(url: str, text: str) -> str:
    """A link where ``url`` is http(s), else the text alone."""
    parsed = urlparse(url or "")
    if parsed.scheme in ("http", "https") and parsed.netloc:
        return f'<a href="{esc(url)}" rel="noopener noreferrer nofollow">{esc(text)}</a>'
    return esc(text)


def fmt(value, digits: int = 3) -> str:
    return "–" if value is None or value != value else f"{value:.{digits}f}"


def page(title: str, body: str, root: str, script: bool = False) -> str:
    """A whole page; ``root``: the relative path to the site's top folder ('' or '../..')."""
    top = f"{root}/" if root else ""
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{POLICY}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">', f"<title>{esc(title)}</title>",
        f"<style>{STYLE}</style>", *([f"<script>{SCRIPT}</script>"] if script else []), "</head>", "<body>",
        f'<nav><a href="{top}index.html">fedarena leaderboard</a><a href="{top}submit.html">How to submit</a></nav>',
        body, "</body>", "</html>", ""])


STATUS_CLASS = {"built-in": "built-in", "verified": "verified", "verified (reviewed)": "reviewed",
                "reproduced (not isolated)": "reproduced", "unverified": "unverified", "rejected": "rejected"}


def status_badge(entry: Entry) -> str:
    """The entry's status, and "not isolated" where its code ran beside its trial."""
    badge = f'<span class="status status-{STATUS_CLASS.get(entry.status, "other")}">{esc(entry.status)}</span>'
    shown = "(not isolated)" not in entry.status  # the status says it already
    return badge + (' <span class="status status-not-isolated">not isolated</span>' if entry.not_isolated and shown
                    else "")


def yes_no(value: bool | None) -> str:
    return "–" if value is None else ("yes" if value else "no")


def _worst_cells(entry: Entry, level: str) -> list[str]:
    worst = entry.card.worst.get(level, {}) if entry.card else {}
    if "acc" not in worst:
        why = worst.get("undefined", "")
        return [f'<td class="num" data-sort="" title="{esc(why)}">undefined</td>' if worst else
                '<td class="num" data-sort="">–</td>', '<td data-sort=""></td>', '<td class="num" data-sort="">–</td>']
    return [f'<td class="num" data-sort="{worst["acc"]:.6f}">{fmt(worst["acc"])}</td>', f"<td>{esc(worst['attack'])}</td>",
            f'<td class="num" data-sort="{_sortable(worst.get("acc_worst10"))}">{fmt(worst.get("acc_worst10"))}</td>']


def _server_cell(ms: float | None) -> str:
    """The server step's ms per round (– where the card's runs did not record it)."""
    shown = "–" if ms is None else f"{ms:.2f}"
    return f'<td class="num" data-sort="{_sortable(ms)}">{shown}</td>'


def _sortable(value) -> str:
    return "" if value is None or value != value else f"{value:.6f}"


INDEX_HEADER = ["entry", "kind", "pre-aggregators", "clean", "worst @10%", "attack @10%", "worst 10% dev. @10%",
                "worst @20%", "attack @20%", "worst 10% dev. @20%", "rank @20%", "worst ASR", "ASR attack",
                "secure agg.", "central DP", "server ms/round", "version", "status", "paper"]


def index_row(entry: Entry, order: int) -> str:
    card = entry.card
    name = entry.name if entry.status != "built-in" else entry.component
    cells = [f'<td><a href="entries/{esc(entry.slug)}.html">{esc(name)}</a>'
             + (f'<br><span class="note">{esc(entry.component)}</span>' if name != entry.component else "") + "</td>",
             f"<td>{esc(entry.kind)}</td>", f"<td>{esc(', '.join(entry.pre_aggregators))}</td>"]
    if card is None:
        cells[0] = cells[0].removesuffix("</td>") + f'<br><span class="note">{esc(entry.reason)}</span></td>'
        cells += ['<td data-sort="">–</td>'] * 14
    else:
        cells.append(f'<td class="num" data-sort="{_sortable(card.clean_acc)}">{fmt(card.clean_acc)}</td>')
        for level in LEVELS_SHOWN:
            cells += _worst_cells(entry, level)
        place = card.rank.get("0.2")
        rank = f"{place} of {card.ranked_among.get('0.2')}" if place else ("–" if card.complete else "incomplete")
        cells.append(f'<td class="num" data-sort="{place or ""}">{esc(rank)}</td>')
        asr = card.worst_asr
        cells += [f'<td class="num" data-sort="{_sortable(asr.get("asr"))}">{fmt(asr.get("asr"))}</td>',
                  f"<td>{esc(asr.get('attack', ''))}</td>", f"<td>{yes_no(card.secure_aggregation)}</td>",
                  f"<td>{yes_no(card.central_dp)}</td>", _server_cell(card.costs.get("server_ms")),
                  f"<td>{esc(card.identity)}</td>"]
    cells.append(f'<td data-sort="{esc(entry.status)}">{status_badge(entry)}</td>')
    cells.append(f"<td>{link(entry.paper, 'paper') if entry.paper else ''}</td>")
    return (f'<tr data-order="{order}" data-kind="{esc(entry.kind)}" data-status="{esc(entry.status)}">'
            + "".join(cells) + "</tr>")


def index_page(entries: list[Entry], battery_version: int, scale: str, archived: list[int], root: str,
               current: bool = True) -> str:
    rows = "\n".join(index_row(e, i) for i, e in enumerate(entries))
    header = "".join(f"<th>{esc(h)}</th>" for h in INDEX_HEADER)
    kinds = "".join(f'<option value="{k}">{k}</option>' for k in ("aggregator", "method"))
    statuses = "".join(f'<option value="{esc(s)}">{esc(s)}</option>' for s in STATUS_CLASS)
    older = ", ".join(f'<a href="v{v}/index.html">version {v}</a>' for v in archived)
    title = (f"Robustness leaderboard: battery version {battery_version}, scale {scale}"
             + ("" if current else " (archived)"))
    body = [f"<h1>{esc(title)}</h1>",
            *([] if current else ['<p class="note">An older battery version: its numbers are not comparable with the '
                                  'current version\'s and are never ranked together with them.</p>']),
            f'<p class="note">Each row is a robustness card: the standard threat battery (version {battery_version}) '
            f"run against one component at scale {esc(scale)}. Worst case: the lowest benign accuracy over the "
            "battery's attacks at that fraction of attackers (mean over datasets and seeds); worst 10% dev.: the "
            "mean accuracy of the worst tenth of devices under that attack; rank: among the complete built-in rows "
            "of its kind; server ms/round: the method's server step with its rule (– where its runs did not record "
            "it; what each attack costs is on the entry's page). Status: built-in (measured by this site's store); "
            f"verified (a submission whose rule this site reran isolated, every seed's cell within {TOLERANCE:g} of "
            "its card); verified (reviewed) (reproduced, not isolated, its exact source reviewed by a maintainer); "
            "reproduced (not isolated) (reproduced, but its code ran beside the trial it was scored on); "
            "unverified (some seed's cell differs: see its page); rejected (could not be evaluated). "
            f'<a href="{root}/submit.html">What each one proves</a>.</p>',
            '<div class="filters"><label>Filter <input id="filter-text" type="search" placeholder="text"></label>'
            f'<label>Kind <select id="filter-kind"><option value="">all</option>{kinds}</select></label>'
            f'<label>Status <select id="filter-status"><option value="">all</option>{statuses}</select></label>'
            f'<span class="note"><span id="shown-count">{len(entries)}</span> of {len(entries)} shown</span></div>',
            f'<table id="leaderboard"><thead><tr>{header}</tr></thead><tbody>\n{rows}\n</tbody></table>',
            '<p class="note">Data: <a href="leaderboard.json">leaderboard.json</a>.'
            + (f" Older battery versions: {older}." if older else "") + "</p>"]
    return page(title, "\n".join(body), root, script=True)


def landing_page(scales: list[tuple[str, int]]) -> str:
    items = "".join(f'<li><a href="{esc(s)}/index.html">scale {esc(s)}</a> (battery version {v})</li>'
                    for s, v in scales)
    body = ("<h1>fedarena robustness leaderboard</h1><p>Robustness cards of federated learning defenses and "
            "methods under the standard threat battery, one table per battery version and scale.</p>"
            f"<ul>{items}</ul>")
    return page("fedarena robustness leaderboard", body, "")


def submit_page(battery_version: int) -> str:
    example = """my-defense/
  my_defense.py        # the plugin: registers aggregator "my_defense" (fedarena.aggregator)
  submission.yaml
  card.json            # fedarena evaluate --aggregator my_defense --include my_defense.py --scale quick --out .

# submission.yaml
name: My defense
component: aggregator.my_defense
settings: {beta: 0.1}
authors: [A. Author, B. Author]
paper: https://example.org/my-defense
claims: {clean_acc: 0.91, robust_acc: {min_max@0.2: 0.85}}
plugin: my_defense.py"""
    body = f"""<h1>How to submit</h1>
<p>A submission is a folder: a plugin (a file or a package that registers your aggregator or method with
<code>fedarena.aggregator</code> or <code>fedarena.method</code>), <code>submission.yaml</code>, and the
<code>card.json</code> you measured with <code>fedarena evaluate</code> under battery version {battery_version}.</p>
<pre>{esc(example)}</pre>
<p>The maintainers build the site with <code>fedarena site --scale SCALE --out DIR --submissions FOLDER</code>.
Each submission is evaluated through the same battery in processes of its own, with a time and a memory limit,
in a store of its own. An aggregator's rule runs in isolated rule processes under bubblewrap: it sees the updates
and what it declares it reads, with device ids pseudonymised and a keyed seed, never the trial. A method runs inside
local training, so its whole run is sandboxed but not isolated from its trial. The rerun reproduces your card when
every seed's value of every cell (clean accuracy, each setting's accuracy, spread, worst 10% of devices and attack
success rate, the worst cases) lies within {TOLERANCE:g} (absolute) of your card's value of that seed; the 95% interval over
the seeds is shown as each cell's uncertainty, not used as the test. The entry is then <strong>verified</strong>
(reproduced and isolated), <strong>verified (reviewed)</strong> (reproduced, not isolated, and a maintainer
reviewed exactly its source in <code>reviews.yaml</code>) or <strong>reproduced (not isolated)</strong>; otherwise
<strong>unverified</strong> with the differing cells, or <strong>rejected</strong> with the reason when it does not
load, breaks its contract, names another battery version, fails, or passes a limit. Claims outside the measured
interval are shown with their difference. Check yours first with <code>fedarena site --verify FOLDER --scale
SCALE</code>, which reruns it on a fresh store. The threat model: <code>docs/leaderboard.md</code>.</p>
<p>Names, authors and links are shown as text (a link only when it is http or https).</p>"""
    return page("How to submit", body, "")
