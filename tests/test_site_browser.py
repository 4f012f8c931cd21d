"""The leaderboard site in a real browser (Debian's chromium and chromedriver, driven by selenium): the index loads
without console errors, a column header sorts the rows, the filters hide rows, every link resolves, an entry page
shows its grid, and a submission's hostile name and authors show as text without running.

The site here is written from hand-made cards (``publish.write_site``), so these tests cost seconds; the cards'
numbers are tested end to end in ``test_site_submissions``. Without a browser they skip, except where
``FEDARENA_REQUIRE_BROWSER=1`` (``.ci/run`` installs the browser and sets it): there a skip would hide them, so
they fail.
"""

import os
import shutil
from pathlib import Path
from urllib.parse import urldefrag, urlparse

import pandas as pd
import pytest

from fedarena.battery.card import card_of, rank_cards
from fedarena.battery.spread import grid, intervals
from fedarena.website.entries import Entry, builtin_entry
from fedarena.website.publish import write_site

pytestmark = pytest.mark.integration  # a browser process

CHROMIUM, DRIVER = shutil.which("chromium") or "/usr/bin/chromium", shutil.which("chromedriver") or "/usr/bin/chromedriver"
HOSTILE_NAME, HOSTILE_AUTHOR = "<script>window.__pwned = 1</script>", '<img src=x onerror="window.__pwned = 2">'


def runs(label: str, accuracy: dict[str, float]) -> pd.DataFrame:
    rows = []
    for setting, acc in accuracy.items():
        attack, _, level = setting.partition("@")
        for seed in (0, 1):
            rows.append({"method_label": label, "dataset_label": "digits", "attack_label": attack,
                         "level": float(level or 0), "seed": seed, "acc_pooled": acc + 0.01 * seed, "acc_std": 0.1,
                         "acc_worst10": acc / 2, "asr_pooled": 0.5 if attack == "badnets" else float("nan")})
    return pd.DataFrame(rows)


def card(label: str, accuracy: dict[str, float]):
    frame = runs(label, accuracy)
    cells = frame.groupby(["method_label", "dataset_label", "attack_label", "level"], as_index=False).mean(numeric_only=True)
    made = card_of(cells, label, kind=label.split(".")[0], battery_version=5, scale="smoke", levels=[0.1, 0.2],
                   missing=[])
    made.intervals, made.grid = intervals(frame, made.settings), grid(frame)
    made.secure_aggregation, made.central_dp, made.identity = label.endswith("mean"), True, "1"
    return made


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("browser") / "site"
    median = card("aggregator.median", {"clean": 0.9, "min_max@0.1": 0.7, "min_max@0.2": 0.5, "badnets@0.1": 0.8,
                                        "badnets@0.2": 0.75})
    mean = card("aggregator.mean", {"clean": 0.95, "min_max@0.1": 0.3, "min_max@0.2": 0.1, "badnets@0.1": 0.9,
                                    "badnets@0.2": 0.85})
    mine = card("aggregator.mine", {"clean": 0.8, "min_max@0.1": 0.75, "min_max@0.2": 0.6, "badnets@0.1": 0.7,
                                    "badnets@0.2": 0.65})
    ditto = card("method.ditto", {"clean": 0.85, "min_max@0.1": 0.6, "min_max@0.2": 0.4, "badnets@0.1": 0.8,
                                  "badnets@0.2": 0.7})
    rank_cards([median, mean, mine, ditto], {"aggregator.median", "aggregator.mean", "method.ditto"})
    entries = [builtin_entry(c, "smoke") for c in (median, mean, ditto)]
    entries.append(Entry("submission-mine", "verified", mine, name=HOSTILE_NAME, authors=(HOSTILE_AUTHOR,),
                         paper="https://example.org/mine", component="aggregator.mine",
                         claims={"clean_acc": 0.95}, reproduce="fedarena evaluate --aggregator mine --scale smoke",
                         checks={"isolated": True, "sandboxed": True, "reproduced": True, "reviewed": None,
                                 "tolerance": 0.01}))
    entries.append(Entry("submission-broken", "rejected", None, name="Broken <b>bold</b>", component="aggregator.?",
                         reason="plugin broken.py: import failed"))
    write_site(out, entries, "smoke")
    return out


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    required = os.environ.get("FEDARENA_REQUIRE_BROWSER") == "1"
    missing = [p for p in (CHROMIUM, DRIVER) if not Path(p).exists()]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing.append("the selenium package")
    if missing:
        message = f"no browser to test the site in: {', '.join(missing)} missing (apt-get install chromium chromium-driver)"
        if required:
            pytest.fail(message + "; FEDARENA_REQUIRE_BROWSER=1 makes this a failure")
        pytest.skip(message)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 f"--user-data-dir={tmp_path_factory.mktemp('profile')}", "--window-size=1400,1000"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=DRIVER))
    yield driver
    driver.quit()


