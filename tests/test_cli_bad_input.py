"""A catalogue of bad input through the real command line: every option of every subcommand, bad YAML and
suite files, and an unknown name of every registry kind. Each must exit non-zero with one error line that
says what is allowed, and no traceback.

The catalogue runs in-process through ``fedarena.cli.main(argv)`` (the parser and error handling a user
gets; each case takes milliseconds instead of a 2-3 s interpreter start), and a handful of cases run as real
subprocesses of the installed ``fedarena`` command. ``test_every_option_has_a_case`` and
``test_every_registry_kind_has_a_case`` keep the catalogue complete as options and registries are added.
No case starts Ray, trains, downloads or starts the MLflow UI.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest
from local_ports import free_port

from fedarena import cli
from fedarena.attacks.base import ATTACKS
from fedarena.bench import commands as bench_commands
from fedarena.datasets.catalog import DATASETS
from fedarena.datasets.partition import PARTITIONERS
from fedarena.methods.aggregators.base import AGGREGATORS, PRE_AGGREGATORS
from fedarena.methods.base import METHODS
from fedarena.models.zoo import MODELS
from fedarena.privacy.base import ACCOUNTANT, PRIVACY
from fedarena.round_inputs import CORE, INPUTS
from fedarena.simulation.metrics import METRIC_DIRECTIONS
from fedarena.suites import SUITES
from fedarena.system.base import SYSTEMS

ROOT = Path(__file__).resolve().parents[1]
OUT = ("--out", "{T}/result.json")
DP = ("--privacy", "central", "--sampling", "uniform")
SMOKE = ("bench", "run", "smoke", "--scale", "smoke", "--dry-run", "--tracking-uri", "sqlite:///{T}/bench.db")
SUITE_BASE = """\
name: {name}
methods: [{{label: global, method: {{name: global}}}}]
attacks: [{{label: clean, attack: {{name: none}}, levels: [0.0]}}]
scales:
  smoke: {{fixed: {{rounds: 2, clients_per_round: 4}}, seeds: [0],
          datasets: [{{label: synthetic, dataset: {{name: synthetic, num_clients: 8}}}}]}}
  quick: {{seeds: [0], datasets: [{{label: synthetic, dataset: {{name: synthetic}}}}]}}
  paper: {{seeds: [0], datasets: [{{label: synthetic, dataset: {{name: synthetic}}}}]}}
