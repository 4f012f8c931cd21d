"""Stateful components and new round inputs from outside the source tree (issue 54's promise): a plugin package adds,
without editing fedarena, a defense with its own server-held clean data (a round input it registers, FLTrust-like),
a defense with per-device state and a metric at each evaluation, and an attack with state it adapts every round.
Each runs in process and through ``fedarena bench run`` on Ray workers, and a run interrupted and resumed from its
checkpoint ends where the uninterrupted one does."""

import math
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from resume import run_interrupted
from test_plugins import bench_suite_file, write_package

import fedarena
from fedarena import plugins
from fedarena.config import ExperimentConfig
from fedarena.contracts import load_checked
from fedarena.errors import ConfigError
from fedarena.methods.aggregators.base import AGGREGATORS
from fedarena.round_inputs import INPUTS
from fedarena.simulation.engine import round_draw, simulate
from fedarena.simulation.setup import build_trial

PACKAGE = {
    "__init__.py": "from . import holdout, reputation, adaptive_flip  # noqa: F401\n",
    "holdout.py": '''
        import numpy as np
        import torch
        from fedarena import aggregator, check_updates, round_input


        def holdout_set(trial):
            """The server's own clean samples: ``size`` rows of the benign devices' validation data, drawn once."""
            val, size = trial.val, int(trial.aggregate.params["size"])
            benign = np.flatnonzero(~np.asarray(trial.threat.malicious)[val.owner.cpu().numpy()])
            rows = np.random.default_rng([trial.cfg.seed, 7]).choice(benign, size=min(size, len(benign)), replace=False)
            rows = torch.as_tensor(rows, device=val.x.device)
            return val.x[rows], val.y[rows]


        @round_input("holdout_update", prepare=holdout_set, device_reads=("device_data",),
                     stand_in=lambda updates: updates.mean(0))
        def holdout_update(view):
            """The server's update on its holdout set, from the round's global model (its own minibatch draws)."""
            x, y = view.prepared
            return view.train(x, y, int(view.rng().integers(2**62)))


        @aggregator("holdout_trust", reads=("round", "holdout_update"))
        def holdout_trust(updates, *, weights, losses, f, size: int = 30, round=None):
            """The mean of the updates with a positive cosine to the server's own update; that update if none has."""
            check_updates(updates, f)
            g0 = round.input("holdout_update").to(updates)
            cos = updates @ g0 / (updates.norm(dim=1) * g0.norm()).clamp_min(1e-12)
            keep = cos > 0
            return updates[keep].mean(0) if bool(keep.any()) else g0
    ''',
    "reputation.py": '''
        import torch
        from fedarena import aggregator, check_updates, client_table

        KEY = "reputation"


        def mean_reputation(trial, state, *, decay):
            """The devices' mean reputation so far (a metric at each evaluation, from the run's state)."""
            table = state.server.get(KEY)
            return {"mean_reputation": float("nan") if table is None else float(table.mean())}


        @aggregator("reputation", reads=("round",), per_client=True, certify=mean_reputation,
                    reports={"mean_reputation": True})
        def reputation(updates, *, weights, losses, f, decay: float = 0.5, round=None):
            """Each device's reputation, an exponential average (``decay``) of its update's cosine with the round's
            coordinate-wise median, kept across rounds; the mean weighted by the positive reputations."""
            n = check_updates(updates, f)
            ids = torch.arange(n) if round is None or round.ids is None else round.ids
            server = {} if round is None or round.server is None else round.server
            ids = ids.to(updates.device).long()
            table = client_table(server, KEY, int(ids.max()) + 1, (), 1.0, updates)
            centre = updates.median(dim=0).values
            cos = updates @ centre / (updates.norm(dim=1) * centre.norm()).clamp_min(1e-12)
            table = table.clone()
            table[ids] = decay * table[ids] + (1 - decay) * cos
            server[KEY] = table
            trust = table[ids].clamp_min(0)
            return (trust / trust.sum()) @ updates if bool(trust.sum() > 0) else centre
    ''',
    "adaptive_flip.py": '''
        import torch
        from fedarena import Effect, attack

        TARGET = "target"


        def adapt(state, view, gen):
            """Before a round with an attacker: the class the global model gets most right on the attackers' own
            data becomes the label they train on (state kept across rounds)."""
            with torch.no_grad():
                right = view.model.forward(view.w, view.x).argmax(-1) == view.y
            classes = int(view.y.max()) + 1
            hits = torch.zeros(classes).index_add_(0, view.y.cpu(), right.float().cpu())
            return {**state, TARGET: hits.argmax().reshape(1)}


        def corrupt(x, y, owner, bad, gen, *, state):
            """The attackers' samples relabelled to the adapted class (class 0 before the first adaptation)."""
            target = int(state.get(TARGET, torch.zeros(1, dtype=torch.long))[0])
            y = y.clone()
            y[bad] = target
            return x, y


        @attack("adaptive_flip", device_reads=())
        def adaptive_flip(dataset, malicious, rng):
            """Label flipping to a class chosen anew every round from the global model (a test attack)."""
            return Effect(dataset, corrupt=corrupt, adapt=adapt)
    ''',
}
BASE = {"dataset": {"name": "digits", "num_clients": 10}, "model": {"name": "mlp", "hidden": [16]}, "rounds": 6,
        "eval_every": 2, "clients_per_round": 5, "local_steps": 2, "batch_size": 16, "lr": 0.2, "seed": 1}
