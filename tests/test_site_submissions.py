"""``fedarena.site`` end to end at the smoke scale: two built-in rules' cards in the store, and submissions rerun
through the battery in their own processes: an honest plugin with its card (verified), one whose card claims more
than it measures (unverified, with the differing cells), one that fails to load (rejected with its reason), one
that sleeps forever (rejected at its time limit). Two builds give identical bytes; ``leaderboard.json`` validates
against its schema and an entry's numbers are its card's."""

import json
import shutil

import jsonschema
import pytest
import yaml

import fedarena
from fedarena import cli
from fedarena.tracking.reading import read_runs
from fedarena.website import publish
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
    inflated = json.loads(json.dumps(honest))
    inflated["clean_acc"] = min(1.0, honest["clean_acc"] + 0.2)
    inflated["worst"]["0.2"]["acc"] += 0.25
    subs = root / "submissions"
    submission(subs / "honest", honest, name=HOSTILE_NAME, authors=[HOSTILE_AUTHOR], claims={"clean_acc": 0.99})
    submission(subs / "inflated", inflated, name="Shrunk mean, claimed higher")
    submission(subs / "broken", honest, name="Broken", plugin="import a_module_that_does_not_exist\n")
    limits = Limits(seconds=300, memory_mib=6144, num_cpus=1, jobs=2)
    args = {"scale": "smoke", "submissions": subs, "tracking_uri": uri, "work": root / "work", "limits": limits,
            "emit": lambda text: None}
    first = fedarena.site(out=root / "site", **args)
    files = {p.relative_to(root / "site"): p.read_bytes() for p in sorted((root / "site").rglob("*")) if p.is_file()}
    again = fedarena.site(out=root / "again", **args)
    return root, first, again, files, honest


def test_the_honest_submission_is_verified_the_inflated_unverified_the_broken_rejected(built):
    root, summary, _, _, honest = built
    status = {e.slug: e for e in summary.entries}
    # MOCHA too: the battery cannot run it on the MLP at any level, listed with why whatever the store holds
    assert set(status) == {"aggregator.median", "aggregator.mean", "method.mocha", "submission-honest",
                           "submission-inflated", "submission-broken"}
    assert "defined for model 'svm'" in status["method.mocha"].card.worst["0.1"]["undefined"]
    assert status["aggregator.median"].status == "built-in" and status["aggregator.mean"].status == "built-in"
    assert status["submission-honest"].status == "verified" and status["submission-honest"].differing == []
    inflated = status["submission-inflated"]
    assert inflated.status == "unverified"
    assert {d["cell"] for d in inflated.differing} == {"clean_acc", "worst@0.2 acc"}
    assert all(d["why"] == "outside the rerun's interval" for d in inflated.differing)
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
    assert out.startswith("contract: rejected (fedarena evaluate failed (exit 2): plugin shrunk.py: aggregator ")
    assert "breaks the aggregator contract" in out


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
    monkeypatch.setattr(publish, "battery_version", lambda: 6)
    publish.write_site(site, [], "smoke")
    assert (site / "smoke" / "v5" / "index.html").is_file()
    assert (site / "smoke" / "v5" / "entries" / "submission-honest.html").is_file()
    assert json.loads((site / "smoke" / "leaderboard.json").read_text())["battery_version"] == 6
    assert 'href="v5/index.html"' in (site / "smoke" / "index.html").read_text()