"""
SUITE_EDITS = {  # suite file -> (text replaced, replacement) in SUITE_BASE
    "topkey": ("scales:", "nosuch: 1\nscales:"),
    "method_param": ("{name: global}", "{name: global, nosuch: 1}"),
    "select_metric": ("method: {name: global}}", "method: {name: global}, select: {by: nosuch, over: {lr: [0.1, 0.2]}}}"),
    "level": ("levels: [0.0]", "levels: [1.5]"),
    "seed": ("seeds: [0],", "seeds: [-1],"),
    "scale_key": ("smoke: {fixed", "smoke: {nosuch: 1, fixed"),
    "exclude": ("scales:", "exclude: [{method: nosuch}]\nscales:"),
    "override": ("scales:", "overrides: [{when: {method: global}, set: {roundz: 3}}]\nscales:"),
    "too_many_clients": ("clients_per_round: 4", "clients_per_round: 40"),
    "label": ("label: global", "label: 'two words'"),
    "section_text": ("method: {name: global}", "method: ditto"),
    "fixed_seed": ("scales:", "fixed: {seed: 1}\nscales:"),
    "checkpoint": ("smoke: {fixed", "smoke: {checkpoint_every: -1, fixed"),
    "include": ("scales:", "include: [nosuch_plugin.py]\nscales:"),
    "deployment_key": ("scales:", "deployment: [{label: x, aggregator: {f: 3}}]\nscales:"),
    "deployment_f": ("scales:", "deployment: [{label: x, f_declared: triple}]\nscales:"),
    "deployment_subset": ("smoke: {fixed", "smoke: {deployment: [nosuch], fixed"),
    "costs": ("scales:", "costs: [server_ms, server_s]\nscales:"),
}
FILES = {
    "syntax.yaml": "rounds: [1, 2\n",
    "tab.yaml": "rounds: 3\n\tlr: 0.1\n",
    "list.yaml": "- rounds\n- 3\n",
    "roundz.yaml": "roundz: 3\n",
    "rounds_text.yaml": "rounds: many\n",
    "suite_syntax.yaml": "name: suite_syntax\nmethods: [\n",
    "suite_scalar.yaml": "42\n",
    "suite_other.yaml": SUITE_BASE.format(name="another_name"),
    "not_a_db.db": "plain text, not SQLite\n",
    "availability_header.csv": "device,when,available\n0,0,1\n",
    "availability_row.csv": "device,round,available\n0,0,yes\n",
    "availability_device.csv": "device,round,available\n99,0,1\n",
    "latency_missing.csv": "device,latency\n0,1.5\n",
    "latency_negative.csv": "device,latency\n0,-1\n",
    # plugins that cannot load, or whose component breaks its kind's contract
    "plugin_typo.py": "from fedarena import aggregator\n\nVALUE = undefined_name + 1\n",
    "plugin_no_input.py": ("from fedarena import aggregator\n\n@aggregator('reads_nosuch', reads=('round', 'nosuch'))\n"
                           "def reads_nosuch(updates, *, weights, losses, f, round=None):\n    return updates.mean(0)\n"),
    "plugin_duplicate.py": ("from fedarena import aggregator, check_updates\n\n@aggregator('median')\n"
                            "def median(updates, *, weights, losses, f):\n    return updates.mean(0)\n"),
    "plugin_first_row.py": ("from fedarena import aggregator\n\n@aggregator('bad_first_row')\n"
                            "def first_row(updates, *, weights, losses, f):\n    return updates[0]\n"),
    "plugin_shape.py": ("from fedarena import aggregator\n\n@aggregator('bad_shape')\n"
                        "def all_rows(updates, *, weights, losses, f):\n    return updates\n"),
    "plugin_float64.py": ("import torch\nfrom fedarena import aggregator\n\n@aggregator('bad_dtype')\n"
                          "def mean64(updates, *, weights, losses, f):\n    return updates.double().mean(0)\n"),
    "plugin_attack.py": ("from fedarena import attack, Effect\n\n@attack('bad_tamper')\n"
                         "def build(dataset, malicious, rng):\n    return Effect(dataset, tamper=lambda u, bad, gen: u * 2)\n"),
    "plugin_text.txt": "not python\n",
    "claim_keys.json": '{"robust": {"min_max@0.2": 0.8}}\n',
    **{f"{name}.yaml": SUITE_BASE.format(name=name).replace(*edit, 1) for name, edit in SUITE_EDITS.items()},
}
ALL = {  # registry kind -> its names, for "the message lists every allowed name"
    "dataset": DATASETS.names(), "model": MODELS.names(), "method": METHODS.names(), "attack": ATTACKS.names(),
    "aggregator": AGGREGATORS.names(), "pre-aggregator": PRE_AGGREGATORS.names(),
    "partition": PARTITIONERS.names(), "metric": list(METRIC_DIRECTIONS), "suite": SUITES.names(),
    "privacy": PRIVACY.names(), "accountant": ACCOUNTANT.names(), "round input": [*CORE, *INPUTS.names()],
    "system": SYSTEMS.names(),
}

# (argv, fragments of the one error line); "{T}" is a temporary folder holding FILES, "{STORE}" a real,
# empty MLflow store there, "{PORT}" a free port
INCLUDE = ("--include", "{T}/plugin_typo.py")
RUN = [
    (("run",), ["needs --out FILE (the result JSON), --track (record it in the store), or both"]),
    (("run", *OUT, "--include", "{T}/nosuch.py"), ["plugin {T}/nosuch.py (--include): no such file or folder"]),
    (("run", *OUT, "--include", "{T}/plugin_text.txt"), ["a plugin is a .py file or a package folder"]),
    (("run", *OUT, *INCLUDE), ["plugin {T}/plugin_typo.py: import failed at plugin_typo.py:3",
                               "(`VALUE = undefined_name + 1`): NameError"]),
    (("run", *OUT, "--include", "{T}/plugin_duplicate.py"),
     ["plugin {T}/plugin_duplicate.py: registers at plugin_duplicate.py:3", "aggregator 'median' is already "
      "registered (built-in)"]),
    (("run", *OUT, "--include", "{T}/plugin_first_row.py"),
     ["aggregator 'bad_first_row' breaks the aggregator contract: it is not permutation invariant"]),
    (("run", *OUT, "--include", "{T}/plugin_shape.py"),
     ["aggregator 'bad_shape' breaks the aggregator contract: it returns torch.Size([7, 5])"]),
    (("run", *OUT, "--include", "{T}/plugin_float64.py"),
     ["aggregator 'bad_dtype' breaks the aggregator contract: in torch.float32 it returns torch.float64"]),
    (("run", *OUT, "--include", "{T}/plugin_attack.py"),
     ["attack 'bad_tamper' breaks the attack contract: its tamper changes benign devices' updates"]),
    (("run", "--track", "--experiment", "two words", "--rounds", "1", "--tracking-uri", "sqlite:///{T}/missing/m.db"),
     ["the folder", "missing does not exist"]),
    (("run", *OUT, "--config", "{T}/missing.yaml"), ["cannot read", "missing.yaml"]),
    (("run", *OUT, "--config", "{T}"), ["cannot read", "Is a directory"]),
    (("run", *OUT, "--config", "{T}/syntax.yaml"), ["syntax.yaml, line 2, column 1: invalid YAML"]),
    (("run", *OUT, "--config", "{T}/tab.yaml"), ["tab.yaml, line 2, column 1: invalid YAML", "'\\t'"]),
    (("run", *OUT, "--config", "{T}/list.yaml"), ["expected a mapping of config keys, got list"]),
    (("run", *OUT, "--config", "{T}/roundz.yaml"), ["unknown config key(s) ['roundz']; allowed:", "rounds"]),
    (("run", *OUT, "--config", "{T}/rounds_text.yaml"), ["rounds must be a positive integer, got 'many'"]),
    (("run", *OUT, "--dataset", "digitz"), ["unknown dataset 'digitz' (did you mean 'digits'?); available:"]),
    (("run", *OUT, "--model", "nosuch"), ["unknown model 'nosuch'; available:"]),
    (("run", *OUT, "--method", "dito"), ["unknown method 'dito' (did you mean 'ditto'?); available:"]),
    (("run", *OUT, "--attack", "nosuch"), ["unknown attack 'nosuch'; available:"]),
    (("run", *OUT, "--attack", "a1", "--level", "1.5"), ["attack level must be a fraction in [0, 1), got 1.5"]),
    (("run", *OUT, "--level", "half"), ["argument --level: invalid float value: 'half'"]),
    (("run", *OUT, "--aggregator", "medain"), ["unknown aggregator 'medain' (did you mean 'median'?); available:"]),
    (("run", *OUT, "--rounds", "0"), ["rounds must be a positive integer, got 0"]),
    (("run", *OUT, "--rounds", "ten"), ["argument --rounds: invalid int value: 'ten'"]),
    (("run", *OUT, "--clients-per-round", "0"), ["clients_per_round must be a positive integer, got 0"]),
    (("run", *OUT, "--clients-per-round", "500"), ["clients_per_round=500 exceeds the 30 clients"]),
    (("run", *OUT, "--local-steps", "-1"), ["set local_steps >= 1", "or local_epochs >= 1"]),
    (("run", *OUT, "--sampling", "random"), ["sampling must be one of proportional, uniform; got 'random'"]),
    (("run", *OUT, "--privacy", "central", "--set", "privacy.noise_multiplier=1"),
     ["privacy 'central' needs sampling: uniform", "got sampling=proportional"]),
    (("run", *OUT, *DP, "--set", "privacy.noise_multiplier=-1"),
     ["privacy 'central': noise_multiplier must be a finite number >= 0", "got -1"]),
    (("run", *OUT, *DP, "--set", "privacy.noise_multiplier=1", "--set", "privacy.clip=0"),
     ["privacy 'central': clip (the L2 bound of an update) must be a finite number > 0, got 0"]),
    (("run", *OUT, *DP, "--set", "privacy.noise_multiplier=1", "--set", "privacy.delta=1.5"),
     ["privacy 'central': delta must be in (0, 1)", "got 1.5"]),
    (("run", *OUT, *DP, "--set", "privacy.target_epsilon=0.05", "--set", "privacy.adaptive=true"),
     ["privacy: target_epsilon=0.05 is out of reach", "raise count_noise"]),
    (("run", *OUT, *DP), ["privacy 'central': give noise_multiplier", "or target_epsilon", "not neither"]),
    (("run", *OUT, *DP, "--set", "privacy.noise_multiplier=1", "--set", "privacy.accountant=moments"),
     ["privacy 'central': accountant must be one of rdp, pld, got 'moments'"]),
    (("run", *OUT, *DP, "--set", "privacy.noise_multiplier=1", "--set", "privacy.accountant=pld"),
     ["privacy accountant 'pld' cannot account for SampledWithoutReplacementDpEvent", "use accountant rdp"]),
    (("run", *OUT, *DP, "--set", "privacy.noise_multiplier=1", "--method", "local"),
     ["method 'local' has no global aggregation", "leave privacy at none"]),
    (("run", *OUT, *DP, "--set", "privacy.noise_multiplier=1", "--method", "term"),
     ["method 'term' weights the devices by their losses or updates"]),
    (("run", *OUT, *DP, "--set", "privacy.noise_multiplier=1", "--aggregator", "flame"),
     ["aggregator 'flame' has no known sensitivity", "central DP composes with", "or use privacy local"]),
    (("run", *OUT, "--aggregator", "krum", "--set", "privacy.secure_aggregation=true"),
     ["aggregator 'krum' needs each device's update, which secure aggregation hides", "mean"]),
    (("run", *OUT, "--local-epochs", "x"), ["argument --local-epochs: invalid int value: 'x'"]),
    (("run", *OUT, "--batch-size", "0"), ["batch_size must be a positive integer, got 0"]),
    (("run", *OUT, "--lr", "0"), ["lr must be a positive finite number, got 0.0"]),
    (("run", *OUT, "--lr", "nan"), ["lr must be a positive finite number, got nan"]),
    (("run", *OUT, "--seed", "-1"), ["seed must be an integer >= 0, got -1"]),
    (("run", *OUT, "--eval-every", "0"), ["eval_every must be a positive integer, got 0"]),
    (("run", *OUT, "--backend", "gpu"), ["backend must be one of auto, sequential, batched; got 'gpu'"]),
    (("run", *OUT, "--device", "tpu"), ["invalid device 'tpu'", "cpu, cuda"]),
    (("run", *OUT, "--no-progress=yes"), ["argument --no-progress: ignored explicit argument 'yes'"]),
    (("run", "--out", "{T}"), ["argument --out:", "is a folder; give a file name such as"]),
    (("run", *OUT, "--set", "novalue"), ["--set expects KEY=VALUE, got 'novalue'"]),
    (("run", *OUT, "--set", "lam=0.1"), ["cannot set 'lam': no component takes it. Settable keys:", "lr"]),
    (("run", *OUT, "--method", "ditto", "--set", "lam=-1"), ["ditto lam must be >= 0, got -1.0"]),
    (("run", *OUT, "--method", "ditto", "--set", "lam=null"), ["lam cannot be null; give a value like its default"]),
    (("run", *OUT, "--set", "nosection.x=1"), ["unknown config section 'nosection'", "sections: dataset, model"]),
    (("run", *OUT, "--set", "dataset.nosuch=1"), ["unknown parameter(s) ['nosuch'] for dataset 'digits'; allowed:"]),
    (("run", *OUT, "--set", "dataset.name.x=1"), ["cannot set 'dataset.name.x'", "set section.option"]),
    (("run", *OUT, "--set", "dataset.num_clients=0"), ["num_clients must be a positive integer, got 0"]),
    (("run", *OUT, "--set", "dataset.partition_options=3"), ["partition_options must be a mapping"]),
    (("run", *OUT, "--set", "model.hidden=[x]"), ["hidden must be a list of whole numbers such as [200, 200]"]),
    (("run", *OUT, "--set", "model.hidden=[64, -1]"), ["hidden lists the widths of the hidden layers, each >= 1"]),
    (("run", *OUT, "--set", "sampling=random"), ["sampling must be one of proportional, uniform; got 'random'"]),
    (("run", *OUT, "--set", "on_divergence=retry"), ["on_divergence must be one of stop, continue"]),
    (("run", *OUT, "--set", "lr=true"), ["lr must be a positive finite number, got True"]),
    (("run", *OUT, "--method", "mocha"), ["method 'mocha' is defined for model 'svm'", "set model.name=svm"]),
]
SYNC, ASYNC = ("--system", "synchronous"), ("--system", "asynchronous")
SYSTEM = [  # the system section (issue 56): a deployment's failures, availability, stragglers, asynchrony
    (("run", *OUT, *SYNC, "--set", "system.failure_rate=1"), ["system 'synchronous': failure_rate must be a number in [0, 1), got 1"]),
    (("run", *OUT, *SYNC, "--set", "system.failure_rate=-0.1"), ["failure_rate must be a number in [0, 1)"]),
    (("run", *OUT, *SYNC, "--set", "system.attackers_fail=maybe"), ["attackers_fail"]),
    (("run", *OUT, *SYNC, "--set", "system.stragglers=1.5"), ["system 'synchronous': stragglers must be a number in [0, 1], got 1.5"]),
    (("run", *OUT, *SYNC, "--set", "system.straggler_policy=wait"), ["straggler_policy must be one of drop, include, got 'wait'"]),
    (("run", *OUT, *SYNC, "--set", "system.on_undefined=crash"), ["on_undefined must be one of skip, got 'crash'"]),
    (("run", *OUT, *SYNC, "--set", "system.availability=3"), ["availability must be a mapping such as {key: value}, got 3"]),
    (("run", *OUT, *SYNC, "--set", "system.availability={bse: 0.5}"), ["unknown availability key(s) ['bse']; allowed: base, amplitude, period, csv"]),
    (("run", *OUT, *SYNC, "--set", "system.availability={base: 1.5}"), ["availability.base must be a number in [0, 1], got 1.5"]),
    (("run", *OUT, *SYNC, "--set", "system.availability={period: 0}"), ["availability.period must be a whole number > 0, got 0"]),
    (("run", *OUT, *SYNC, "--set", "system.availability={base: 0, amplitude: 0}"), ["no device would ever be available"]),
    (("run", *OUT, *SYNC, "--set", "system.availability={csv: {T}/nosuch.csv}"), ["system availability csv {T}/nosuch.csv: cannot read it"]),
    (("run", *OUT, *SYNC, "--set", "system.availability={csv: {T}/availability_header.csv}"), ["the first line must be the header device,round,available"]),
    (("run", *OUT, *SYNC, "--set", "system.availability={csv: {T}/availability_row.csv}"), ["line 2: expected three whole numbers device,round,available"]),
    (("run", *OUT, *SYNC, "--set", "system.availability={csv: {T}/availability_device.csv}"), ["line 2: device must be in [0, 30)"]),
    (("run", *OUT, *SYNC, "--set", "system.availability={csv: x, base: 0.5}"), ["availability from a csv trace takes no ['base']"]),
    (("run", *OUT, *SYNC, "--set", "system.buffer=5"), ["unknown parameter(s) ['buffer'] for system 'synchronous'"]),
    (("run", *OUT, *ASYNC, "--set", "system.buffer=0"), ["system 'asynchronous': buffer must be a whole number > 0, got 0"]),
    (("run", *OUT, *ASYNC, "--set", "system.buffer=20"), ["buffer 20 exceeds the concurrency 10", "the buffer would never fill"]),
    (("run", *OUT, *ASYNC, "--set", "system.concurrency=100"), ["concurrency 100 exceeds the 30 devices"]),
    (("run", *OUT, *ASYNC, "--set", "system.latency_mean=0"), ["latency_mean must be a finite number > 0, got 0"]),
    (("run", *OUT, *ASYNC, "--set", "system.speed_sigma=-1"), ["speed_sigma must be a finite number >= 0"]),
    (("run", *OUT, *ASYNC, "--set", "system.jitter_sigma=-1"), ["jitter_sigma must be a finite number >= 0"]),
    (("run", *OUT, *ASYNC, "--set", "system.attacker_timing=early"), ["attacker_timing must be one of honest, fresh, stale, got 'early'"]),
    (("run", *OUT, *ASYNC, "--set", "system.stale_factor=0"), ["stale_factor must be a finite number > 0, got 0"]),
    (("run", *OUT, *ASYNC, "--set", "system.trace={T}/latency_missing.csv"), ["no latency for device(s) [1, 2, 3, 4, 5] ...; list every device once"]),
    (("run", *OUT, *ASYNC, "--set", "system.trace={T}/latency_negative.csv"), ["line 2: device must be in [0, 30) and latency a finite number > 0"]),
    (("run", *OUT, *ASYNC, "--set", "system.buffer=2", "--aggregator", "krum", "--attack", "a1", "--level", "0.3"),
     ["system 'asynchronous' aggregates buffers of 2 updates: krum scores the n - f - 2 nearest neighbours",
      "got n=2, f=0"]),  # f follows the buffer: floor(3 x 2 / 10) = 0
    (("run", *OUT, *DP, "--set", "privacy.noise_multiplier=1", *SYNC, "--set", "system.failure_rate=0.3"),
     ["differential privacy's accountant assumes clients_per_round devices drawn and reporting each round",
      "system 'synchronous' with failure_rate breaks that"]),
    (("run", *OUT, *DP, "--set", "privacy.noise_multiplier=1", *ASYNC), ["system 'asynchronous' with asynchronous aggregation breaks that"]),
]

BENCH = [
    (("bench",), ["required: bench_command"]),
    (("bench", "nosuch"), ["invalid choice: 'nosuch' (choose from", "'list', 'run'"]),
    (("bench", "list", "--no-check=1"), ["argument --no-check: ignored explicit argument '1'"]),
    (("bench", "list", *INCLUDE), ["plugin {T}/plugin_typo.py: import failed at plugin_typo.py:3"]),
    ((*SMOKE, *INCLUDE), ["plugin {T}/plugin_typo.py: import failed at plugin_typo.py:3"]),
    (("bench", "run", "{T}/include.yaml"), ["plugin {T}/nosuch_plugin.py (--include): no such file or folder"]),
    (("bench", "run"), ["required: suite"]),
    (("bench", "run", "smok"), ["unknown suite 'smok' (did you mean 'smoke'?); available:"]),
    (("bench", "run", "{T}/missing.yaml"), ["missing.yaml: suite file not found"]),
    (("bench", "run", "{T}/suite_syntax.yaml"), ["suite_syntax.yaml, line 3, column 1: invalid YAML"]),
    (("bench", "run", "{T}/suite_scalar.yaml"), ["suite_scalar.yaml: top level: expected a mapping, got int"]),
    (("bench", "run", "{T}/suite_other.yaml"), ["suite name 'another_name' must equal the file name"]),
    (("bench", "run", "{T}/topkey.yaml"), ["nosuch: unknown key; allowed: name, description"]),
    (("bench", "run", "{T}/method_param.yaml"), ["unknown parameter(s) ['nosuch'] for method 'global'; allowed: none"]),
    (("bench", "run", "{T}/select_metric.yaml"), ["select.by: unknown metric 'nosuch'; available:"]),
    (("bench", "run", "{T}/level.yaml"), ["attacks[0].levels[0]: a level is a fraction of the clients in [0, 1)"]),
    (("bench", "run", "{T}/seed.yaml"), ["scales.smoke.seeds[0]: a seed is an integer >= 0, got -1"]),
    (("bench", "run", "{T}/scale_key.yaml"), ["scales.smoke.nosuch: unknown key; allowed: description, fixed"]),
    (("bench", "run", "{T}/exclude.yaml"), ["unknown method label 'nosuch'; the suite defines: global"]),
    (("bench", "run", "{T}/override.yaml"), ["overrides[0].set.roundz: unknown config key; allowed:", "rounds"]),
    (("bench", "run", "{T}/too_many_clients.yaml", "--scale", "smoke", "--dry-run"),
     ["clients_per_round=40 exceeds the 8 clients"]),
    (("bench", "run", "{T}/label.yaml"), ["a label must be a non-empty word of letters, digits and _.+-"]),
    (("bench", "run", "{T}/section_text.yaml"), ["a config section is a mapping such as {name: ...}, got 'ditto'"]),
    (("bench", "run", "{T}/fixed_seed.yaml"), ["seeds are an axis: list them under `seeds:` in a scale"]),
    (("bench", "run", "{T}/checkpoint.yaml"), ["checkpoint_every: expected a number of rounds >= 0"]),
    (("bench", "run", "{T}/deployment_key.yaml"),
     ["deployment[0].aggregator: unknown key; a deployment entry has label, system, f_declared"]),
    (("bench", "run", "{T}/deployment_f.yaml"),
     ["deployment[0].f_declared: f_declared is the server's f relative to the trial's: one of half, exact, double; "
      "got 'triple'"]),
    (("bench", "run", "{T}/deployment_subset.yaml"),
     ["scales.smoke.deployment[0]: unknown deployment label 'nosuch'; the suite defines: synchronous"]),
    (("bench", "run", "{T}/costs.yaml"),
     ["costs[1]: unknown cost 'server_s'; allowed: server_ms, attack_ms, attack_forward, attack_backward, bytes_sent, "
      "bytes_received"]),
    (("bench", "run", "smoke", "--scale", "huge"), ["invalid choice: 'huge' (choose from 'smoke', 'quick', 'paper')"]),
    ((*SMOKE, "--dataset", "nosuch"), ["--dataset 'nosuch' is neither a dataset of scale 'smoke'", "choose one of"]),
    ((*SMOKE, "--seeds", "0,x"), ["argument --seeds: seeds are comma-separated integers, got '0,x'"]),
    ((*SMOKE, "--seeds", "-1"), ["argument --seeds: give at least one seed >= 0, got '-1'"]),
    ((*SMOKE, "--cpus-per-trial", "0"), ["argument --cpus-per-trial: expected a number > 0, got '0'"]),
    ((*SMOKE, "--gpus-per-trial", "-1"), ["argument --gpus-per-trial: expected a number >= 0, got '-1'"]),
    ((*SMOKE, "--max-concurrent", "0"), ["argument --max-concurrent: expected an integer >= 1, got '0'"]),
    ((*SMOKE, "--max-failures", "-2"), ["argument --max-failures: expected an integer >= 0, got '-2'"]),
    ((*SMOKE, "--checkpoint-every", "x"), ["argument --checkpoint-every: expected an integer >= 0, got 'x'"]),
    ((*SMOKE, "--num-cpus", "0"), ["argument --num-cpus: expected an integer >= 1, got '0'"]),
    ((*SMOKE, "--storage", "{T}/syntax.yaml"), ["argument --storage:", "is a file; give a folder"]),
    ((*SMOKE, "--dry-run=1"), ["argument --dry-run: ignored explicit argument '1'"]),
    ((*SMOKE, "--retry-failed=1"), ["argument --retry-failed: ignored explicit argument '1'"]),
    ((*SMOKE, "--tuned", "{T}/no_such_tuned.yaml"), ["--tuned {T}/no_such_tuned.yaml: no such file"]),
    ((*SMOKE, "--tuned", "{T}/list.yaml"), ["not a file `fedarena tune` wrote"]),
    ((*SMOKE[:-1], "sqlite:////nonexistent/folder/m.db"), ["the folder /nonexistent/folder does not exist"]),
    ((*SMOKE[:-1], "sqlite:///{T}/not_a_db.db"), ["not_a_db.db is not a usable SQLite database"]),
    ((*SMOKE[:-1], "postgresql+nosuch://u:secret@127.0.0.1/db"),
     ["postgresql+nosuch://u:***@127.0.0.1/db", "write postgresql://user:password@host:port/database"]),
    ((*SMOKE[:-1], "postgresql://u:secret@127.0.0.1:notaport/db"), ["write postgresql://user:password@host:port"]),
    ((*SMOKE[:-1], "nosuch://store"), ["tracking store nosuch://store cannot be used", "'postgresql', 'mysql'"]),
    ((*SMOKE[:-1], "http://127.0.0.1:9"), ["MLflow tracking server http://127.0.0.1:9 cannot be reached"]),
]
UI = [
    (("ui", "--port", "99999"), ["argument --port: expected an integer >= 1 and <= 65535, got '99999'"]),
    (("ui", "--tracking-uri", "sqlite:///{T}/missing.db"), ["no tracking store at", "missing.db"]),
    (("ui", "--tracking-uri", "sqlite:///{T}/not_a_db.db"), ["not_a_db.db is not a usable SQLite database"]),
    (("ui", "--tracking-uri", "postgresql+psycopg2://u@127.0.0.1/db"), ["driver 'psycopg2', which is not installed"]),
    (("ui", "--tracking-uri", "{STORE}", "--host", "nosuch.invalid"),
     ["the UI cannot listen on nosuch.invalid:5000", "--host 127.0.0.1"]),
    (("ui", "--tracking-uri", "{STORE}", "--port", "{PORT}", "--suite", "nosuch"),
     ["no suite 'nosuch' with runs in the tracking store", "suites there: none"]),
]
LEADERBOARD = [
    (("leaderboard",), ["required: suite"]),
    (("leaderboard", "nosuch", "--tracking-uri", "{STORE}"), ["no experiment named 'nosuch'", "experiments there:"]),
    (("leaderboard", "smoke", "--format", "pdf"), ["invalid choice: 'pdf' (choose from 'latex', 'markdown', 'html', 'csv')"]),
    (("leaderboard", "smoke", "--scale", "huge"), ["invalid choice: 'huge' (choose from 'smoke', 'quick', 'paper')"]),
    (("leaderboard", "smoke", "--out", "{T}/syntax.yaml"), ["argument --out:", "is a file; give a folder"]),
    (("leaderboard", "smoke", "--tracking-uri", "sqlite:///{T}/missing.db"), ["no MLflow tracking store at"]),
    (("leaderboard", "smoke", "--tracking-uri", "sqlite:///{T}/not_a_db.db"), ["is not a usable SQLite database"]),
    (("leaderboard", "smoke", "--tracking-uri", "postgresql+nosuch://u@h/db"), ["postgresql+DRIVER://"]),
    (("leaderboard", "smoke", "--no-ci=1"), ["argument --no-ci: ignored explicit argument '1'"]),
    (("leaderboard", "smoke", "--ci=1"), ["argument --ci: ignored explicit argument '1'"]),
    (("leaderboard", "smoke", "--no-figures=1"), ["argument --no-figures: ignored explicit argument '1'"]),
]
REPORT = [
    (("report",), ["required: suite"]),
    (("report", "nosuch", "--tracking-uri", "{STORE}", "--out", "{T}/report"), ["no experiment named 'nosuch'"]),
    (("report", "smoke", "--out", "{T}/syntax.yaml"), ["syntax.yaml is a file; give a folder with --out"]),
    (("report", "smoke", "--tracking-uri", "sqlite:///{T}/not_a_db.db", "--out", "{T}/report"),
     ["is not a usable SQLite database"]),
    (("report", "smoke", "--scale", "huge"), ["invalid choice: 'huge' (choose from 'smoke', 'quick', 'paper')"]),
    (("report", "smoke", "--no-ci=1"), ["argument --no-ci: ignored explicit argument '1'"]),
]
DATA = [
    (("data",), ["required: action"]),
    (("data", "download"), ["invalid choice: 'download' (choose from 'fetch', 'info', 'list')"]),
    (("data", "info"), ["`fedarena data info` needs a dataset name; available:"]),
    (("data", "fetch", "nosuch"), ["unknown dataset 'nosuch'; available:"]),
    (("data", "info", "fmnist", "--data-dir", "{T}/syntax.yaml"), ["argument --data-dir:", "is a file"]),
    (("data", "info", "fmnist", "--json=1"), ["argument --json: ignored explicit argument '1'"]),
    (("data", "info", "fmnist", "--no-verify=1"), ["argument --no-verify: ignored explicit argument '1'"]),
    (("data", "list", *INCLUDE), ["plugin {T}/plugin_typo.py: import failed at plugin_typo.py:3"]),
]
EVALUATE = [
    (("evaluate",), ["one of the arguments --aggregator --method --builtin is required"]),
    (("evaluate", "--aggregator", "medain"), ["unknown aggregator 'medain' (did you mean 'median'?); available:"]),
    (("evaluate", "--method", "dito"), ["unknown method 'dito' (did you mean 'ditto'?); available:"]),
    (("evaluate", "--builtin", "--set", "beta=0.1"), ["--builtin evaluates every component at its defaults"]),
    (("evaluate", "--aggregator", "median", "--set", "novalue"), ["--set expects KEY=VALUE, got 'novalue'"]),
    (("evaluate", "--aggregator", "median", "--set", "nosuch=1"), ["unknown parameter(s) ['nosuch'] for aggregator"]),
    (("evaluate", "--aggregator", "median", *INCLUDE), ["plugin {T}/plugin_typo.py: import failed"]),
    (("evaluate", "--aggregator", "median", "--scale", "huge"), ["invalid choice: 'huge'"]),
    (("evaluate", "--method", "ditto", "--isolate"), ["--isolate evaluates an aggregator (--aggregator NAME)"]),
    (("site", "--scale", "huge"), ["invalid choice: 'huge'"]),
    (("site", "--out", "{T}/syntax.yaml"), ["argument --out:", "is a file; give a folder for the site"]),
    (("site", "--work", "{T}/syntax.yaml"), ["argument --work:", "is a file; give a folder for the submissions' own"]),
    (("site", "--submissions", "{T}/nosuch"), ["--submissions {T}/nosuch: not a folder"]),
    (("site", "--verify", "{T}/nosuch"), ["--verify {T}/nosuch: not a folder (give one submission's folder)"]),
    (("site", "--time-limit", "0"), ["argument --time-limit: expected a number >= 1, got '0'"]),
    (("site", "--memory-limit", "10"), ["argument --memory-limit: expected an integer >= 64, got '10'"]),
    (("site", "--num-cpus", "0"), ["argument --num-cpus: expected an integer >= 1, got '0'"]),
    (("site", "--jobs", "0"), ["argument --jobs: expected an integer >= 1, got '0'"]),
    (("site", "--trust-submissions", "--submissions", "{T}/nosuch"), ["--submissions {T}/nosuch: not a folder"]),
    (("site", "--tracking-uri", "sqlite:///{T}/not_a_db.db"), ["not_a_db.db is not a usable SQLite database"]),
    (("evaluate", "--aggregator", "median", "--out", "{T}/syntax.yaml"), ["argument --out:", "is a file"]),
    (("evaluate", "--aggregator", "median", "--claim", "{T}/list.yaml"), ["claim file", "list.yaml: not JSON"]),
    (("evaluate", "--aggregator", "median", "--claim", "{T}/claim_keys.json"),
     ["expected keys clean_acc, robust_acc, got ['robust']"]),
    (("evaluate", "--aggregator", "median", "--tracking-uri", "sqlite:///{T}/not_a_db.db"),
     ["is not a usable SQLite database"]),
    (("evaluate", "--aggregator", "median", "--storage", "{T}/syntax.yaml"), ["argument --storage:", "is a file"]),
    (("evaluate", "--aggregator", "median", "--num-cpus", "0"), ["argument --num-cpus: expected an integer >= 1"]),
    (("evaluate", "--aggregator", "median", "--tuned", "{T}/list.yaml"), ["not a file `fedarena tune` wrote"]),
]
TUNE_BASE = ("tune", "smoke", "--scale", "smoke", "--budget", "2", "--out", "{T}/tuned.yaml", "--tracking-uri",
             "sqlite:///{T}/tune.db")
TUNE = [
    (("tune",), ["the following arguments are required: --budget, --out"]),
    (("tune", "smok", *TUNE_BASE[2:]), ["unknown suite 'smok' (did you mean 'smoke'?)"]),
    (("tune", "--aggregator", "medain", *TUNE_BASE[2:]), ["unknown aggregator 'medain' (did you mean 'median'?)"]),
    (("tune", "--method", "dito", *TUNE_BASE[2:]), ["unknown method 'dito' (did you mean 'ditto'?)"]),
    (("tune", "smoke", "--aggregator", "median", *TUNE_BASE[2:]), ["exactly one of SUITE, --aggregator NAME or"]),
    ((*TUNE_BASE[:2], "--scale", "huge", *TUNE_BASE[4:]), ["invalid choice: 'huge'"]),
    ((*TUNE_BASE[:4], "--budget", "0", *TUNE_BASE[6:]), ["--budget is the number of configurations", ">= 1, got 0"]),
    ((*TUNE_BASE[:6], "--out", "{T}", *TUNE_BASE[8:]), ["--out {T}: a folder; give the frozen choice's file path"]),
    ((*TUNE_BASE, "--rows", "nosuch"), ["has no row 'nosuch' at scale 'smoke'; its rows:"]),
    ((*TUNE_BASE, "--searcher", "grid"), ["--searcher 'grid': choose one of random, optuna"]),
    ((*TUNE_BASE, "--seed", "-1"), ["argument --seed: expected an integer >= 0, got '-1'"]),
    ((*TUNE_BASE, "--keys", "momentum"), ["--keys: momentum is not a shared key; shared keys: lr, local_steps"]),
    ((*TUNE_BASE, "--space", "lr=uniform(1, 0.5)"), ["search space of 'lr': the range [1, 0.5] is empty or inverted"]),
    ((*TUNE_BASE, "--space", "method.nosuch=uniform(0, 1)"), ["method 'global' has no hyperparameter 'nosuch'"]),
    ((*TUNE_BASE, *INCLUDE), ["plugin {T}/plugin_typo.py: import failed"]),
    ((*TUNE_BASE[:-1], "sqlite:///{T}/not_a_db.db"), ["is not a usable SQLite database"]),
    ((*TUNE_BASE, "--storage", "{T}/syntax.yaml"), ["argument --storage:", "is a file"]),
    ((*TUNE_BASE, "--num-cpus", "0"), ["argument --num-cpus: expected an integer >= 1"]),
]
REGISTRY_CASES = {  # registry kind -> a case with an unknown name of that kind (message lists every name)
    "dataset": (("data", "info", "nosuch"), ["unknown dataset 'nosuch'; available:"]),
    "data source": (("data", "fetch", "nosuch_source"), ["unknown dataset 'nosuch_source'; available:"]),
    "model": (("run", *OUT, "--set", "model.name=nosuch"), ["unknown model 'nosuch'; available:"]),
    "method": (("run", *OUT, "--method", "nosuch"), ["unknown method 'nosuch'; available:"]),
    "attack": (("run", *OUT, "--attack", "nosuch"), ["unknown attack 'nosuch'; available:"]),
    "aggregator": (("run", *OUT, "--aggregator", "nosuch"), ["unknown aggregator 'nosuch'; available:"]),
    "pre-aggregator": (("run", *OUT, "--set", "aggregator.pre=[nosuch]"), ["unknown pre-aggregator 'nosuch'"]),
    "partition": (("run", *OUT, "--set", "dataset.partition=nosuch"), ["unknown partition 'nosuch'; available:"]),
    "metric": (("bench", "run", "{T}/select_metric.yaml"), ["unknown metric 'nosuch'; available:"]),
    "suite": (("bench", "run", "nosuch"), ["unknown suite 'nosuch'; available:"]),
    "privacy": (("run", *OUT, "--privacy", "nosuch"), ["unknown privacy 'nosuch'; available: central, local, none"]),
    "accountant": (("run", *OUT, *DP, "--set", "privacy.noise_multiplier=1", "--set", "privacy.accountant=nosuch"),
                   ["privacy 'central': accountant must be one of", "got 'nosuch'"]),
    "round input": (("run", *OUT, "--include", "{T}/plugin_no_input.py", "--aggregator", "reads_nosuch"),
                    ["aggregator 'reads_nosuch'", "reads 'nosuch', which no round input provides; known:"]),
    "system": (("run", *OUT, "--system", "nosuch"), ["unknown system 'nosuch'; available: asynchronous, synchronous"]),
}
def subcommands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    """(command words, its parser) for every leaf subcommand, e.g. (("bench", "run"), parser)."""
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not actions:
        yield prefix, parser
    for action in actions:
        for name, sub in action.choices.items():
            yield from subcommands(sub, prefix + (name,))


COMMANDS = {words[0] for words, _ in subcommands(cli.build_parser())}
CATALOGUE = RUN + SYSTEM + BENCH + UI + LEADERBOARD + (REPORT if "report" in COMMANDS else []) + DATA + EVALUATE + TUNE
SUBPROCESS = [  # through the installed command, as a user types it
    (("run", *OUT, "--config", "{T}/syntax.yaml"), ["syntax.yaml, line 2, column 1: invalid YAML"]),
    (("bench", "run", "{T}/level.yaml"), ["a level is a fraction of the clients in [0, 1)"]),
    (("leaderboard", "smoke", "--format", "pdf"), ["invalid choice: 'pdf'"]),
    (("data", "fetch", "nosuch"), ["unknown dataset 'nosuch'; available:"]),
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bad_input")
    for name, text in FILES.items():
        (root / name).write_text(text)
    return root


@pytest.fixture(scope="module")
def store(folder) -> str:
    """A real, empty MLflow store (SQLite) for the cases that need one to exist."""
    from fedarena.tracking.store import check_store

    uri = f"sqlite:///{folder / 'store.db'}"
    check_store(uri)
    return uri


@pytest.fixture
def isolated(folder, monkeypatch):
    """The working folder, data folder and tracking URI of a case point into the temporary folder; starting
    the MLflow UI would be a failure of the case (its checks must stop it first)."""
    monkeypatch.chdir(folder)
    monkeypatch.setenv("FEDARENA_DATA_DIR", str(folder / "data"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)

    def no_server(uri, host, port):
        raise AssertionError(f"the MLflow UI would have started on {host}:{port} ({uri})")

    monkeypatch.setattr(bench_commands, "ui_command", no_server)


def fill(argv: tuple[str, ...], folder: Path, store_uri: str = "") -> list[str]:
    values = {"{T}": str(folder), "{STORE}": store_uri, "{PORT}": str(free_port())}
    return [re.sub(r"\{[A-Z]+\}", lambda m: values[m.group(0)], a) for a in argv]


def run_in_process(argv: list[str], capsys) -> tuple[int, str]:
    """``fedarena ARGV`` through the CLI's own entry function: (exit status, stdout + stderr)."""
    try:
        status = cli.main(argv)
    except SystemExit as exit_:  # argparse: usage and "fedarena ...: error: ..." on stderr, status 2
        status = exit_.code
    captured = capsys.readouterr()
    return status, captured.out + captured.err


