"""Issue 69's site side without a battery run: a submitted card held against a rerun seed by seed (tolerance 0.01),
the statuses and the checks behind them, reviews.yaml, where a submission runs (bubblewrap faked where its absence
is the point), and the output written by the builder alone (built fresh, moved into place)."""

import json
import os
from pathlib import Path

import jsonschema
import pandas as pd
import pytest
import yaml

from fedarena import cli
from fedarena.battery.card import card_of
from fedarena.battery.spread import grid, intervals
from fedarena.errors import ConfigError
from fedarena.plugins import digest_of, read_source
from fedarena.website import output, placement, publish
from fedarena.website.entries import Entry, builtin_entry, schema
from fedarena.website.output import check_places, write_site
from fedarena.website.per_seed import TOLERANCE, differing_cells
from fedarena.website.reviews import ReviewError, read_reviews, review_of, source_sha256
from fedarena.website.submission import SubmissionError, read_submission
from fedarena.website.verification import Limits, status_of

# (setting -> per dataset and seed accuracy); badnets is the targeted attack (asr), min_max the worst at 0.2
ACC = {"clean": 0.9, "min_max@0.2": 0.5, "a1@0.2": 0.7, "badnets@0.2": 0.8}


def measured_card(label="aggregator.mine"):
    rows = [{"method_label": label, "dataset_label": d, "attack_label": s.split("@")[0],
             "level": float(s.split("@")[1]) if "@" in s else 0.0, "seed": seed,
             "acc_pooled": acc + 0.02 * seed + (0.05 if d == "mnist_5k" else 0), "acc_std": 0.1 + 0.01 * seed,
             "acc_worst10": acc / 2, "asr_pooled": 0.3 + 0.1 * seed if s.startswith("badnets") else float("nan")}
            for s, acc in ACC.items() for d in ("digits", "mnist_5k") for seed in (0, 1, 2)]
    runs = pd.DataFrame(rows)
    cells = runs.groupby(["method_label", "dataset_label", "attack_label", "level"], as_index=False).mean(numeric_only=True)
    card = card_of(cells, label, kind="aggregator", battery_version=5, scale="smoke", levels=[0.2], missing=[])
    card.intervals, card.grid = intervals(runs, card.settings), grid(runs)
    return card


def submitted(card=None):
    return json.loads(json.dumps((card or measured_card()).to_json()))


def moved(card: dict, setting: str, metric: str, dataset: str, seed: int, by: float) -> dict:
    for entry in card["grid"]:
        if (entry["setting"], entry["dataset"]) == (setting, dataset):
            entry[metric][entry["seeds"].index(seed)] += by
    return card


def cells(differing):
    return {(d["cell"], d["dataset"], d["seed"]) for d in differing}


def test_a_card_reproduces_when_every_seeds_cell_lies_within_the_tolerance():
    measured = measured_card()
    assert TOLERANCE == 0.01 and differing_cells(submitted(), measured) == []
    near = moved(submitted(), "a1@0.2", "acc_pooled", "digits", 1, 0.0099)
    assert differing_cells(near, measured) == []
    far = moved(submitted(), "a1@0.2", "acc_pooled", "digits", 1, 0.0101)
    (cell,) = differing_cells(far, measured)
    assert (cell["cell"], cell["dataset"], cell["seed"]) == ("a1@0.2 acc_pooled", "digits", 1)
    assert cell["why"] == "differs from the rerun by more than 0.01" and cell["interval"] == measured.intervals["a1@0.2"]["acc_pooled"]
    assert cell["submitted"] - cell["measured"] == pytest.approx(0.0101)


def test_a_value_inside_the_between_seed_interval_but_off_for_its_seed_is_not_reproduced():
    measured = measured_card()
    low, high = measured.intervals["clean"]["acc_pooled"]
    assert high - low > 0.09  # seeds .90, .92, .94 (and .95, .97, .99): the old test passed any clean_acc to ~.99
    inflated = moved(submitted(), "clean", "acc_pooled", "digits", 0, 0.04)
    assert cells(differing_cells(inflated, measured)) == {("clean_acc", "digits", 0)}


