"""Accuracy against the fraction of attackers, as an inline SVG (no script, no external file): one line per
attack (grey) over the levels it ran at, starting from the clean accuracy, and the worst case per level (red)."""

from __future__ import annotations

import html

from fedarena.battery.card import Card

WIDTH, HEIGHT, PAD = 560, 300, 44


def level_chart(card: Card) -> str:
    levels = sorted({0.0} | {float(level) for level in card.worst})
    if card.clean_acc is None or len(levels) < 2:
        return '<p class="note">No chart: the card has no clean accuracy or no attack level.</p>'
    x = {level: PAD + i * (WIDTH - 2 * PAD) / (len(levels) - 1) for i, level in enumerate(levels)}

    def y(acc: float) -> float:
        return HEIGHT - PAD - acc * (HEIGHT - 2 * PAD)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" role="img" '
             f'aria-label="benign accuracy against the fraction of attackers">',
             f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="white"/>']
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        parts.append(f'<line x1="{PAD}" x2="{WIDTH - PAD}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" stroke="#e5e7eb"/>'
                     f'<text x="{PAD - 6}" y="{y(tick) + 4:.1f}" font-size="11" text-anchor="end">{tick:.2f}</text>')
    for level in levels:
        parts.append(f'<text x="{x[level]:.1f}" y="{HEIGHT - PAD + 16}" font-size="11" text-anchor="middle">'
                     f'{level:.0%}</text>')
    for attack, points in sorted(_attack_lines(card).items()):
        path = " ".join(f"{x[lv]:.1f},{y(acc):.1f}" for lv, acc in [(0.0, card.clean_acc), *points] if lv in x)
        parts.append(f'<polyline points="{path}" fill="none" stroke="#9ca3af" stroke-width="1">'
                     f"<title>{html.escape(attack)}</title></polyline>")
    worst = [(0.0, card.clean_acc)] + [(float(lv), e["acc"]) for lv, e in sorted(card.worst.items(), key=lambda i: float(i[0]))
                                       if "acc" in e]
    parts.append(f'<polyline points="{" ".join(f"{x[lv]:.1f},{y(acc):.1f}" for lv, acc in worst)}" fill="none" '
                 f'stroke="#b42318" stroke-width="2.5"><title>worst case</title></polyline>')
    parts.append(f'<text x="{WIDTH / 2:.0f}" y="{HEIGHT - 6}" font-size="12" text-anchor="middle">fraction of '
                 f"attackers (grey: each attack; red: the worst case)</text></svg>")
    return "".join(parts)


def _attack_lines(card: Card) -> dict[str, list[tuple[float, float]]]:
    lines: dict[str, list[tuple[float, float]]] = {}
    for key, values in card.settings.items():
        attack, sep, level = key.partition("@")
        acc = values.get("acc_pooled")
        if sep and acc is not None and acc == acc:
            lines.setdefault(attack, []).append((float(level), acc))
    return {attack: sorted(points) for attack, points in lines.items()}
