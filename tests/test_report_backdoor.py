"""The backdoor table in ``fedarena report``: a section of its own where a targeted attack ran, none elsewhere."""

import pandas as pd
import pytest
from store_for_views import NAME, SUITE, fill_store
from test_leaderboards_backdoor import RUNS
from test_leaderboards_tables import TABLE1_RUNS

from fedarena.leaderboards.build import leaderboard_tables
from fedarena.report.compose import build_report, sections
from fedarena.report.page import render_page

# The store's suite with a targeted label flip at 50% too (accuracy as without an attack). ASR per seed 0, 1:
# global .80/.82, median .20/.22, ditto .40/.42: median is lowest, against ditto Welch's t = .2 / .01414 = 14.1
# on 2 df, p = .005: significant, no ‡. Means over two seeds, ± t(.975, 1) = 12.706 times sd / sqrt(2).
ASR = {"global": 0.80, "median": 0.20, "ditto": 0.40}
FLIP = {"label": "flip", "attack": {"name": "targeted_flip"}, "levels": [0.5]}


def section(page: str, anchor: str) -> str:
    return page.split(f'<section id="{anchor}">', 1)[1].split("</section>", 1)[0]


def anchors(tables, prepared) -> list[str]:
    return [s.anchor for s in sections(tables, [], prepared, 0)]


def test_the_backdoor_section_is_there_only_where_a_targeted_attack_ran():
    # Prepare
    with_asr, _, prepared = leaderboard_tables(pd.DataFrame(RUNS))
    without, _, plain = leaderboard_tables(pd.DataFrame(TABLE1_RUNS))
    # Execute
    page = render_page("r", [], sections(with_asr, [], prepared, 0))
    # Assert: after the worst case, the table in it and not among the leaderboards
    usual = ["leaderboards", "worst-case", "reproduction", "figures", "provenance"]
    assert anchors(with_asr, prepared) == [*usual[:2], "backdoor", *usual[2:]]
    assert anchors(without, plain) == usual
    assert '<li><a href="#backdoor">Backdoor attacks</a></li>' in page
    assert '<h2 id="backdoor">Backdoor: clean accuracy / attack success rate' in section(page, "backdoor")
    assert "<td><b>.800±.000 / .200±.248 (.12)‡</b></td>" in section(page, "backdoor")
    assert '<h2 id="backdoor">' not in section(page, "leaderboards")


def fill_backdoor_store(folder, monkeypatch) -> str:
    """``store_for_views``'s runs plus the flip's, each flip run with its ASR (and clients.csv's ``asr``)."""
    monkeypatch.setitem(SUITE, "attacks", [*SUITE["attacks"], FLIP])
    return fill_store(folder, extra=lambda spec: {"asr_pooled": ASR[spec.method_label] + 0.02 * spec.seed}
                      if spec.attack_label == "flip" else {})


@pytest.mark.slow  # a real MLflow store
def test_report_shows_the_backdoor_table_from_the_store(tmp_path, monkeypatch):
    # Prepare
    uri = fill_backdoor_store(tmp_path, monkeypatch)
    # Execute
    page = build_report(NAME, uri, tmp_path / "out").read_text(encoding="utf-8")
    # Assert: clean and the flip, no A1; median bold, significantly (no ‡)
    part = section(page, "backdoor")
    assert '<th colspan="1">clean</th><th colspan="1">flip</th>' in part
    assert "<tr><td>global</td><td>.705±.064 / – (.10)</td><td>.705±.064 / .810±.127 (.10)</td></tr>" in part
    assert ("<tr><td>median§</td><td>.605±.064 / – (.10)</td><td><b>.605±.064 / .210±.127 (.10)</b></td></tr>"
            in part)
    assert "<tr><td>ditto</td><td>.805±.064 / – (.10)</td><td>.805±.064 / .410±.127 (.10)</td></tr>" in part
    assert "‡</b>" not in part and "A1" not in part
    assert '<h2 id="backdoor">' not in section(page, "leaderboards")