ROWS = {"holdout_trust": {"aggregator": {"name": "holdout_trust", "size": 20}},
        "reputation": {"aggregator": {"name": "reputation"}}}
ATTACK = {"name": "adaptive_flip", "level": 0.3}


def write_stateful(root: Path) -> Path:
    return write_package(root, "statefulfl", PACKAGE)


@pytest.fixture
def loaded(tmp_path):
    """The plugin, loaded in this process with its contract checked; unloaded after the test."""
    load_checked([write_stateful(tmp_path / "plugins")], entry_points=False)
    yield
    for source in list(plugins.loaded()):
        plugins.unload(source)


def same(a, b) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def config(row: str) -> ExperimentConfig:
    return ExperimentConfig.from_dict({**BASE, **ROWS[row], "attack": ATTACK})


@pytest.mark.parametrize("row", sorted(ROWS))
def test_a_resumed_run_of_the_plugins_ends_where_the_uninterrupted_one_does(loaded, tmp_path, row):
    trial = build_trial(config(row))
    straight, _ = simulate(trial)
    _, loaded_state, resumed = run_interrupted(config(row), 3, tmp_path)
    assert loaded_state.round == 3 and torch.equal(resumed.w, straight.w)
    last, again = straight.history[-1], resumed.history[-1]
    assert last.keys() == again.keys() and all(same(last[k], again[k]) for k in last)
    # the attack adapted its state every round, and kept it in the checkpoint
    assert set(loaded_state.attack) == {"target"} and torch.equal(resumed.attack["target"], straight.attack["target"])
    if row == "reputation":  # per-device state in the server's part, and the metric it reports at each evaluation
        assert resumed.server["reputation"].shape == (10,)
        assert torch.equal(resumed.server["reputation"], straight.server["reputation"])
        values = [entry["mean_reputation"] for entry in straight.history]
        assert len(values) == 3 and all(math.isfinite(v) for v in values) and len(set(values)) > 1


def test_the_plugins_input_is_prepared_once_and_computed_each_round_from_its_own_stream(loaded):
    trial = build_trial(config("holdout_trust"))
    x, y = trial.prepared["holdout_update"]
    assert trial.inputs == ("holdout_update",) and len(y) == 20 and x.shape[0] == 20
    first, again = (round_draw(trial, torch.arange(5).numpy(), 0, model=trial.w0).input("holdout_update")
                    for _ in range(2))
    later = round_draw(trial, torch.arange(5).numpy(), 1, model=trial.w0).input("holdout_update")
    assert torch.equal(first, again) and not torch.equal(first, later)  # keyed by round: another minibatch plan


def plugin(tmp_path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(text).lstrip())
    return path


@pytest.fixture
def unload():
    yield
    for source in list(plugins.loaded()):
        plugins.unload(source)


def test_a_plugin_rule_reads_deepsights_probe_a_legacy_one_the_model_and_a_pre_aggregator_its_input(tmp_path, unload):
    path = plugin(tmp_path, "readers", '''
        import torch
        from fedarena import aggregator, pre_aggregator

        SEEN = {}

        @aggregator("probe_reader", reads=("round", "model", "probe"))
        def probe_reader(updates, *, weights, losses, f, round=None):
            SEEN["probe"] = round.input("probe").probabilities(round.input("model").to(updates), 0, 8).shape
            return updates.mean(0)

        @aggregator("legacy_reader", needs_round=True)  # the flag of before reads: the draw gave the model then
        def legacy_reader(updates, *, weights, losses, f, round=None):
            SEEN["legacy"] = round.model.shape
            return updates.mean(0)

        @pre_aggregator("model_pre", inputs=("model",))
        def model_pre(updates, *, round=None):
            SEEN["pre"] = round.input("model").shape
            return updates
    ''')
    load_checked([path], entry_points=False)  # no stand-in for the probe: checked for feasibility, run in a trial
    for section in ({"name": "probe_reader"}, {"name": "legacy_reader"}, {"name": "mean", "pre": ["model_pre"]}):
        simulate(build_trial(ExperimentConfig.from_dict({**BASE, "rounds": 1, "aggregator": section})))
    seen = sys.modules[plugins.loaded()[0].module].SEEN
    dim = build_trial(ExperimentConfig.from_dict(BASE)).w0.numel()
    assert seen == {"probe": (8, 10), "legacy": (dim,), "pre": (dim,)}


