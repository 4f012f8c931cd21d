"""An entry's page: its card (worst case per level with rank, fairness under it, worst attack success rate), what
each side pays (the server step and a device's bytes per round, each attack's work beyond honest training), the
whole per-attack grid with seeds and 95% intervals, accuracy against attack level, claims beside measurements,
the checks a rerun submission passed (isolated, sandboxed, reproduced, reviewed, the tolerance), each seed's cell a
rerun did not reproduce, the component's source identity and the command that reproduces it."""

from __future__ import annotations

from fedarena.battery.card_costs import NOT_RECORDED, ms_text, passes_text, size_text
from fedarena.website.chart import level_chart
from fedarena.website.entries import Entry
from fedarena.website.pages import esc, fmt, link, page, status_badge, yes_no
from fedarena.website.submission import setting_text


def entry_html(entry: Entry, scale: str, root: str) -> str:
    title = f"{entry.name or entry.component}: robustness card"
    return page(title, "\n".join(_sections(entry, scale, title)), root)


def _sections(entry: Entry, scale: str, title: str) -> list[str]:
    out = [f"<h1>{esc(title)}</h1>", f"<p>{status_badge(entry)} {esc(entry.component)}</p>", _about(entry)]
    if entry.card is None:
        return out + [f"<p>Rejected: <strong>{esc(entry.reason)}</strong></p>"]
    card = entry.card
    out += [_facts(entry), *_checks(entry), "<h2>Worst case per level</h2>", _worst(entry), "<h2>Accuracy against attack level</h2>",
            level_chart(card), "<h2>Costs</h2>", _costs(entry)]
    if entry.differing:
        out += ["<h2>Cells the rerun did not reproduce (per dataset and seed)</h2>", _differing(entry)]
    if entry.claims:
        out += ["<h2>Claimed against measured</h2>", _claims(entry)]
    out += ["<h2>Every setting (per dataset, with its seeds)</h2>", _grid(entry),
            "<h2>Reproduce</h2>", f"<pre>{esc(entry.reproduce)}</pre>"]
    return out


def _about(entry: Entry) -> str:
    bits = []
    if entry.authors:
        bits.append(f"Authors: {esc(', '.join(entry.authors))}.")
    if entry.paper:
        bits.append(f"Paper: {link(entry.paper, entry.paper)}.")
    return f"<p>{' '.join(bits)}</p>" if bits else ""


def _facts(entry: Entry) -> str:
    card = entry.card
    rows = [("kind", card.kind), ("pre-aggregators", ", ".join(entry.pre_aggregators) or "none"),
            ("battery version", card.battery_version), ("scale", card.scale), ("datasets", ", ".join(card.datasets)),
            ("component version (source identity)", card.identity or "?"), ("code version", card.code_version or "?"),
            ("runs under secure aggregation", yes_no(card.secure_aggregation)),
            ("runs under central DP", yes_no(card.central_dp)),
            ("clean accuracy", f"{fmt(card.clean_acc)} {_span(card.intervals.get('clean', {}).get('acc_pooled'))}"),
            ("worst attack success rate", f"{fmt(card.worst_asr.get('asr'))} ({card.worst_asr.get('attack', '–')})"),
            ("complete", "yes" if card.complete else f"no: {len(card.missing)} of the battery's trials missing"),
            ("values", card.tuning or _values(entry.settings))]
    if card.unranked:
        rows.append(("rank", f"not ranked: {card.unranked}"))
    body = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows)
    return f'<table class="facts">{body}</table>'


def _checks(entry: Entry) -> list[str]:
    """What a rerun submission passed, each in words ([] for a built-in row)."""
    checks = entry.checks
    if checks is None:
        return []
    review = checks["reviewed"]
    rows = [("isolated", "yes: its rule ran in isolated rule processes, sandboxed, seeing only pseudonymised device "
                         "ids and a keyed seed" if checks["isolated"] else "no: its code ran beside the trial it was "
                                                                          "scored on"),
            ("sandboxed", "yes (bubblewrap)" if checks["sandboxed"] else "no: rerun as the builder's user "
                                                                         "(--trust-submissions)"),
            ("reproduced", f"yes: every seed's value of every cell within {checks['tolerance']:g} of the submitted "
                           "card's" if checks["reproduced"] else
                           f"no: {len(entry.differing)} of the seeds' cells differ by more than {checks['tolerance']:g} "
                           f"or are missing (below)"),
            ("reviewed", f"{review['reviewer']}, {review['date']}, source sha256 {review['source']}"
                         + (f": {review['note']}" if review["note"] else "") if review else "no")]
    body = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows)
    return ["<h2>Checks</h2>", f'<table class="facts" id="checks">{body}</table>']


def _values(settings: dict) -> str:
    """The hyperparameters it ran with: its settings as ``--set`` gives them, else its defaults."""
    if not settings:
        return "the component's defaults"
    return ", ".join(f"{key}={setting_text(value)}" for key, value in sorted(settings.items())) + " (others at defaults)"


def _span(interval) -> str:
    return f"[{interval[0]:.3f}, {interval[1]:.3f}]" if interval else ""


