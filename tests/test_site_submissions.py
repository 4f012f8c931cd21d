"""``fedarena.site`` end to end at the smoke scale: two built-in rules' cards in the store, and submissions rerun
through the battery in their own processes, each rule isolated (``evaluate --isolate``, real bubblewrap): an honest
plugin with its card (verified), one whose card claims more than it measures on every seed (unverified, with the
differing cells), one that writes its own card and exits on import (not verified: its import runs in the sandbox),
one that fails to load (rejected with its reason), one that sleeps forever (rejected at its time limit). Two builds
give identical bytes; ``leaderboard.json`` validates against its schema and an entry's numbers are its card's."""

import json
import shutil

import jsonschema
import pytest
import yaml

import fedarena
from fedarena import cli
from fedarena.tracking.reading import read_runs
from fedarena.website import output
from fedarena.website.entries import schema
from fedarena.website.verification import Limits

pytestmark = pytest.mark.integration  # real processes: Ray, a subprocess per submission

PLUGIN = '''
from fedarena import aggregator, check_updates


@aggregator("shrunk_mean")
def shrunk_mean(updates, *, weights, losses, f, factor: float = 0.5):
    """The mean scaled by ``factor`` (a test rule)."""
    check_updates(updates, f)
    return factor * updates.mean(0)
'''
HOSTILE_NAME, HOSTILE_AUTHOR = "<script>window.__pwned = 1</script>", '<img src=x onerror="window.__pwned = 2">'


def submission(folder, card, *, name, plugin=PLUGIN, claims=None, paper="https://example.org/shrunk", authors=None):
    folder.mkdir(parents=True)
    (folder / "shrunk.py").write_text(plugin)
    (folder / "card.json").write_text(json.dumps(card))
    meta = {"name": name, "component": "aggregator.shrunk_mean", "settings": {"factor": 0.8},
            "authors": authors or ["A. Author"], "paper": paper, **({"claims": claims} if claims else {})}
    (folder / "submission.yaml").write_text(yaml.safe_dump(meta))