def assert_one_clean_error(status, output: str, fragments: list[str]) -> str:
    """Non-zero status, no traceback, exactly one error line holding every fragment; returns that line."""
    assert status not in (0, None), f"exit status {status}:\n{output}"
    assert "Traceback" not in output, output
    errors = [line for line in output.splitlines() if re.match(r"^fedarena( [a-z]+)*: error: ", line)]
    assert len(errors) == 1, f"expected one error line:\n{output}"
    for fragment in fragments:
        assert fragment in errors[0], f"{fragment!r} not in:\n{errors[0]}"
    return errors[0]


@pytest.mark.parametrize("argv, fragments", CATALOGUE, ids=lambda v: " ".join(v) if isinstance(v, tuple) else None)
def test_bad_input_is_one_clean_error(argv, fragments, folder, store, isolated, capsys):
    status, output = run_in_process(fill(argv, folder, store), capsys)
    assert_one_clean_error(status, output, [f.replace("{T}", str(folder)) for f in fragments])


@pytest.mark.parametrize("kind", sorted(REGISTRY_CASES))
def test_unknown_names_list_every_registered_name(kind, folder, isolated, capsys):
    argv, fragments = REGISTRY_CASES[kind]
    status, output = run_in_process(fill(argv, folder), capsys)
    line = assert_one_clean_error(status, output, fragments)
    names = ALL.get(kind, ALL["dataset"])  # data sources are looked up by dataset name, after the dataset
    assert all(name in line for name in names), f"not every {kind} is listed:\n{line}"


