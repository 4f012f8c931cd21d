"""Submitted rules through real trials (``fedarena.run``), isolated and not: what a rule can find of the ground
truth, what it gets of a round, its state across rounds and a resume, and what an isolated submission may not
register. Each cheating rule is also run in-process, where it does find the ground truth (its numbers move):
the test fails when the isolation is switched off."""

import socket
import threading

import pytest
import torch
from hostile_plugins import plugin, require_sandbox

import fedarena
from fedarena.errors import ConfigError
from fedarena.isolation import load_isolated, unload_isolated
from fedarena.methods.aggregators.base import AGGREGATORS

pytestmark = pytest.mark.integration  # real processes: bubblewrap

CONFIG = {"dataset": {"name": "digits", "num_clients": 10}, "model": {"name": "mlp", "hidden": [16]},
          "clients_per_round": 5, "attack": {"name": "sign_flip", "level": 0.2}, "rounds": 3}


@pytest.fixture(scope="module", autouse=True)
def sandbox():
    require_sandbox()
    yield
    unload_isolated()


def write(tmp_path_factory, kind: str, name: str, **paths):
    path = tmp_path_factory.mktemp(name) / f"{name}.py"
    path.write_text(plugin(kind, name, **paths))
    return path


def final(rule: str, **more) -> dict:
    """The run's final metrics, NaN (no targeted attack) as None so that two runs compare with ==."""
    config = {**CONFIG, "aggregator": {"name": rule}, **more}
    return {k: None if v != v else v for k, v in fedarena.run(config).final.items()}


@pytest.fixture(scope="module")
def isolated(tmp_path_factory):
    """The honest rule and both oracles, isolated (one sandbox each)."""
    names = {}
    for kind in ("honest", "oracle_stack", "oracle_redraw"):
        names[kind] = f"{kind}_isolated"
        load_isolated([write(tmp_path_factory, kind, names[kind])], secret=b"test-secret")
    return names


def test_an_isolated_rule_carries_its_identity_and_reproduces(isolated):
    assert str(AGGREGATORS.version(isolated["honest"])).endswith("+isolated")
    first, again = final(isolated["honest"]), final(isolated["honest"])
    assert first["acc_pooled"] == again["acc_pooled"] and first["acc_mean"] == again["acc_mean"]


def test_an_isolated_rule_computes_what_it_computes_in_process(isolated, tmp_path_factory):
    fedarena.load_plugins([write(tmp_path_factory, "honest", "honest_inproc")])
    inside, outside = final(isolated["honest"]), final("honest_inproc")
    assert inside["acc_pooled"] == pytest.approx(outside["acc_pooled"], abs=0.01)  # rows in another order


@pytest.mark.parametrize("kind", ["oracle_stack", "oracle_redraw"])
def test_an_oracle_finds_the_malicious_devices_in_process_and_nothing_isolated(isolated, kind, tmp_path_factory):
    fedarena.load_plugins([write(tmp_path_factory, kind, f"{kind}_inproc")])
    fedarena.load_plugins([write(tmp_path_factory, "honest", f"honest_for_{kind}")])
    assert final(f"{kind}_inproc") != final(f"honest_for_{kind}")  # in-process, it found them
    honest, oracle = final(isolated["honest"]), final(isolated[kind])
    assert oracle == honest  # isolated, it is the plain mean: it found nothing


def test_reaching_the_builders_files_and_environment_works_in_process_only(tmp_path_factory, monkeypatch):
    root = tmp_path_factory.mktemp("builder")
    store, site = root / "mlflow.db", root / "site"
    store.write_bytes(b"runs")
    site.mkdir()
    (site / "index.html").write_text("the site")
    monkeypatch.setenv("FEDARENA_TEST_SECRET", "s3cret")
    paths = {"store": str(store), "site": str(site)}
    load_isolated([write(tmp_path_factory, "reader", "reader_isolated", **paths)], secret=b"test-secret")
    load_isolated([write(tmp_path_factory, "honest", "honest_for_reader")], secret=b"test-secret")
    assert final("reader_isolated") == final("honest_for_reader")
    assert (site / "index.html").read_text() == "the site" and store.read_bytes() == b"runs"
    fedarena.load_plugins([write(tmp_path_factory, "reader", "reader_inproc", **paths)])
    fedarena.load_plugins([write(tmp_path_factory, "honest", "honest_for_reader_inproc")])
    assert final("reader_inproc") != final("honest_for_reader_inproc")
    assert (site / "index.html").read_text() == "defaced"


def test_a_socket_reaches_the_builder_in_process_only(tmp_path_factory):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.5)
    heard = []

    def listen():
        while True:
            try:
                conn, _ = server.accept()
                heard.append(conn.recv(16))
                conn.close()
            except TimeoutError:
                continue
            except OSError:
                return

    threading.Thread(target=listen, daemon=True).start()
    port = server.getsockname()[1]
    try:
        load_isolated([write(tmp_path_factory, "socket", "socket_isolated", port=port)], secret=b"test-secret")
        final("socket_isolated")
        assert heard == []
        fedarena.load_plugins([write(tmp_path_factory, "socket", "socket_inproc", port=port)])
        final("socket_inproc")
        assert heard and heard[0] == b"rows"
    finally:
        server.close()


