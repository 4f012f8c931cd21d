"""The leaderboard site's parts without a battery run: a submission's bad input (one line each, before any of its
code runs), a submitted card held against a rerun seed by seed, the sandbox's limits, the card's intervals."""

import json
import os
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from fedarena.battery.card import Card, card_of, rank_cards
from fedarena.battery.spread import grid, intervals
from fedarena.website.publish import _undefined_everywhere
from fedarena.website.sandbox import descendants, run_limited
from fedarena.website.submission import SubmissionError, read_submission, slug_of
from fedarena.website.verification import check_before_running, command, differing_cells, shown_command

GOOD = {"name": "Mine", "component": "aggregator.mine", "settings": {"beta": 0.1}, "authors": ["A. Author"],
        "paper": "https://example.org/mine", "claims": {"clean_acc": 0.9}}
CARD = {"component": "aggregator.mine+beta0.1", "battery_version": 5, "scale": "smoke"}


def folder_with(tmp_path, meta=None, card=None, files=("mine.py",)):
    folder = tmp_path / "sub"
    folder.mkdir(parents=True)
    for name in files:
        (folder / name).write_text("x = 1\n")
    if meta is not None:
        (folder / "submission.yaml").write_text(meta if isinstance(meta, str) else yaml.safe_dump(meta))
    if card is not None:
        (folder / "card.json").write_text(card if isinstance(card, str) else json.dumps(card))
    return folder


def test_a_good_submission_reads_and_its_command_is_fedarena_evaluate(tmp_path):
    sub = read_submission(folder_with(tmp_path, GOOD, CARD))
    assert (sub.name, sub.kind, sub.component, sub.settings) == ("Mine", "aggregator", "mine", {"beta": 0.1})
    assert sub.plugin.name == "mine.py" and sub.slug == "submission-sub"
    argv = command(sub, "smoke", tmp_path / "work", 2)
    assert argv[argv.index("evaluate") + 1:argv.index("evaluate") + 3] == ["--aggregator", "mine"]
    assert argv[argv.index("--set") + 1] == "beta=0.1" and argv[-2:] == ["--num-cpus", "2"]
    check_before_running(sub, "smoke")