def test_a_plugin_inputs_edit_or_a_built_in_inputs_version_changes_the_identity(tmp_path, unload, monkeypatch):
    from fedarena.simulation.identity import trial_identity
    fltrust = ExperimentConfig.from_dict({**BASE, "aggregator": {"name": "fltrust"}})
    before = trial_identity(fltrust).config_hash
    monkeypatch.setitem(INPUTS._versions, "root_update", 2)  # a changed provider bumps its version
    bumped = trial_identity(fltrust)
    assert bumped.config_hash != before and bumped.versions["round_input/root_update"] == 2
    hashes = []
    for sign in ("", "-"):
        folder = tmp_path / f"v{len(hashes)}"
        folder.mkdir()
        plugin(folder, "own_input", f'''
            from fedarena import aggregator, round_input

            @round_input("own_update", stand_in=lambda updates: updates.mean(0))
            def own_update(view):
                return {sign}view.model

            @aggregator("own_rule", reads=("round", "own_update"))
            def own_rule(updates, *, weights, losses, f, round=None):
                return updates.mean(0)
        ''')
        load_checked([folder / "own_input.py"], entry_points=False)
        hashes.append(trial_identity(ExperimentConfig.from_dict({**BASE, "aggregator": {"name": "own_rule"}})))
        for source in list(plugins.loaded()):
            plugins.unload(source)
    assert hashes[0].config_hash != hashes[1].config_hash  # the input's source is part of the rule's trials
    assert all(str(h.versions["round_input/own_update"]).startswith("1+src:") for h in hashes)


def test_a_plugin_inputs_failing_prepare_is_one_line_naming_it(tmp_path, unload):
    path = plugin(tmp_path, "bad_prepare", '''
        from fedarena import aggregator, round_input

        def broken(trial):
            raise ValueError("no holdout here")

        @round_input("broken_input", prepare=broken, stand_in=lambda updates: updates.mean(0))
        def broken_input(view):
            return view.model

        @aggregator("broken_reader", reads=("round", "broken_input"))
        def broken_reader(updates, *, weights, losses, f, round=None):
            return updates.mean(0)
    ''')
    load_checked([path], entry_points=False)
    with pytest.raises(ConfigError) as err:
        build_trial(ExperimentConfig.from_dict({**BASE, "aggregator": {"name": "broken_reader"}}))
    assert str(err.value) == (f"round input 'broken_input' (plugin {path}) failed to prepare: ValueError: no holdout "
                              "here")


def test_a_rule_reading_the_round_without_taking_it_is_refused_where_it_registers():
    with pytest.raises(ConfigError, match="reads round, model but takes no 'round' keyword"):
        fedarena.aggregator("roundless", reads=("round", "model"))(lambda updates, *, weights, losses, f: updates[0])
    assert "roundless" not in AGGREGATORS


SUITE = {
    "name": "statefulsuite",
    "include": ["plugins/statefulfl"],
    "methods": [{"label": row, **section} for row, section in ROWS.items()],
    "attacks": [{"label": "clean", "attack": {"name": "none"}, "levels": [0.0]},
                {"label": "adaptive_flip", "attack": {"name": "adaptive_flip"}, "levels": [0.3]}],
    "scales": {"smoke": {"fixed": {k: v for k, v in BASE.items() if k not in ("dataset", "seed")},
                         "datasets": [{"label": "digits", "dataset": BASE["dataset"]}], "seeds": [1]}},
}


@pytest.mark.integration  # `fedarena bench run` as a process: Ray workers import the plugin from the suite's include
def test_bench_run_on_ray_workers_runs_the_stateful_plugins(tmp_path):
    write_stateful(tmp_path / "plugins")
    done, uri, _ = bench_suite_file(tmp_path, SUITE)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "done: 4 finished, 0 failed" in done.stdout, done.stdout
    frame = fedarena.runs("statefulsuite", tracking_uri=uri)
    assert len(frame) == 4 and set(frame["status"]) == {"FINISHED"}
    reputation = frame[frame["method_label"] == "reputation"]
    assert reputation["mean_reputation"].between(-1, 1).all()