def test_the_worst_cases_and_the_worst_attack_success_rate_are_checked_per_seed():
    measured = measured_card()
    assert measured.worst["0.2"]["attack"] == "min_max" and measured.worst_asr["attack"] == "badnets@0.2"
    worse = moved(moved(submitted(), "min_max@0.2", "acc_worst10", "mnist_5k", 2, -0.2),
                  "badnets@0.2", "asr_pooled", "digits", 0, 0.3)
    assert cells(differing_cells(worse, measured)) == {
        ("min_max@0.2 acc_worst10", "mnist_5k", 2), ("worst@0.2 acc_worst10", "mnist_5k", 2),
        ("badnets@0.2 asr_pooled", "digits", 0), ("worst_asr", "digits", 0)}
    other = submitted()
    other["worst"]["0.2"]["attack"] = "a1"  # its worst case names another attack, whose seeds are .7-.79 not .5-.59
    assert {c for c, _, _ in cells(differing_cells(other, measured))} == {"worst@0.2 acc", "worst@0.2 acc_worst10"}


def test_a_cell_without_per_seed_values_is_absent_and_a_made_up_one_not_measured():
    measured = measured_card()
    old = submitted()
    for entry in old["grid"]:
        del entry["acc_std"]  # a card from before the grid kept each metric per seed
    differing = differing_cells(old, measured)
    assert {d["why"] for d in differing} == {"absent from the submitted card"} and len(differing) == 4 * 2 * 3
    assert all(d["cell"].endswith(" acc_std") and d["submitted"] is None for d in differing)
    assert len(differing_cells({k: v for k, v in submitted().items() if k != "grid"}, measured)) > 50
    extra = submitted()
    extra["grid"].append({**extra["grid"][0], "setting": "made_up@0.2"})
    assert {d["why"] for d in differing_cells(extra, measured)} == {"not measured by the rerun"}


@pytest.mark.parametrize("garbage", [
    {"grid": "x"}, {"grid": [1, None, {"setting": 3}]}, {"grid": [{"setting": "clean", "dataset": "digits",
                                                                    "seeds": [True, 0], "acc_pooled": [1, "x"]}]},
    {"worst": {"0.2": {"attack": ["x"]}}, "worst_asr": {"attack": "badnets@x"}},
])
def test_a_malformed_submitted_card_differs_without_an_error(garbage):
    assert differing_cells({**submitted(), **garbage}, measured_card())


def test_the_status_follows_the_checks():
    assert status_of([{"cell": "x"}], isolated=True, review={"r": 1}) == "unverified"
    assert status_of([], isolated=True, review=None) == "verified"
    assert status_of([], isolated=False, review={"r": 1}) == "verified (reviewed)"
    assert status_of([], isolated=False, review=None) == "reproduced (not isolated)"


# reviews.yaml

PLUGIN = "from fedarena import aggregator\n"


def a_submission(root: Path, name="mine", component="aggregator.mine", card=None) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "mine.py").write_text(PLUGIN)
    (folder / "submission.yaml").write_text(yaml.safe_dump({"name": "Mine", "component": component}))
    (folder / "card.json").write_text(json.dumps(card or {**submitted(), "component": component}))
    return folder


def test_the_source_hash_is_the_plugins_identity_in_full(tmp_path):
    folder = a_submission(tmp_path)
    full = source_sha256(folder / "mine.py")
    assert len(full) == 64 and full[:16] == digest_of(read_source(folder / "mine.py")[2])
    (folder / "mine.py").write_text(PLUGIN + "# edited\n")
    assert source_sha256(folder / "mine.py") != full


def test_a_review_applies_only_to_exactly_the_reviewed_source(tmp_path):
    folder = a_submission(tmp_path)
    source = source_sha256(folder / "mine.py")
    (tmp_path / "reviews.yaml").write_text(
        f"- {{entry: mine, source: {source.upper()}, reviewer: B. M., date: 2026-12-01, note: first}}\n"
        f"- {{entry: mine, source: '{source}', reviewer: C. M., date: '2026-12-05'}}\n"
        f"- {{entry: other, source: '{source}', reviewer: D. M., date: 2026-12-09}}\n")
    reviews = read_reviews(tmp_path)
    assert review_of(reviews, folder, folder / "mine.py") == {"entry": "mine", "source": source, "reviewer": "C. M.",
                                                             "date": "2026-12-05", "note": ""}
    (folder / "mine.py").write_text(PLUGIN + "import gc\n")
    assert review_of(reviews, folder, folder / "mine.py") is None
    assert read_reviews(tmp_path / "mine") == []  # no file: no reviews


