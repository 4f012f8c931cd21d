"""Components from outside fedarena's source tree: a researcher's own aggregator, attack, method, dataset or model.

A plugin is a Python file, a package directory (with ``__init__.py``) or an installed distribution that
declares the entry point group ``fedarena.plugins``; importing it registers its components with the public
decorators (``from fedarena import aggregator, attack, method, dataset, model``). Every command that resolves
component names loads, in order: the paths of ``FEDARENA_INCLUDE`` (separated as in ``PATH``), its own
``--include PATH`` (repeatable), a suite file's ``include:`` (paths relative to the file) and every installed
distribution of the entry point group. A plugin loads once per process, however often it is named.

Identity: a plugin's ``digest`` hashes its source files (every ``*.py`` of the file or package, an installed
package's too); each component it registers has version ``"<declared>+src:<digest>"`` (``Registry.version``),
so an edited plugin's old runs are never taken as current.

Ray workers: the driver ships every loaded plugin's source (``shipped``) with the trials, through Ray's object
store (no shared filesystem assumed, and also when Ray was already running), and a worker imports exactly
those before it builds a trial (``ensure_loaded``), under the same identity.

A plugin that cannot load is one ``PluginError`` line naming its file: a missing path, an import error (with
the plugin's own line that failed), a name registered twice; what it registered before failing is removed.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
import sys
import tempfile
import traceback
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from fedarena.errors import ConfigError
from fedarena.registry import DuplicateNameError, Origin, Registry, loading

ENV_VAR = "FEDARENA_INCLUDE"
ENTRY_POINT_GROUP = "fedarena.plugins"


class PluginError(ConfigError):
    """A plugin that cannot be loaded; the message names it and says why."""


@dataclass(frozen=True)
class PluginSource:
    """A loaded plugin as the workers receive it: the module name it is imported as, whether it is a ``file`` or
    a ``package``, its source files (path relative to the file's folder or to the package, text), where the
    driver found it, and the hash of its files."""

    module: str
    kind: str
    files: tuple[tuple[str, str], ...]
    label: str
    digest: str
    call: str = ""  # an entry point's attribute, called after the import (a registration function)

    @property
    def origin(self) -> Origin:
        return Origin(self.label, self.digest)


_LOADED: dict[str, PluginSource] = {}  # digest -> source: the plugins this process imported


def loaded() -> list[PluginSource]:
    """The plugins this process imported, in order."""
    return list(_LOADED.values())


def shipped() -> tuple[PluginSource, ...]:
    """What the driver sends every trial: each loaded plugin's source."""
    return tuple(_LOADED.values())


def digest_of(files: Iterable[tuple[str, str]]) -> str:
    h = hashlib.sha256()
    for relative, text in sorted(files):
        h.update(relative.encode() + b"\0" + text.encode() + b"\0")
    return h.hexdigest()[:16]


def env_paths() -> list[str]:
    return [p for p in os.environ.get(ENV_VAR, "").split(os.pathsep) if p.strip()]


def load_plugins(include: Iterable[str | Path] = (), *, entry_points: bool = True) -> list[PluginSource]:
    """``FEDARENA_INCLUDE``'s paths, then ``include``, then (``entry_points``) the installed distributions of
    the entry point group; returns the plugins these are (each loads once per process)."""
    sources = [load_path(p, "FEDARENA_INCLUDE") for p in env_paths()]
    sources += [load_path(p) for p in include]
    if entry_points:
        sources += [load_entry_point(ep) for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)]
    return sources


def read_source(path: Path) -> tuple[str, str, tuple[tuple[str, str], ...]]:
    """(module name, kind, files) of a plugin file or package directory."""
    if path.is_file():
        if path.suffix != ".py":
            raise PluginError(f"plugin {path}: a plugin is a .py file or a package folder (with __init__.py)")
        return f"fedarena_plugin_{path.stem}", "file", ((path.name, path.read_text()),)
    if not (path / "__init__.py").is_file():
        raise PluginError(f"plugin {path}: a plugin folder is a Python package; it has no __init__.py")
    files = tuple(sorted((str(p.relative_to(path)), p.read_text()) for p in path.rglob("*.py")
                         if "__pycache__" not in p.parts))
    return path.name, "package", files


def load_path(text: str | Path, given_by: str = "--include") -> PluginSource:
    """Import the plugin file or package at a path (once per process)."""
    path = Path(text).expanduser()
    if not path.exists():
        raise PluginError(f"plugin {text} ({given_by}): no such file or folder")
    path = path.resolve()
    module, kind, files = read_source(path)
    source = PluginSource(module, kind, files, str(path), digest_of(files))
    if source.digest in _LOADED:
        return _LOADED[source.digest]
    _import(source, path if kind == "file" else path / "__init__.py")
    return source