def open_page(browser, path: Path):
    browser.get(path.as_uri())
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == [], errors
    return browser


def column(browser, index: int) -> list[str]:
    return [row.find_elements("tag name", "td")[index].text for row in browser.find_elements("css selector", "#leaderboard tbody tr")
            if row.is_displayed()]


def test_the_index_loads_without_console_errors_and_sorts_by_a_column(browser, site):
    open_page(browser, site / "smoke" / "index.html")
    clean = 3  # the column of clean accuracy
    header = browser.find_elements("css selector", "#leaderboard thead th")[clean]
    header.click()
    ascending = column(browser, clean)
    header.click()
    descending = column(browser, clean)
    numbers = [float(v) for v in ascending if v != "–"]
    assert numbers == sorted(numbers) and len(numbers) == 4
    assert [float(v) for v in descending if v != "–"] == sorted(numbers, reverse=True)
    assert ascending[-1] == "–"  # a rejected entry has no number: last either way
    assert header.get_attribute("aria-sort") == "descending"


def test_the_filters_hide_rows(browser, site):
    open_page(browser, site / "smoke" / "index.html")
    assert len(column(browser, 1)) == 5
    browser.find_element("id", "filter-text").send_keys("median")
    assert len(column(browser, 1)) == 1 and browser.find_element("id", "shown-count").text == "1"
    browser.find_element("id", "filter-text").clear()
    browser.execute_script("var s = document.getElementById('filter-kind'); s.value = 'method';"
                           "s.dispatchEvent(new Event('input'));")
    assert column(browser, 1) == ["method"]


def test_every_link_resolves(browser, site):
    pages = [site / "index.html", site / "submit.html", site / "smoke" / "index.html",
             *sorted((site / "smoke" / "entries").glob("*.html"))]
    checked = 0
    for page in pages:
        open_page(browser, page)
        for anchor in browser.find_elements("tag name", "a"):
            target = urldefrag(anchor.get_attribute("href")).url
            if urlparse(target).scheme in ("http", "https"):
                assert target == "https://example.org/mine"  # the one external link: the submission's paper
                continue
            assert Path(urlparse(target).path).is_file(), f"{page}: {target}"
            checked += 1
    assert checked > 10


def test_an_entry_page_shows_its_grid_and_claims(browser, site):
    open_page(browser, site / "smoke" / "entries" / "submission-mine.html")
    rows = browser.find_elements("css selector", "#grid tbody tr")
    assert len(rows) == 5 and "s0: 0.700, s1: 0.710" in rows[0].text  # badnets@0.1 first
    assert "svg" in browser.page_source and "Claimed against measured" in browser.page_source
    checks = browser.find_element("id", "checks").text
    assert "isolated yes" in checks and "reproduced yes: every seed's value of every cell within 0.01" in checks


def test_a_submissions_hostile_name_and_authors_show_as_text_and_never_run(browser, site):
    for page in (site / "smoke" / "index.html", site / "smoke" / "entries" / "submission-mine.html"):
        open_page(browser, page)
        assert browser.execute_script("return window.__pwned === undefined")
        assert HOSTILE_NAME in browser.find_element("tag name", "body").text
    assert HOSTILE_AUTHOR in browser.find_element("tag name", "body").text
    assert not browser.find_elements("css selector", "body img")
    open_page(browser, site / "smoke" / "index.html")
    assert "Broken <b>bold</b>" in browser.find_element("tag name", "body").text