STATEFUL = '''
import torch
from fedarena import aggregator, check_updates


@aggregator("{name}", reads=("round",))
def rule(updates, *, weights, losses, f, round):
    """The mean scaled by the count of its calls, which it keeps in its server state (a stateful rule)."""
    check_updates(updates, f)
    count = round.server.get("count", torch.zeros(1, dtype=torch.float64)) + 1
    round.server["count"] = count
    round.server["last_ids"] = round.ids.clone()
    return updates.mean(0) * (1.0 + 1e-2 * float(count))
'''


def test_a_stateful_rule_resumes_to_the_uninterrupted_numbers(tmp_path):
    from resume import attacked_digits_config, run_interrupted

    from fedarena.config import ExperimentConfig
    from fedarena.simulation.engine import simulate
    from fedarena.simulation.setup import build_trial

    path = tmp_path / "stateful.py"
    path.write_text(STATEFUL.format(name="stateful_isolated"))
    load_isolated([path], secret=b"test-secret")
    config = attacked_digits_config({"name": "sign_flip", "level": 0.2}, 5).to_dict()
    config = ExperimentConfig.from_dict({**config, "aggregator": {"name": "stateful_isolated"}})
    whole = simulate(build_trial(config))[0]
    (tmp_path / "checkpoint").mkdir()
    _, _, resumed = run_interrupted(config, 2, tmp_path / "checkpoint")
    assert float(whole.server["isolated:stateful_isolated:count"]) == 5.0
    assert torch.equal(resumed.w, whole.w)
    assert torch.equal(resumed.server["isolated:stateful_isolated:count"], whole.server["isolated:stateful_isolated:count"])
    shown = whole.server["isolated:stateful_isolated:last_ids"]
    assert sorted(shown.tolist()) == shown.tolist() and int(shown.max()) < 10  # pseudonyms, in the rows' order


def test_pseudonyms_are_a_keyed_permutation_and_the_rows_follow_them():
    from fedarena.isolation.pseudonyms import Pseudonyms, trial_key

    names = Pseudonyms(trial_key(b"secret", {"seed": 0}), 10)
    table = names.table(10)
    assert sorted(table.tolist()) == list(range(10)) and table.tolist() != list(range(10))
    assert torch.equal(table, Pseudonyms(trial_key(b"secret", {"seed": 0}), 10).table(10))  # reproducible
    assert not torch.equal(table, Pseudonyms(trial_key(b"other", {"seed": 0}), 10).table(10))  # the key decides
    assert not torch.equal(table, Pseudonyms(trial_key(b"secret", {"seed": 1}), 10).table(10))  # per trial
    assert names.seed(7) != 7 and names.seed(7) == names.seed(7) and names.seed(7) != names.seed(8)
    rows, pseudo = names.arrange(torch.tensor([1, 4, 6]), 3)
    assert pseudo.tolist() == sorted(table[[1, 4, 6]].tolist())  # the rows sorted by pseudonym
    assert torch.equal(table[torch.tensor([1, 4, 6])[rows]], pseudo)


@pytest.mark.parametrize("source, why", [
    ("from fedarena import aggregator, attack, Effect\n@aggregator('both_a')\ndef r(u, *, weights, losses, f):\n"
     "    return u.mean(0)\n@attack('both_b')\ndef b(dataset, malicious, rng):\n    return Effect(dataset)\n",
     "registers aggregators only; it also registers attack 'both_b'"),
    ("from fedarena import aggregator, round_input\n@round_input('peek')\ndef peek(view):\n    return view.trial\n"
     "@aggregator('peeker', reads=('round', 'peek'))\ndef r(u, *, weights, losses, f, round):\n    return u.mean(0)\n",
     "round inputs of its own"),
    ("from fedarena import aggregator\n@aggregator('prober', reads=('round', 'probe'))\n"
     "def r(u, *, weights, losses, f, round):\n    return u.mean(0)\n", "reads probe"),
    ("x = 1\n", "registers no aggregator"),
])
def test_what_an_isolated_submission_may_not_register_is_one_line(tmp_path, source, why):
    path = tmp_path / "refused.py"
    path.write_text(source)
    with pytest.raises(ConfigError, match=why):
        load_isolated([path], secret=b"test-secret")


def test_selection_comes_back_in_the_trials_row_order(tmp_path):
    path = tmp_path / "picker.py"
    path.write_text("import torch\nfrom fedarena import aggregator\n\n"
                    "def smallest(u, *, f, round):\n    return torch.argsort(u.norm(dim=1))[:1]\n\n"
                    "@aggregator('picker', reads=('round',), selects=smallest)\n"
                    "def picker(u, *, weights, losses, f, round):\n    return u[smallest(u, f=f, round=round)[0]]\n")
    load_isolated([path], secret=b"test-secret")
    from fedarena.methods.aggregators.base import RoundDraw
    from fedarena.methods.aggregators.builder import make_aggregator

    updates = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
    updates[3] *= 0.01  # the smallest row, wherever the pseudonyms put it
    rule = make_aggregator({"name": "picker"}, f=1).for_round(RoundDraw(torch.arange(6), 5, torch.arange(6), {}, {}))
    assert rule.kept(updates).tolist() == [False, False, False, True, False, False]
    assert torch.equal(rule(updates, torch.ones(6)), updates[3])
