"""Submitted rules isolated from the simulation: a plugin's aggregators run in a bubblewrap sandbox, never in a
process that holds a trial, the store, a card or the site.

``load_isolated(paths)`` starts each plugin in its sandbox (``process``), reads what it registered as data and
registers stand-ins here (``proxy``) whose calls cross to the sandbox over a pipe (``wire``: data, never pickles
from the rule's side). Rows, ids and the round's seed reach the rule under a key it never sees (``pseudonyms``).
``shipped()`` is what the benchmark driver sends its Ray workers, and ``ensure_isolated`` what a worker registers
from it. ``bwrap`` builds the sandbox's command line; ``server`` is the rule's side.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from fedarena.isolation.bwrap import available
from fedarena.isolation.process import IsolatedRuleError, RuleLimits
from fedarena.isolation.proxy import Plugin, new_plugin, register, unregister_all
from fedarena.plugins import PluginError, digest_of, read_source

__all__ = ["IsolatedRuleError", "Plugin", "RuleLimits", "available", "ensure_isolated", "load_isolated", "shipped",
           "unload_isolated"]

_LOADED: dict[str, Plugin] = {}  # digest -> the isolated plugins this process registered


def load_isolated(paths: Iterable[str | Path], secret: bytes | None = None) -> list[Plugin]:
    """Each plugin at ``paths`` started in its sandbox and its aggregators registered as stand-ins (once per
    process); a plugin that cannot be isolated is one ConfigError line naming it."""
    plugins = []
    for text in paths:
        path = Path(text).expanduser()
        if not path.exists():
            raise PluginError(f"plugin {text} (--include): no such file or folder")
        refuse_links(path)
        module, kind, files = read_source(path.resolve())
        digest = digest_of(files)
        if digest not in _LOADED:
            plugin = new_plugin((module, kind, files, str(path.resolve()), digest), secret)
            register(plugin)
            _LOADED[digest] = plugin
        plugins.append(_LOADED[digest])
    return plugins


def refuse_links(path: Path) -> None:
    """A submission's files are its own: a link (to the builder's key, its store, another submission) would be
    read on the trusted side and copied into the sandbox, so none is taken."""
    entries = [path, *path.rglob("*")] if path.is_dir() else [path]
    links = [str(p.relative_to(path.parent)) for p in entries if p.is_symlink()]
    if links:
        raise PluginError(f"plugin {path}: an isolated submission holds no links; it has {', '.join(sorted(links))}")


def shipped() -> tuple[Plugin, ...]:
    """The isolated plugins this process registered, as its Ray workers receive them."""
    return tuple(_LOADED.values())


def ensure_isolated(plugins: Iterable[Plugin]) -> None:
    """A worker's side: register the stand-ins of every shipped isolated plugin not registered here yet (its rule
    process starts at the first call)."""
    for plugin in plugins:
        if plugin.digest not in _LOADED:
            register(plugin)
            _LOADED[plugin.digest] = plugin


def unload_isolated() -> None:
    """Forget every isolated plugin of this process and end its rule processes (a test file's end)."""
    unregister_all()
    _LOADED.clear()