@pytest.mark.parametrize("text,message", [
    ("{entry: x}", "holds a list of reviews (entry, source, reviewer, date, note), not dict"),
    ("- [1]", "review 1 is a mapping (entry, source, reviewer, date, note), not list"),
    ("- {entry: x, source: %s, reviewer: r, date: 2026-01-01, colour: red}", "review 1: unknown key(s) colour; allowed:"),
    ("- {entry: x, source: %s, date: 2026-01-01}", "review 1: missing reviewer (required: entry, source, reviewer, date)"),
    ("- {entry: x, source: %s, reviewer: r, date: 2026-02-30}", "review 1: date is a day as YYYY-MM-DD, got '2026-02-30'"),
    ("- {entry: x, source: %s, reviewer: r, date: 1/2/2026}", "review 1: date is a day as YYYY-MM-DD, got '1/2/2026'"),
    ("- {entry: x, source: abc123, reviewer: r, date: 2026-01-01}", "review 1: source is the plugin's sha256 (64 hex digits), got 'abc123'"),
    ("- {entry: ../x, source: %s, reviewer: r, date: 2026-01-01}", "review 1: entry is a submission's folder name, got '../x'"),
    ("- {entry: x, source: %s, reviewer: '', date: 2026-01-01}", "review 1: reviewer is a text of 1 to 1000 characters"),
    ("- {entry: [unclosed", "reviews.yaml is not YAML"),
])
def test_a_bad_reviews_file_is_one_line(tmp_path, text, message):
    (tmp_path / "reviews.yaml").write_text(text.replace("%s", "a" * 64))
    with pytest.raises(ReviewError) as raised:
        read_reviews(tmp_path)
    assert message in str(raised.value) and "\n" not in str(raised.value)


# where a submission runs

class FakeBwrap:
    def __init__(self, reason=""):
        self.reason, self.calls = reason, []

    def available(self):
        return self.reason

    def wrap(self, argv, *, writable=(), readable=(), env=None, chdir="/tmp"):
        self.calls.append({"writable": list(writable), "readable": list(readable), "env": env, "chdir": chdir})
        return ["bwrap", "--", *argv]


def test_an_aggregator_runs_isolated_and_a_method_wholly_sandboxed(tmp_path, monkeypatch):
    fake = FakeBwrap()
    monkeypatch.setattr(placement, "bwrap", fake)
    rule = read_submission(a_submission(tmp_path))
    placed = placement.place(rule, ["fedarena", "evaluate"], tmp_path / "work", trust=False)
    assert placed.argv == ["fedarena", "evaluate", "--isolate"] and placed.isolated and placed.wrapper is None
    method = read_submission(a_submission(tmp_path / "m", component="method.mine"))
    placed = placement.place(method, ["fedarena", "evaluate"], tmp_path / "work", trust=False)
    assert placed.argv == ["fedarena", "evaluate"] and not placed.isolated and placed.sandboxed
    assert placed.wrapper(["fedarena", "evaluate"], tmp_path / "ray") == ["bwrap", "--", "fedarena", "evaluate"]
    (call,) = fake.calls
    assert call["writable"] == [tmp_path / "work", tmp_path / "ray"] and str(method.folder.resolve()) in call["readable"]
    assert call["env"]["RAY_TMPDIR"] == str(tmp_path / "ray") and call["chdir"] == str(tmp_path / "work")


