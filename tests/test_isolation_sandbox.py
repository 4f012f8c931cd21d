"""The sandbox itself (``fedarena.isolation.bwrap``, ``process``, ``wire``): what a submission's code can reach, and
the limits that stop it. Each reach test runs the same code outside the sandbox too, and sees it succeed there: the
test fails when the isolation is switched off."""

import os
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hostile_plugins import plugin, require_sandbox

from fedarena.isolation import bwrap
from fedarena.isolation.process import IsolatedRuleError, RuleLimits, RuleProcess
from fedarena.isolation.wire import WireError, decode, encode

pytestmark = pytest.mark.integration  # real processes: bubblewrap


@pytest.fixture(scope="module", autouse=True)
def sandbox():
    require_sandbox()


def run(code: str, isolated: bool, **env) -> str:
    """``code`` run by this Python, inside the sandbox or not; its output."""
    argv = [sys.executable, "-I", "-c", code]
    command = bwrap.wrap(argv) if isolated else argv
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, env={**os.environ, **env})
    return done.stdout.strip() + done.stderr.strip()[-300:]


def test_the_builders_environment_stays_outside():
    code = "import os; print(os.environ.get('FEDARENA_TEST_SECRET', 'absent'), sorted(os.environ)[:3])"
    assert run(code, False, FEDARENA_TEST_SECRET="s3cret").startswith("s3cret")
    inside = run(code, True, FEDARENA_TEST_SECRET="s3cret")
    assert inside.startswith("absent")


def test_the_builders_files_are_neither_readable_nor_writable(tmp_path):
    store = tmp_path / "mlflow.db"
    store.write_text("runs")
    code = (f"import os\ntry:\n    print(open({str(store)!r}).read())\nexcept OSError as err:\n    print('unreadable')\n"
            f"try:\n    open({str(tmp_path / 'site.html')!r}, 'w').write('x'); print('written')\n"
            "except OSError:\n    print('unwritable')\n"
            "try:\n    open('/usr/defaced', 'w'); print('system written')\nexcept OSError:\n    print('system read-only')\n"
            "print(sorted(os.listdir('/tmp')), sorted(os.listdir(os.path.expanduser('~'))))")
    assert run(code, False).startswith("runs\nwritten")
    inside = run(code, True).splitlines()
    assert inside[:3] == ["unreadable", "unwritable", "system read-only"]
    # its own empty /tmp (but the folders holding a bound installation, where it lies below /tmp: CI's clone),
    # and a home that is that /tmp
    holders = sorted({Path(p).relative_to("/tmp").parts[0] for p in bwrap._python_paths() if p.startswith("/tmp/")})
    assert inside[3] == f"{holders} {holders}"


def test_no_network_inside():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    code = (f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2); print('connected')\n"
            "except OSError:\n    print('refused')")
    try:
        assert run(code, False) == "connected"
        assert run(code, True) == "refused"
    finally:
        server.close()


def test_its_own_session_and_process_namespace():
    code = f"import os; print(os.getsid(0) != {os.getsid(0)}, os.getpid() < 10)"
    assert run(code, False) == "False False"
    assert run(code, True) == "True True"  # its own session, in its own process namespace


def rule_process(kind: str, **limits) -> RuleProcess:
    return RuleProcess((("hostile.py", plugin(kind)),), "hostile.py", RuleLimits(**limits))


def call_rule(process: RuleProcess, name: str):
    process.call({"op": "open"})
    return process.call({"op": "call", "what": "rule", "name": name, "args": {
        "updates": torch.ones(4, 3), "weights": None, "losses": None, "f": 1, "round": None, "params": {}}})


@pytest.mark.parametrize("kind, limits, why", [
    ("forker", {"processes": 8}, "more than 8 processes"),
    ("sleeper", {"call_seconds": 3.0}, "within 3 s"),
    ("hog", {"memory_mib": 700}, "memory limit of 700 MiB|can't allocate"),  # the watcher, or the kernel's ceiling
])
def test_a_rule_past_a_limit_is_killed_and_says_which(kind, limits, why):
    process = rule_process(kind, **limits)
    try:
        with pytest.raises(IsolatedRuleError, match=why):
            call_rule(process, kind)
        assert process.process.wait(timeout=10) is not None  # the whole sandbox is gone
    finally:
        process.close()


def test_an_honest_rule_answers_and_its_scope_starts_fresh():
    process = rule_process("honest")
    try:
        out = call_rule(process, "honest")
        assert torch.equal(out["out"], torch.ones(3)) and out["server"] is None
        process.call({"op": "close"})
        assert torch.equal(call_rule(process, "honest")["out"], torch.ones(3))  # a second scope, same process
    finally:
        process.close()