@pytest.mark.parametrize("change,files,message", [
    ({"name": None}, None, "missing name (required: name, component)"),
    ({"colour": "red"}, None, "unknown key(s) colour; allowed: name, component, settings"),
    ({"component": "median"}, None, "component is aggregator.NAME or method.NAME, got 'median'"),
    ({"paper": "javascript:alert(1)"}, None, "paper is an http(s) link, got 'javascript:alert(1)'"),
    ({"authors": {"a": 1}}, None, "authors is a list of names"),
    ({"name": "x" * 400}, None, "name is a text of 1 to 300 characters"),
    ({"claims": {"clean_acc": 2}}, None, "claims: accuracies are fractions in [0, 1]"),
    ({"settings": [1, 2]}, None, "settings is a mapping of hyperparameter names to values"),
    ({"plugin": "../outside.py"}, None, "plugin '../outside.py' is not a file or package inside the submission's"),
    ({}, ("a.py", "b.py"), "name the plugin (plugin: FILE.py or PACKAGE); the folder holds a.py, b.py"),
])
def test_bad_submission_yaml_is_one_line(tmp_path, change, files, message):
    meta = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    folder = folder_with(tmp_path, meta, CARD, files or ("mine.py",))
    with pytest.raises(SubmissionError) as raised:
        read_submission(folder)
    assert message in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.parametrize("meta,card,message", [
    (None, CARD, "no submission.yaml in the folder"),
    ("name: [unclosed", CARD, "submission.yaml is not YAML"),
    ("- a list", CARD, "submission.yaml holds a mapping (name, component, ...), not list"),
    (GOOD, None, "no card.json in the folder"),
    (GOOD, "{not json", "card.json is not JSON"),
    (GOOD, "[1, 2]", "card.json is not a card"),
])
def test_missing_or_unreadable_files_are_one_line(tmp_path, meta, card, message):
    with pytest.raises(SubmissionError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        read_submission(folder_with(tmp_path, meta, card))


def test_a_card_of_another_battery_version_or_scale_is_refused_before_running(tmp_path):
    sub = read_submission(folder_with(tmp_path, GOOD, {**CARD, "battery_version": 4}))
    with pytest.raises(SubmissionError, match="names battery version 4, not the current 5"):
        check_before_running(sub, "smoke")
    with pytest.raises(SubmissionError, match="of scale 'smoke', the site's is 'quick'"):
        check_before_running(read_submission(folder_with(tmp_path / "b", GOOD, CARD)), "quick")


def rerun_card() -> Card:
    runs = pd.DataFrame([{"attack_label": a, "level": lv, "dataset_label": "digits", "seed": s, "acc_pooled": acc + d,
                          "acc_std": 0.1, "acc_worst10": 0.2, "asr_pooled": float("nan")}
                         for a, lv, acc in (("clean", 0.0, 0.9), ("min_max", 0.2, 0.6)) for s, d in ((0, -0.02), (1, 0.02))])
    settings = {"clean": {"acc_pooled": 0.9, "acc_std": 0.1, "acc_worst10": 0.2, "asr_pooled": float("nan")},
                "min_max@0.2": {"acc_pooled": 0.6, "acc_std": 0.1, "acc_worst10": 0.2, "asr_pooled": float("nan")}}
    card = Card("aggregator.mine", "aggregator", 5, "smoke", ["digits"], 0.9,
                {"0.2": {"acc": 0.6, "attack": "min_max", "acc_std": 0.1, "acc_worst10": 0.2}}, {}, settings=settings)
    card.intervals, card.grid = intervals(runs, settings), grid(runs)
    return card


def test_the_interval_is_students_t_over_the_seeds_and_the_grid_keeps_each_seed():
    card = rerun_card()
    low, high = card.intervals["clean"]["acc_pooled"]
    assert (low + high) / 2 == pytest.approx(0.9) and high - low == pytest.approx(2 * 12.706 * 0.02, rel=1e-3)
    assert card.intervals["clean"]["acc_std"] == [0.1, 0.1] and "asr_pooled" not in card.intervals["clean"]
    assert card.grid[0]["seeds"] == [0, 1] and card.grid[0]["acc_pooled"] == pytest.approx([0.88, 0.92])


def test_a_submitted_card_is_held_against_the_rerun_seed_by_seed_not_against_its_interval():
    measured = rerun_card()
    honest = json.loads(json.dumps(measured.to_json()))
    assert differing_cells(honest, measured) == []
    inside = json.loads(json.dumps(honest))  # clean seeds .93 and .97: their mean .95 lies in .9 +- .254
    inside["grid"][0]["acc_pooled"] = [0.93, 0.97]
    assert {(d["cell"], d["seed"]) for d in differing_cells(inside, measured)} == {("clean_acc", 0), ("clean_acc", 1)}
    raised = json.loads(json.dumps(honest))
    raised["grid"][1]["acc_pooled"] = [0.99, 0.99]
    assert {d["cell"] for d in differing_cells(raised, measured)} == {"worst@0.2 acc", "min_max@0.2 acc_pooled"}
    summary_only = {**honest, "clean_acc": 0.99}  # the page shows the rerun's numbers: only the seeds are compared
    assert differing_cells(summary_only, measured) == []
    short = {k: v for k, v in honest.items() if k != "grid"}
    assert {d["why"] for d in differing_cells(short, measured)} == {"absent from the submitted card"}
    malformed = {**honest, "worst": {"0.2": "x"}, "worst_asr": [], "grid": [{"setting": "clean"}, honest["grid"][1]]}
    assert {d["cell"] for d in differing_cells(malformed, measured)} >= {"worst@0.2 acc", "clean_acc"}


def test_the_sandbox_stops_a_command_at_its_time_and_memory_limits_leaving_no_process(tmp_path):
    sleeper = [sys.executable, "-c", "import subprocess, time; print(subprocess.Popen(['sleep', '600']).pid, "
               "flush=True); time.sleep(600)"]
    start = time.monotonic()
    outcome = run_limited(sleeper, tmp_path, tmp_path / "log", seconds=2, memory_mib=4096)
    assert outcome.limit == "time limit of 2 s" and not outcome.ok and time.monotonic() - start < 10
    child = Path(f"/proc/{int(outcome.output.split()[0])}/stat")
    for _ in range(100):  # SIGKILL is asynchronous: the grandchild may still be exiting for a moment
        if not child.exists() or child.read_text().rsplit(")", 1)[1].split()[0] == "Z":
            break  # gone (or a zombie)
        time.sleep(0.05)
    else:
        raise AssertionError(f"the grandchild still runs 5 s after the limit: {child.read_text()}")
    hog = [sys.executable, "-c", "import time; blob = bytearray(b'1') * (1536 * 2**20); time.sleep(600)"]
    outcome = run_limited(hog, tmp_path, tmp_path / "log", seconds=60, memory_mib=512)
    assert outcome.limit == "memory limit of 512 MiB"
    done = run_limited([sys.executable, "-c", "print('hello')"], tmp_path, tmp_path / "log", seconds=60, memory_mib=512)
    assert done.ok and done.output == "hello"


def test_descendants_follow_the_process_tree():
    assert os.getpid() in descendants(os.getpid())


@pytest.mark.parametrize("text,message", [
    ("name: &a x\ncomponent: *a\n", "uses a YAML alias (*name): write each value out"),
    ("name: x\ncomponent: aggregator.mine\n1: a\nb: c\n", "unknown key(s) 1, b; allowed:"),
    ("name: x\ncomponent: aggregator.mine\nsettings: {start: 2020-01-01}\n", "setting start is not a plain value"),
    ("name: x\ncomponent: aggregator.mine\nsettings: {'a=b': 1}\n", "setting name 'a=b' is not a name"),
    ("name: x\ncomponent: aggregator.mine\nsettings: {beta: .inf}\n", "setting beta is not a plain value"),
    ("name: x\ncomponent: aggregator.mine\npaper: HTTPS://example.org\n", "paper is an http(s) link"),
])
def test_hostile_yaml_is_one_line_before_any_work(tmp_path, text, message):
    with pytest.raises(SubmissionError) as raised:
        read_submission(folder_with(tmp_path, text, CARD))
    assert message in str(raised.value)


def test_a_plugin_linking_outside_its_folder_and_a_huge_card_are_refused(tmp_path):
    folder = folder_with(tmp_path, GOOD, CARD, files=())
    (folder / "mine.py").symlink_to("/etc/hostname")
    with pytest.raises(SubmissionError, match="the plugin mine.py links outside the submission's folder"):
        read_submission(folder)
    with pytest.raises(SubmissionError, match="card.json is not JSON"):
        read_submission(folder_with(tmp_path / "deep", GOOD, "[" * 100000))


def test_slugs_of_distinct_folder_names_never_clash():
    names = ["my defense", "my_defense", "é", "ü", "plain"]
    slugs = [slug_of(Path(name)) for name in names]
    assert len(set(slugs)) == len(names) and slugs[-1] == "submission-plain"


def test_the_reproduce_command_is_quoted_for_a_shell(tmp_path):
    sub = read_submission(folder_with(tmp_path, {**GOOD, "settings": {"beta": "$(touch pwned)"}}, CARD))
    assert "'beta=\"$(touch pwned)\"'" in shown_command(sub, "smoke")


def test_a_row_undefined_at_every_level_is_listed_but_not_called_unranked():
    why = "method 'mocha' is defined for model 'svm'"
    mocha = card_of(pd.DataFrame(columns=["method_label", "dataset_label"]), "method.mocha", kind="method", battery_version=5,
                     scale="smoke", levels=[0.1, 0.2], undefined={("a1", 0.1): why, ("a1", 0.2): why}, missing=[])
    rank_cards([mocha], {"method.mocha"})
    assert mocha.rank == {"0.1": None, "0.2": None} and mocha.unranked == ""
    assert _undefined_everywhere(mocha)  # its card is listed on the site, with why
    unrun = card_of(pd.DataFrame(columns=["method_label", "dataset_label"]), "method.ditto", kind="method", battery_version=5,
                    scale="smoke", levels=[0.1], missing=[])
    assert not _undefined_everywhere(unrun)  # nothing run and nothing undefined: not listed