def test_without_bubblewrap_a_submission_is_rejected_unless_trusted(tmp_path, monkeypatch):
    monkeypatch.setattr(placement, "bwrap", FakeBwrap("bubblewrap is not installed"))
    rule = read_submission(a_submission(tmp_path))
    with pytest.raises(SubmissionError) as raised:
        placement.place(rule, ["fedarena", "evaluate"], tmp_path / "work", trust=False)
    assert str(raised.value) == ("bubblewrap cannot start here (bubblewrap is not installed): submissions are "
                                 "rejected unless the site is built with --trust-submissions")
    placed = placement.place(rule, ["fedarena", "evaluate"], tmp_path / "work", trust=True)
    assert placed.argv == ["fedarena", "evaluate"] and not placed.isolated and not placed.sandboxed
    entry = publish.submission_entry(rule.folder, "smoke", tmp_path / "work", Limits(seconds=5))
    assert entry.status == "rejected" and entry.reason == str(raised.value)
    assert not (tmp_path / "work").exists()  # rejected before anything ran


@pytest.mark.parametrize("isolated,reviewed,moved_by,status", [
    (True, False, 0.0, "verified"), (False, True, 0.0, "verified (reviewed)"),
    (False, False, 0.0, "reproduced (not isolated)"), (True, True, 0.5, "unverified"),
])
def test_a_submission_entry_records_the_checks_it_passed(tmp_path, monkeypatch, isolated, reviewed, moved_by, status):
    card = moved(submitted(), "clean", "acc_pooled", "digits", 0, moved_by)
    folder = a_submission(tmp_path, card=card)
    review = {"entry": "mine", "source": source_sha256(folder / "mine.py"), "reviewer": "B. M.", "date": "2026-12-01",
              "note": "no frame walking"}
    ran = placement.Placement([], isolated=isolated, sandboxed=isolated)
    monkeypatch.setattr(publish, "rerun", lambda *args: (measured_card(), ran))
    entry = publish.submission_entry(folder, "smoke", tmp_path / "work", Limits(), False, [review] if reviewed else [])
    assert entry.status == status and entry.not_isolated == (not isolated)
    assert entry.checks == {"isolated": isolated, "sandboxed": isolated, "reproduced": not moved_by,
                            "reviewed": review if reviewed else None, "tolerance": 0.01}


# the output, written by the builder alone

def test_the_work_folder_and_the_output_never_hold_each_other(tmp_path):
    with pytest.raises(ConfigError, match="--work .* lies inside --out .*: the submissions' work folders must lie"):
        check_places(tmp_path / "site", tmp_path / "site" / "work")
    with pytest.raises(ConfigError, match="--out .* lies inside --work"):
        check_places(tmp_path / "work" / "site", tmp_path / "work")
    with pytest.raises(ConfigError, match="lies inside --out"):
        check_places(tmp_path / "same", tmp_path / "same")
    check_places(tmp_path / "site", tmp_path / "work")
    assert os.listdir(tmp_path) == []  # the probe left nothing