def load_entry_point(entry) -> PluginSource:
    """Import an installed distribution's ``fedarena.plugins`` entry point (its module, then its attribute if
    it names one, called)."""
    module, _, attribute = entry.value.partition(":")
    spec = importlib.util.find_spec(module.split(".")[0])
    if spec is None or spec.origin is None:
        raise PluginError(f"plugin entry point {entry.name!r} = {entry.value!r}: module {module!r} is not importable")
    if spec.submodule_search_locations:
        root = Path(list(spec.submodule_search_locations)[0])
        files = tuple(sorted((str(p.relative_to(root)), p.read_text()) for p in root.rglob("*.py")
                             if "__pycache__" not in p.parts))
        kind = "package"
    else:
        files, kind = ((Path(spec.origin).name, Path(spec.origin).read_text()),), "file"
    label = f"entry point {entry.name} ({entry.value})"
    source = PluginSource(module, kind, files, label, digest_of(files), attribute.strip())
    if source.digest in _LOADED:
        return _LOADED[source.digest]
    with _rollback(source):
        importlib.import_module(module)
        _call(source, sys.modules[module])
    _LOADED[source.digest] = source
    return source


def _import(source: PluginSource, location: Path) -> None:
    """Import ``source`` from ``location`` under its module name (a package through its parent folder)."""
    search = [str(location.parent)] if source.kind == "package" else None
    spec = importlib.util.spec_from_file_location(source.module, location, submodule_search_locations=search)
    module = importlib.util.module_from_spec(spec)
    with _rollback(source):
        sys.modules[source.module] = module
        spec.loader.exec_module(module)
        _call(source, module)
    _LOADED[source.digest] = source


def _call(source: PluginSource, module) -> None:
    if source.call:
        getattr(module, source.call)()


class _rollback:
    """Import under the plugin's origin; on failure remove what it registered and its modules, and raise a
    one-line PluginError naming the plugin's own line that failed."""

    def __init__(self, source: PluginSource):
        self.source = source
        self.context = loading(source.origin)

    def __enter__(self) -> None:
        self.context.__enter__()

    def __exit__(self, kind, err, tb) -> bool:
        self.context.__exit__(kind, err, tb)
        if err is None:
            return False
        unload(self.source)
        if isinstance(err, PluginError):
            return False
        where = _own_line(tb, self.source)
        what = str(err) if isinstance(err, DuplicateNameError) else f"{type(err).__name__}: {err}"
        raise PluginError(f"plugin {self.source.label}: {'registers' if isinstance(err, DuplicateNameError) else 'import failed'}"
                          f"{where}: {what}") from None


def _own_line(tb, source: PluginSource) -> str:
    """`` at FILE:LINE (`code`)`` of the last traceback frame inside the plugin's files, or ''."""
    names = {Path(relative).name for relative, _ in source.files}
    frames = [f for f in traceback.extract_tb(tb) if Path(f.filename).name in names]
    if not frames:
        return ""
    frame = frames[-1]
    code = f" (`{frame.line.strip()}`)" if frame.line else ""
    return f" at {Path(frame.filename).name}:{frame.lineno}{code}"


def unload(source: PluginSource) -> None:
    """Remove what a plugin registered and its modules (a plugin that broke its components' contracts)."""
    for registry in list(Registry.instances):
        for name in registry.from_origin(source.origin):
            registry.remove(name)
    for name in [m for m in sys.modules if m == source.module or m.startswith(source.module + ".")]:
        del sys.modules[name]
    _LOADED.pop(source.digest, None)


def ensure_loaded(sources: Iterable[PluginSource]) -> None:
    """A worker's side: import every shipped plugin not imported in this process yet, from its shipped files
    (written to a folder of this process), under the driver's identity."""
    for source in sources:
        if source.digest in _LOADED:
            continue
        folder = Path(tempfile.mkdtemp(prefix=f"fedarena-plugin-{source.digest}-"))
        root = folder / source.module.split(".")[0] if source.kind == "package" else folder
        for relative, text in source.files:
            target = root / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        if source.label.startswith("entry point"):
            sys.path.insert(0, str(folder))  # an installed package's own absolute imports find the shipped copy
            with _rollback(source):
                importlib.import_module(source.module)
                _call(source, sys.modules[source.module])
            _LOADED[source.digest] = source
            continue
        _import(source, root / "__init__.py" if source.kind == "package" else root / source.files[0][0])