@pytest.fixture(scope="module")
def built(ray_cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("site")
    quiet = {"scale": "smoke", "storage": root / "ray", "emit": lambda text: None}
    uri = f"sqlite:///{root}/mlflow.db"
    for rule in ("median", "mean"):  # the two built-in rows of the site's store
        fedarena.evaluate(rule, tracking_uri=uri, **quiet)
    plugin = root / "authors" / "shrunk.py"
    plugin.parent.mkdir()
    plugin.write_text(PLUGIN)
    (card,) = fedarena.evaluate("shrunk_mean", include=[plugin], settings={"factor": 0.8},
                                tracking_uri=f"sqlite:///{root}/authors/mlflow.db", **quiet)  # the authors' own store
    honest = card.to_json()
    subs = root / "submissions"
    submission(subs / "honest", honest, name=HOSTILE_NAME, authors=[HOSTILE_AUTHOR], claims={"clean_acc": 0.99})
    submission(subs / "inflated", inflated(honest), name="Shrunk mean, claimed higher")
    submission(subs / "forged", inflated(honest), name="Forged", plugin=forging(inflated(honest)))
    submission(subs / "broken", honest, name="Broken", plugin="import a_module_that_does_not_exist\n")
    limits = Limits(seconds=900, memory_mib=6144, num_cpus=1, jobs=2)  # a rule isolated: a sandbox per trial
    args = {"scale": "smoke", "submissions": subs, "tracking_uri": uri, "work": root / "work", "limits": limits,
            "emit": lambda text: None}
    first = fedarena.site(out=root / "site", **args)
    files = {p.relative_to(root / "site"): p.read_bytes() for p in sorted((root / "site").rglob("*")) if p.is_file()}
    again = fedarena.site(out=root / "again", **args)
    return root, first, again, files, honest


def inflated(honest: dict) -> dict:
    """The honest card with its clean accuracy raised by .2 and its worst case at 20% by .25, on every seed."""
    card = json.loads(json.dumps(honest))
    card["clean_acc"] = min(1.0, honest["clean_acc"] + 0.2)
    card["worst"]["0.2"]["acc"] += 0.25
    worst = f"{honest['worst']['0.2']['attack']}@0.2"
    for cell in card["grid"]:
        up = {"clean": 0.2, worst: 0.25}.get(cell["setting"], 0.0)
        cell["acc_pooled"] = [v + up for v in cell["acc_pooled"]]
    return card


def forging(card: dict) -> str:
    """A plugin that, on import, writes ``card`` where ``fedarena evaluate --out card`` would and ends its process."""
    return (f"import os\nos.makedirs('card', exist_ok=True)\nopen('card/card.json', 'w').write({json.dumps(json.dumps(card))})"
            f"\nos._exit(0)\n" + PLUGIN)


def test_the_honest_submission_is_verified_the_inflated_unverified_the_broken_rejected(built):
    root, summary, _, _, honest = built
    status = {e.slug: e for e in summary.entries}
    # MOCHA too: the battery cannot run it on the MLP at any level, listed with why whatever the store holds
    assert set(status) == {"aggregator.median", "aggregator.mean", "method.mocha", "submission-honest",
                           "submission-inflated", "submission-broken", "submission-forged"}
    assert "defined for model 'svm'" in status["method.mocha"].card.worst["0.1"]["undefined"]
    assert status["aggregator.median"].status == "built-in" and status["aggregator.mean"].status == "built-in"
    assert status["submission-honest"].status == "verified", status["submission-honest"].reason
    assert status["submission-honest"].differing == []
    assert status["submission-honest"].checks == {"isolated": True, "sandboxed": True, "reproduced": True,
                                                  "reviewed": None, "tolerance": 0.01}
    inflated = status["submission-inflated"]
    worst = f"{honest['worst']['0.2']['attack']}@0.2 acc_pooled"
    assert inflated.status == "unverified", inflated.reason
    assert inflated.checks["reproduced"] is False
    assert {(d["cell"], d["dataset"], d["seed"]) for d in inflated.differing} == {
        (cell, "digits", 0) for cell in ("clean_acc", "worst@0.2 acc", worst)}
    assert all(d["why"] == "differs from the rerun by more than 0.01" for d in inflated.differing)
    forged = status["submission-forged"]  # its import ran in the rule's sandbox: no card of its own, no exit 0 here
    assert forged.status not in ("verified", "verified (reviewed)", "reproduced (not isolated)"), forged
    broken = status["submission-broken"]
    assert broken.status == "rejected" and "No module named 'a_module_that_does_not_exist'" in broken.reason
    assert "shrunk.py" in broken.reason and str(root) not in broken.reason  # no path of the building machine
    # the rerun's numbers are the authors' (same machine, same backend), ranked among the two built-in rows
    assert status["submission-honest"].card.clean_acc == pytest.approx(honest["clean_acc"], abs=1e-6)
    assert all(status["submission-honest"].card.ranked_among[lv] == 3 for lv in status["submission-honest"].card.rank
               if status["submission-honest"].card.rank[lv] is not None)
    index = (root / "site" / "smoke" / "index.html").read_text()
    assert "submission-honest.html" in index and "status-verified" in index and "status-unverified" in index
    assert "No module named" in index


def test_two_builds_give_identical_bytes_and_reuse_the_reruns(built):
    root, _, again, files, _ = built
    rebuilt = {p.relative_to(root / "again"): p.read_bytes() for p in sorted((root / "again").rglob("*")) if p.is_file()}
    assert rebuilt == files
    assert {e.slug: e.status for e in again.entries}["submission-honest"] == "verified"
    log = (root / "work" / "submission-honest" / "evaluate.log").read_text()
    assert "50 already finished" in log  # the second build trained nothing for it


def test_leaderboard_json_validates_and_an_entry_holds_its_cards_numbers(built):
    root, summary, _, _, honest = built
    data = json.loads((root / "site" / "smoke" / "leaderboard.json").read_text())
    jsonschema.validate(data, schema())
    by = {e["entry"]: e for e in data["entries"]}
    card = {e.slug: e for e in summary.entries}["aggregator.median"].card.to_json()
    assert {k: by["aggregator.median"][k] for k in card} == card
    assert by["submission-honest"]["clean_acc"] == pytest.approx(honest["clean_acc"], abs=1e-6)
    costs = by["aggregator.median"]["costs"]  # as the runs recorded them (smoke: digits' 64-16-10 MLP, float32)
    assert costs["bytes_received"] == costs["bytes_sent"] == 4 * (64 * 16 + 16 + 16 * 10 + 10) and costs["server_ms"] > 0
    assert costs["attacks"]["a1@0.1"]["attack_forward"] == 0 and costs["attacks"]["a3fl@0.1"]["attack_forward"] > 0
    assert costs["recorded_runs"] == costs["runs"]
    assert 'id="costs"' in (root / "site" / "smoke" / "entries" / "aggregator.median.html").read_text()
    assert by["submission-broken"]["status"] == "rejected" and "clean_acc" not in by["submission-broken"]
    claim = by["submission-honest"]["claims"][0]
    assert claim["setting"] == "clean" and claim["in_interval"] is False and claim["difference"] < 0
    broken = json.loads(json.dumps(data))
    broken["entries"][0]["status"] = "approved"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema())


def test_hostile_names_reach_the_pages_as_text(built):
    root = built[0]
    for page in ("index.html", "entries/submission-honest.html"):
        text = (root / "site" / "smoke" / page).read_text()
        assert HOSTILE_NAME not in text and "<img src=x" not in text
        assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in text or page == "index.html"
    assert "&lt;img src=x onerror=&quot;window.__pwned = 2&quot;&gt;" in (
        root / "site" / "smoke" / "entries" / "submission-honest.html").read_text()