def test_missing_postgres_driver_names_the_extra(folder, isolated, capsys, monkeypatch):
    # Prepare: the driver cannot be imported, as on an install without the postgres extra
    monkeypatch.setitem(sys.modules, "psycopg", None)
    argv = [*fill(SMOKE[:-1], folder), "postgresql://u:secret@127.0.0.1:5999/db"]
    # Execute
    status, output = run_in_process(argv, capsys)
    # Assert
    line = assert_one_clean_error(status, output, ["needs the postgresql driver 'psycopg'",
                                                   "pip install -e '.[postgres]'", "make install EXTRAS=postgres"])
    assert "secret" not in line


def fedarena_command() -> list[str]:
    script = Path(sys.executable).parent / "fedarena"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "fedarena.cli"]


@pytest.mark.integration  # the installed command as a process
@pytest.mark.parametrize("argv, fragments", SUBPROCESS, ids=lambda v: " ".join(v) if isinstance(v, tuple) else None)
def test_bad_input_through_the_installed_command(argv, fragments, folder, tmp_path):
    done = subprocess.run(fedarena_command() + fill(argv, folder), cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert_one_clean_error(done.returncode, done.stdout + done.stderr, fragments)


def test_every_option_has_a_case():
    cases = CATALOGUE + list(REGISTRY_CASES.values())
    missing = []
    for words, parser in subcommands(cli.build_parser()):
        used = {a.split("=")[0] for argv, _ in cases if argv[:len(words)] == words for a in argv[len(words):]}
        options = {o for a in parser._actions for o in a.option_strings if o.startswith("--") and o != "--help"}
        missing += [f"fedarena {' '.join(words)} {option}" for option in sorted(options - used)]
        if not any(argv[:len(words)] == words for argv, _ in cases):
            missing.append(f"fedarena {' '.join(words)} (no case at all)")
    assert not missing, f"add bad-input cases to {Path(__file__).name} for: {', '.join(missing)}"


def test_every_registry_kind_has_a_case():
    sources = "\n".join(path.read_text() for path in (ROOT / "fedarena").rglob("*.py"))
    kinds = set(re.findall(r"=\s*Registry(?:\[.*\])?\(\"([^\"]+)\"\)", sources))
    assert kinds, "no registry found: the pattern no longer matches fedarena's Registry(...) lines"
    assert kinds <= set(REGISTRY_CASES), f"registry kinds without a case: {sorted(kinds - set(REGISTRY_CASES))}"