def _worst(entry: Entry) -> str:
    card = entry.card
    rows = []
    for level, worst in sorted(card.worst.items(), key=lambda item: float(item[0])):
        if "acc" not in worst:
            rows.append(f"<tr><td>{float(level):.0%}</td><td>undefined</td><td colspan=\"5\">{esc(worst['undefined'])}</td></tr>")
            continue
        setting = f"{worst['attack']}@{float(level):g}"
        place = card.rank.get(level)
        rank = f"{place} of {card.ranked_among.get(level)}" if place else "–"
        rows.append(f"<tr><td>{float(level):.0%}</td><td class=\"num\">{fmt(worst['acc'])}</td>"
                    f"<td>{_span(card.intervals.get(setting, {}).get('acc_pooled'))}</td><td>{esc(worst['attack'])}</td>"
                    f"<td class=\"num\">{fmt(worst.get('acc_std'))}</td><td class=\"num\">{fmt(worst.get('acc_worst10'))}</td>"
                    f"<td>{esc(rank)}</td></tr>")
    return _table(["level", "worst-case accuracy", "95% interval", "attack", "std across devices",
                   "worst 10% of devices", "rank"], rows)


def _costs(entry: Entry) -> str:
    """What each side pays: the defense's server step and a device's bytes per round, and per setting the
    attacker's time per round and model passes beyond honest training."""
    costs = entry.card.costs
    if not costs:
        return f'<p class="note">Costs: {esc(NOT_RECORDED)}.</p>'
    facts = [("server step (the method's, with its rule)", f"{ms_text(costs.get('server_ms'))} per round"),
             ("a drawn device sends", f"{size_text(costs.get('bytes_sent'))} per round"),
             ("a drawn device receives", f"{size_text(costs.get('bytes_received'))} per round")]
    body = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in facts)
    rows = [f"<tr><td>{esc(setting)}</td><td class=\"num\">{esc(ms_text(c.get('attack_ms')))}</td>"
            f"<td class=\"num\">{esc(passes_text(c.get('attack_forward')))}</td>"
            f"<td class=\"num\">{esc(passes_text(c.get('attack_backward')))}</td></tr>"
            for setting, c in costs.get("attacks", {}).items()]
    note = (f'<p class="note">Means over the {esc(costs.get("recorded_runs"))} of its {esc(costs.get("runs"))} runs '
            "that recorded them; the attacker's work is what it does beyond honest training (0 for an attack that "
            "poisons its data once).</p>")
    table = _table(["setting", "attacker ms per round", "forward passes per run", "backward passes per run"], rows,
                   "costs") if rows else ""
    return f'<table class="facts">{body}</table>{table}{note}'


def _grid(entry: Entry) -> str:
    rows = []
    for cell in entry.card.grid:
        seeds = ", ".join(f"s{s}: {fmt(v)}" for s, v in zip(cell["seeds"], cell.get("acc_pooled", []), strict=False))
        asr = fmt(cell.get("asr_pooled_mean")) + (f" ± {fmt(cell['asr_pooled_ci'])}" if cell.get("asr_pooled_ci") else "")
        ci = f" ± {fmt(cell['acc_pooled_ci'])}" if cell.get("acc_pooled_ci") else ""
        rows.append(f"<tr><td>{esc(cell['setting'])}</td><td>{esc(cell['dataset'])}</td><td>{len(cell['seeds'])}</td>"
                    f"<td class=\"num\">{fmt(cell.get('acc_pooled_mean'))}{ci}</td><td>{esc(seeds)}</td>"
                    f"<td class=\"num\">{asr if cell.get('asr_pooled_mean') is not None else '–'}</td></tr>")
    return _table(["setting", "dataset", "seeds", "accuracy (mean ± 95% half-width)", "per seed",
                   "attack success rate"], rows, "grid")


def _claims(entry: Entry) -> str:
    rows = []
    for row in entry.claim_rows():
        inside = {True: "yes", False: '<span class="outside">no</span>', None: "–"}[row["in_interval"]]
        diff = "–" if row["difference"] is None else f"{row['difference']:+.3f}"
        rows.append(f"<tr><td>{esc(row['setting'])}</td><td class=\"num\">{fmt(row['claimed'])}</td>"
                    f"<td class=\"num\">{fmt(row['measured'])}</td><td>{_span(row['interval'])}</td>"
                    f"<td class=\"num\">{diff}</td><td>{inside}</td></tr>")
    return _table(["setting", "claimed", "measured", "95% interval", "measured − claimed", "claim in interval"], rows)


def _differing(entry: Entry) -> str:
    rows = [f"<tr><td>{esc(d['cell'])}</td><td>{esc(d.get('dataset'))}</td><td>{esc(d.get('seed'))}</td>"
            f"<td class=\"num\">{fmt(d['submitted'])}</td><td class=\"num\">{fmt(d['measured'])}</td>"
            f"<td>{_span(d['interval'])}</td><td>{esc(d['why'])}</td></tr>" for d in entry.differing]
    return _table(["cell", "dataset", "seed", "submitted", "rerun", "rerun's 95% interval between seeds", "why"], rows,
                  "differing")


def _table(headers: list[str], rows: list[str], table_id: str = "") -> str:
    """A table of ready rows under ``headers`` (text, escaped here)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    ident = f' id="{table_id}"' if table_id else ""
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