def test_site_out_under_a_file_is_one_line(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    code = cli.main(["site", "--scale", "smoke", "--out", str(tmp_path / "file" / "site"), "--work",
                     str(tmp_path / "work"), "--tracking-uri", f"sqlite:///{tmp_path}/m.db"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert err == f"fedarena: error: --out {tmp_path}/file/site: cannot create a folder there: {tmp_path}/file is a file\n"
    assert not (tmp_path / "m.db").exists()  # refused before the store was opened


def test_site_out_where_the_system_refuses_a_folder_is_one_line(tmp_path, capsys, monkeypatch):
    def refused(path, *args, **kwargs):  # as an unprivileged user under a folder it cannot write (tests run as root)
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(Path, "mkdir", refused)
    code = cli.main(["site", "--scale", "smoke", "--out", str(tmp_path / "locked" / "site"), "--work",
                     str(tmp_path / "work"), "--tracking-uri", f"sqlite:///{tmp_path}/m.db"])
    assert code == 2 and capsys.readouterr().err == (f"fedarena: error: --out {tmp_path}/locked/site: cannot create a "
                                                     f"folder there (Permission denied: {tmp_path}/locked)\n")


def entries(status="reproduced (not isolated)"):
    mine = measured_card()
    checks = {"isolated": False, "sandboxed": False, "reproduced": True, "reviewed": None, "tolerance": 0.01}
    return [builtin_entry(measured_card("aggregator.median"), "smoke"),
            Entry("submission-mine", status, mine, name="Mine", component="aggregator.mine", checks=checks,
                  reproduce="fedarena evaluate --aggregator mine")]


def test_the_output_is_built_fresh_keeping_only_the_published_versions_and_scales(tmp_path):
    site = tmp_path / "site"
    write_site(site, entries(), "quick")
    write_site(site, entries(), "smoke")
    (site / "smoke" / "v4" / "entries").mkdir(parents=True)
    (site / "smoke" / "v4" / "index.html").write_text("archived")
    (site / "smoke" / "v4" / "entries" / "old.html").write_text("old page")
    (site / "smoke" / "v4" / "leaderboard.json").write_text(json.dumps({"battery_version": 4, "entries": [
        {"entry": "old"}, {"entry": "../../../elsewhere/x"}]}))  # a listed name that climbs out: never copied
    planted = {site / "smoke" / "entries" / "forged.html": "forged", site / "smoke" / "forged.json": "{}",
               site / "smoke" / "v4" / "entries" / "unlisted.html": "forged",
               site / "quick" / "entries" / "forged.html": "forged", site / "elsewhere" / "x.html": "x",
               site / "smoke" / "v4" / "run.sh": "rm -rf /"}
    for path, text in planted.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (site / "quick" / "entries" / "link.html").symlink_to("/etc/hostname")
    (site / "quick" / "entries" / "aggregator.median.html").unlink()  # a listed page replaced by a link
    (site / "quick" / "entries" / "aggregator.median.html").symlink_to("/etc/hostname")
    quick = (site / "quick" / "index.html").read_bytes()
    write_site(site, entries(), "smoke")
    assert not any(path.exists() for path in planted) and not (site / "quick" / "entries" / "link.html").exists()
    assert not (site / "quick" / "entries" / "aggregator.median.html").exists()  # a link is never followed
    assert (site / "smoke" / "v4" / "entries" / "old.html").read_text() == "old page"
    assert (site / "quick" / "index.html").read_bytes() == quick and 'href="v4/index.html"' in (
        site / "smoke" / "index.html").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]  # no fresh or old folder left beside it


def test_a_new_battery_version_archives_the_old_pages_in_the_fresh_folder(tmp_path, monkeypatch):
    site = tmp_path / "site"
    write_site(site, entries(), "smoke")
    monkeypatch.setattr(output, "battery_version", lambda: 6)
    write_site(site, [], "smoke")
    assert (site / "smoke" / "v5" / "entries" / "submission-mine.html").is_file()
    assert json.loads((site / "smoke" / "leaderboard.json").read_text())["battery_version"] == 6


def test_the_pages_and_leaderboard_json_show_the_checks(tmp_path):
    write_site(tmp_path / "site", entries(), "smoke")
    data = json.loads((tmp_path / "site" / "smoke" / "leaderboard.json").read_text())
    jsonschema.validate(data, schema())
    record = {e["entry"]: e for e in data["entries"]}["submission-mine"]
    assert record["status"] == "reproduced (not isolated)" and record["checks"]["isolated"] is False
    assert {e["entry"]: e for e in data["entries"]}["aggregator.median"]["checks"] is None
    for status in ("verified", "verified (reviewed)"):  # a status its checks do not support fails the schema
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**data, "entries": [{**record, "status": status}]}, schema())
    index = (tmp_path / "site" / "smoke" / "index.html").read_text()
    assert 'class="status status-reproduced">reproduced (not isolated)</span>' in index
    assert '<span class="status status-not-isolated">' not in index  # the status says so already
    write_site(tmp_path / "site", entries("unverified"), "smoke")
    assert '<span class="status status-not-isolated">not isolated</span>' in (
        tmp_path / "site" / "smoke" / "index.html").read_text()
    page = (tmp_path / "site" / "smoke" / "entries" / "submission-mine.html").read_text()
    assert 'id="checks"' in page and "no: its code ran beside the trial it was scored on" in page
    assert "rerun as the builder&#x27;s user (--trust-submissions)" in page


def test_a_reason_names_no_path_of_the_building_machine(tmp_path):
    folder, work = tmp_path / "sub", tmp_path / "work" / "submission-sub"
    reason = (f"plugin /tmp/fedarena-isolated-b081z32m/shrunk.py: import failed; {folder}/card.json; {work}/x.log")
    assert publish._relative(reason, folder, work) == "plugin shrunk.py: import failed; card.json; x.log"