def test_a_rule_that_breaks_the_wire_format_is_killed():
    # writes a frame of nothing (not an answer) on every pipe it may write to, then answers as usual
    source = plugin("honest").replace("return factor * updates.mean(0)", "_junk(); return updates.mean(0)") + (
        "\n\ndef _junk():\n    for fd in range(3, 10):\n        try:\n            os.write(fd, bytes(8) + b'junk')\n"
        "        except OSError:\n            pass\n")
    process = RuleProcess((("hostile.py", source),), "hostile.py", RuleLimits(call_seconds=10))
    try:
        with pytest.raises(IsolatedRuleError, match="wire format"):
            call_rule(process, "honest")
    finally:
        process.close()


def test_the_wire_carries_data_and_refuses_anything_else():
    message = {"out": torch.arange(6, dtype=torch.float32).reshape(2, 3), "n": 3, "t": (1, "a"), "none": None}
    back = decode(encode(message))
    assert torch.equal(back["out"], message["out"]) and back["t"] == (1, "a") and back["none"] is None
    import pickle

    with pytest.raises(WireError):  # a pickle (code) is never read as an answer
        decode(pickle.dumps({"out": torch.ones(2)}))
    header = b'{"__tensor__": [0, 400], "dtype": "float32", "shape": [10, 10]}'
    with pytest.raises(WireError, match="in 400 bytes"):  # a tensor larger than the bytes sent
        decode(struct.pack(">I", len(header)) + header + b"\0" * 16)
    header = b'{"__tensor__": [0, 8], "dtype": "object", "shape": [1]}'
    with pytest.raises(WireError, match="dtype"):
        decode(struct.pack(">I", len(header)) + header + b"\0" * 8)


def test_a_submission_that_cannot_load_in_its_sandbox_is_one_line(tmp_path):
    from fedarena.errors import ConfigError

    with pytest.raises(ConfigError, match="does not load in its sandbox: .*No module named 'missing'"):
        RuleProcess((("broken.py", "import missing\n"),), "broken.py")


def test_a_forged_card_written_at_import_lands_nowhere(tmp_path, monkeypatch):
    from fedarena.errors import ConfigError

    monkeypatch.chdir(tmp_path)
    source = plugin("forged_card", card_dir=str(tmp_path / "card"), forged='{"clean_acc": 0.99}')
    with pytest.raises(ConfigError, match="does not load in its sandbox"):
        RuleProcess((("forged.py", source),), "forged.py")
    assert not (tmp_path / "card").exists()


def test_its_tmp_is_capped_and_its_root_read_only():
    code = ("import os\ntry:\n    open('/tmp/big', 'wb').write(b'x' * (200 * 2**20)); print('filled')\n"
            "except OSError:\n    print('capped')\n"
            "try:\n    open('/stash', 'w').write('x'); print('root written')\nexcept OSError:\n    print('root read-only')")
    assert run(code, True).splitlines() == ["capped", "root read-only"]


def test_the_shared_region_cannot_be_shrunk_or_grown_by_the_rule():
    from fedarena.isolation.wire import Shared

    shared = Shared.create(1 << 20)
    try:
        for size in (0, 2 << 20):
            with pytest.raises(PermissionError):
                os.ftruncate(shared.fd, size)  # a rule's ftruncate would make the trial's reads fault (SIGBUS)
    finally:
        shared.close()


def test_empty_tensors_travel_and_odd_fields_are_wire_errors():
    back = decode(encode({"a": torch.zeros(0, dtype=torch.int64), "b": torch.zeros(0, 5)}))
    assert back["a"].shape == (0,) and back["a"].dtype == torch.int64 and back["b"].shape == (0, 5)
    header = b'{"__tensor__": [0, 4], "dtype": "float32", "shape": [true]}'
    with pytest.raises(WireError, match="shape"):
        decode(struct.pack(">I", len(header)) + header + b"\0" * 4)
    header = b'{"__tensor__": "x", "dtype": "float32", "shape": [1]}'
    with pytest.raises(WireError):
        decode(struct.pack(">I", len(header)) + header + b"\0" * 4)


def test_a_submission_holding_a_link_is_refused(tmp_path):
    from fedarena.isolation import load_isolated
    from fedarena.plugins import PluginError

    secret = tmp_path / "isolation.key"
    secret.write_text("ab" * 32)
    package = tmp_path / "linked"
    package.mkdir()
    (package / "__init__.py").write_text(plugin("honest", "linked_rule"))
    (package / "notes.py").symlink_to(secret)
    with pytest.raises(PluginError, match="holds no links; it has linked/notes.py"):
        load_isolated([package], secret=b"test-secret")


def test_the_sites_secret_is_made_once_and_readable_by_the_builder_alone(tmp_path):
    from fedarena.website.verification import work_secret

    first = work_secret(tmp_path / "work")
    assert len(bytes.fromhex(first)) == 32 and work_secret(tmp_path / "work") == first
    assert (tmp_path / "work" / ".isolation-key").stat().st_mode & 0o777 == 0o600