def test_the_submissions_wrote_nothing_into_the_sites_store(built):
    root = built[0]
    labels = set(read_runs(f"sqlite:///{root}/mlflow.db", "battery")["method_label"])
    assert labels == {"aggregator.median", "aggregator.mean"}  # each submission's runs are in its own store
    assert (root / "work" / "submission-honest" / "mlflow.db").is_file()


BREAKS_ITS_CONTRACT = """
from fedarena import aggregator


@aggregator("shrunk_mean")
def shrunk_mean(updates, *, weights, losses, f, factor: float = 0.5):
    return updates[:, :1]  # not a vector of the updates' dimension
"""


def test_verify_reruns_one_submission_and_says_why_it_is_rejected(tmp_path, capsys):
    card = {"component": "aggregator.shrunk_mean+factor0.8", "battery_version": 5, "scale": "smoke"}
    submission(tmp_path / "contract", card, name="Contract", plugin=BREAKS_ITS_CONTRACT)
    assert cli.main(["site", "--verify", str(tmp_path / "contract")]) == 1  # its scale read from its card
    out = capsys.readouterr().out
    assert out.startswith("contract: rejected (fedarena evaluate failed (exit 2): plugin shrunk.py: aggregator "
                          "'shrunk_mean' ")
    assert "an aggregator returns one vector of length" in out  # its isolated rule's answer, checked here


def test_a_submission_that_sleeps_forever_is_rejected_at_its_limit(tmp_path):
    subs = tmp_path / "submissions"
    card = {"component": "aggregator.shrunk_mean+factor0.8", "battery_version": 5, "scale": "smoke"}
    submission(subs / "sleeper", card, name="Sleeper", plugin="import time\ntime.sleep(10 ** 6)\n" + PLUGIN)
    summary = fedarena.site(scale="smoke", out=tmp_path / "site", submissions=subs, tracking_uri=f"sqlite:///{tmp_path}/m.db",
                            work=tmp_path / "work", limits=Limits(seconds=6, memory_mib=4096), emit=lambda text: None)
    (entry,) = summary.entries
    assert entry.status == "rejected" and entry.reason == "stopped at its time limit of 6 s"
    assert not summary.builtin_found  # an empty store: submissions only, said
    assert "stopped at its time limit" in (tmp_path / "site" / "smoke" / "index.html").read_text()


def test_a_second_build_under_a_new_battery_version_archives_the_old_pages(built, tmp_path, monkeypatch):
    root = built[0]
    site = tmp_path / "site"
    shutil.copytree(root / "site", site)
    monkeypatch.setattr(output, "battery_version", lambda: 6)
    output.write_site(site, [], "smoke")
    assert (site / "smoke" / "v5" / "index.html").is_file()
    assert (site / "smoke" / "v5" / "entries" / "submission-honest.html").is_file()
    assert json.loads((site / "smoke" / "leaderboard.json").read_text())["battery_version"] == 6
    assert 'href="v5/index.html"' in (site / "smoke" / "index.html").read_text()


METHOD = '''
import os
from pathlib import Path

from fedarena import Method, method

for target in {targets!r}:  # the builder's files: out of a sandboxed method's reach
    try:
        Path(target).write_text("written by a submission")
    except OSError:
        pass
Path("environment.txt").write_text(repr(os.environ.get("FEDARENA_CANARY")))  # its cwd: its own work folder


@method("plain_avg")
class PlainAvg(Method):
    """FedAvg under another name (a test method)."""
'''


def test_a_method_runs_wholly_sandboxed_and_reaches_none_of_the_builders_files(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDARENA_CANARY", "the builder's secret")
    store, site = tmp_path / "store.db", tmp_path / "site"
    store.write_bytes(b"the builder's store")
    folder = tmp_path / "submissions" / "plain"
    folder.mkdir(parents=True)
    (folder / "plain.py").write_text(METHOD.format(targets=[str(store), str(tmp_path / "planted.txt")]))
    (folder / "submission.yaml").write_text(yaml.safe_dump({"name": "Plain", "component": "method.plain_avg"}))
    (folder / "card.json").write_text(json.dumps({"component": "method.plain_avg", "battery_version": 5, "scale": "smoke"}))
    summary = fedarena.site(scale="smoke", out=site, submissions=tmp_path / "submissions",
                            tracking_uri=f"sqlite:///{tmp_path}/m.db", work=tmp_path / "work",
                            limits=Limits(seconds=900, memory_mib=6144, num_cpus=1), emit=lambda text: None)
    (entry,) = summary.entries
    assert entry.status == "unverified", entry.reason  # ran to its card; its own card gave no per-seed values
    assert entry.checks["sandboxed"] is True and entry.checks["isolated"] is False and entry.not_isolated
    assert {d["why"] for d in entry.differing} == {"absent from the submitted card"}
    assert store.read_bytes() == b"the builder's store" and not (tmp_path / "planted.txt").exists()
    assert (tmp_path / "work" / "submission-plain" / "environment.txt").read_text() == "None"
    assert "not isolated" in (site / "smoke" / "index.html").read_text()
