"""Bubblewrap (Debian's ``bubblewrap``): the sandbox a submission's code runs in.

``wrap(argv, ...)`` is the command line that runs ``argv`` with:

- a read-only view of the system's programs and libraries (``/usr`` and its links), the Python installation this
  process runs on, fedarena's own source, and the paths the caller names (``readable``); nothing else of the file
  system exists inside: no home folder, no store, no site, no other submission;
- its own empty ``/tmp`` (a tmpfs of at most ``TMP_BYTES``), ``/proc`` of its own process namespace, a minimal ``/dev``;
- only ``/tmp`` and the ``writable`` paths writable (the method sandbox's work folder; an isolated rule gets
  none): the root bubblewrap builds is remounted read-only;
- no network (its own network namespace: a loopback only), its own user, IPC, UTS and cgroup namespaces;
- an empty environment but what the caller passes (``env``), its own process session (no signal reaches the
  builder's terminal), and ``--die-with-parent``: it is killed when the process that started it ends.

Time, memory and process counts are watched by whoever starts it (``process.Watch``); ``limits()`` sets the hard
ceilings the kernel keeps (private memory, core files) before bubblewrap starts.
"""

from __future__ import annotations

import functools
import os
import resource
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import fedarena

SYSTEM = ("/usr", "/etc/ld.so.cache", "/etc/alternatives")  # programs, libraries and the loader's cache
LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")  # merged-/usr links, recreated as links
TMP_BYTES = 64 * 2**20  # the sandbox's /tmp, in memory: a cap, so no rule fills the machine's RAM through it
BASE_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp", "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}


def executable() -> str | None:
    return shutil.which("bwrap")


@functools.lru_cache(maxsize=1)
def available() -> str:
    """"" where a sandbox starts here, else why not (one line)."""
    binary = executable()
    if binary is None:
        return "bubblewrap is not installed (Debian: apt-get install bubblewrap)"
    try:
        done = subprocess.run(wrap(["/usr/bin/true"]), capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"bubblewrap does not start ({err})"
    if done.returncode != 0:
        return f"bubblewrap does not start: {' '.join(done.stderr.decode(errors='replace').split())[:200]}"
    return ""


def wrap(argv: list[str], *, writable: Iterable[str | Path] = (), readable: Iterable[str | Path] = (),
         env: Mapping[str, str] | None = None, chdir: str = "/tmp") -> list[str]:
    """``argv`` inside the sandbox (see the module docstring)."""
    args = [executable() or "bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
            "--cap-drop", "ALL", "--proc", "/proc", "--dev", "/dev", "--size", str(TMP_BYTES), "--tmpfs", "/tmp"]
    for path in SYSTEM:
        if os.path.exists(path):
            args += ["--ro-bind", path, path]
    for link in LINKS:
        if os.path.islink(link):
            args += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            args += ["--ro-bind", link, link]
    for path in _python_paths() + [str(Path(p).resolve()) for p in readable]:
        args += ["--ro-bind", path, path]
    for path in writable:
        resolved = str(Path(path).resolve())
        args += ["--bind", resolved, resolved]
    for key, value in {**BASE_ENV, **dict(env or {})}.items():
        args += ["--setenv", key, value]
    # the root folder bubblewrap built (a tmpfs holding the mount points) read-only: nothing lands there
    return [*args, "--remount-ro", "/", "--chdir", chdir, *argv]


def _python_paths() -> list[str]:
    """This interpreter's installation (the virtual environment and the Python it was made from) and fedarena's
    source folder (an editable install's code lives outside site-packages): read-only inside."""
    paths = {sys.prefix, sys.base_prefix, str(Path(fedarena.__file__).resolve().parent)}
    real = Path(sys.executable).resolve()
    paths.add(str(real.parent.parent))  # the interpreter's own prefix, where the venv's python links
    return sorted(p for p in paths if not _covered(p, paths | set(SYSTEM)))


def _covered(path: str, others: set[str]) -> bool:
    """Whether another bound path already holds ``path`` (binding both would shadow one with the other)."""
    return any(other != path and path.startswith(other.rstrip("/") + "/") for other in others)


def limits(memory_mib: int):
    """A ``preexec_fn``: a ceiling on private writable memory (``RLIMIT_DATA``: twice the watched limit and 1 GiB
    for torch's own reservations; an address-space ceiling would refuse torch's CUDA libraries their mappings) and
    no core files, set in the child before bubblewrap runs and kept by everything it starts. The watcher
    (``process.RuleProcess``) holds the real limit; this one stops a rule that allocates faster than it looks."""
    ceiling = (2 * memory_mib + 1024) * 2**20

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_DATA, (ceiling, ceiling))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply
