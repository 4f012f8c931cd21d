"""The site's folder, written by the builder alone.

The pages are written into a fresh folder beside ``out`` (``.<name>.new-<random>``), created only once every
submission's rerun has ended. What is kept from the old ``out`` is copied into it by the site's own layout alone:
the other scales' folders and each scale's archived versions (``v<k>/``), each as its ``index.html``,
``leaderboard.json`` and the entries' pages its ``leaderboard.json`` lists (plain files, never a link), and this
scale's pages when an older battery version wrote them (archived as ``v<old>/``). Then the old ``out`` is renamed
away, the fresh one renamed in, the old one removed: nothing else a submission wrote into the output survives a
build. Each submission's work folder lies outside the output, and the output outside the work folder
(``check_places``).
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
from pathlib import Path

from fedarena.battery.definition import load_battery
from fedarena.battery.definition import version as battery_version
from fedarena.errors import ConfigError
from fedarena.website.entries import Entry, leaderboard
from fedarena.website.entry_page import entry_html
from fedarena.website.pages import index_page, landing_page, submit_page

PUBLISHED = ("index.html", "leaderboard.json")  # a version's files, beside its entries/
ENTRY = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9._+-]*")  # an entry page's name (entries.slug, never '..')


def check_places(out: Path, work: Path) -> None:
    """One line, before any work, where the site cannot be written at ``out`` or ``out`` and ``work`` (the
    submissions' work folders) lie inside one another; their parent folders are created."""
    site, runs = out.resolve(), work.resolve()
    if site == runs or site in runs.parents:
        raise ConfigError(f"--work {work} lies inside --out {out}: the submissions' work folders must lie outside "
                          f"the site's folder (the site is written by the builder alone)")
    if runs in site.parents:
        raise ConfigError(f"--out {out} lies inside --work {work}: give the site a folder outside the submissions' "
                          f"work folders")
    _creatable(site, f"--out {out}")
    _creatable(runs, f"--work {work}")
    try:
        probe = site.parent / f".{site.name}.probe-{secrets.token_hex(8)}"  # the fresh folder will lie there
        probe.mkdir()
        probe.rmdir()
    except OSError as err:
        raise ConfigError(f"--out {out}: cannot write the site there ({err.strerror or err})") from None


def _creatable(path: Path, flag: str) -> None:
    """``path``'s parent created; one line where a file stands in the way or the system refuses."""
    standing = next(p for p in (path, *path.parents) if p.exists())
    if not standing.is_dir():
        raise ConfigError(f"{flag} is a file; give a folder" if standing == path else
                          f"{flag}: cannot create a folder there: {standing} is a file")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"{flag}: cannot create a folder there ({err.strerror or err}: {err.filename})") from None


def write_site(out: Path, entries: list[Entry], scale: str) -> None:
    """Every page of ``scale`` into a fresh folder with what is kept of ``out``, then moved into place at ``out``."""
    out = Path(out).absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    fresh = out.parent / f".{out.name}.new-{secrets.token_hex(8)}"
    fresh.mkdir()
    try:
        if out.is_dir() and not out.is_symlink():
            _carry_over(out, fresh, scale, battery_version())
        _write_scale(fresh, entries, scale)
        _swap(fresh, out)
    except BaseException:
        shutil.rmtree(fresh, ignore_errors=True)
        raise


def _carry_over(old: Path, fresh: Path, scale: str, current: int) -> None:
    """The other scales' published folders, this scale's archived versions, and this scale's pages of an older
    battery version (as ``v<old>/``)."""
    for name in sorted(load_battery()["scales"]):
        folder = old / name
        if name != scale and _published(folder):
            _copy(folder, fresh / name)
    folder = old / scale
    for version in _archived_versions(folder):
        _copy(folder / f"v{version}", fresh / scale / f"v{version}")
    previous = _version_of(folder)
    if previous is not None and previous < current and not (fresh / scale / f"v{previous}").exists():
        _copy(folder, fresh / scale / f"v{previous}", versions=False)


def _copy(src: Path, dst: Path, versions: bool = True) -> None:
    """A published version's files (``PUBLISHED``, the entry pages its leaderboard lists; ``versions``: its ``v<k>/``
    too), plain files only."""
    dst.mkdir(parents=True, exist_ok=True)
    pages = [src / "entries" / f"{slug}.html" for slug in _listed(src)] if _plain_dir(src / "entries") else []
    for path in [*(src / name for name in PUBLISHED), *pages]:
        if path.is_file() and not path.is_symlink():
            (dst / path.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dst / path.relative_to(src))
    for version in _archived_versions(src) if versions else []:
        _copy(src / f"v{version}", dst / f"v{version}")


def _listed(folder: Path) -> list[str]:
    """The entries a published version's ``leaderboard.json`` lists (names of the site's own form only)."""
    try:
        records = json.loads((folder / "leaderboard.json").read_text(encoding="utf-8")).get("entries")
    except (OSError, ValueError, AttributeError):
        return []
    names = [r.get("entry") for r in records if isinstance(r, dict)] if isinstance(records, list) else []
    return sorted({n for n in names if isinstance(n, str) and ENTRY.fullmatch(n)})


def _swap(fresh: Path, out: Path) -> None:
    """``fresh`` renamed to ``out``; the old ``out`` renamed away first and removed after."""
    if not out.exists() and not out.is_symlink():
        fresh.rename(out)
        return
    old = out.parent / f".{out.name}.old-{secrets.token_hex(8)}"
    out.rename(old)
    fresh.rename(out)
    if old.is_symlink():
        old.unlink()
    else:
        shutil.rmtree(old)


def _write_scale(site: Path, entries: list[Entry], scale: str) -> None:
    """The current version's pages of ``scale`` (entries of an older version under ``v<k>/``) and the landing."""
    current = battery_version()
    folder = site / scale
    by_version: dict[int, list[Entry]] = {}
    for entry in entries:
        version = entry.card.battery_version if entry.card is not None else current
        by_version.setdefault(min(version, current), []).append(entry)
    archived = sorted({v for v in by_version if v < current} | set(_archived_versions(folder)), reverse=True)
    _write_version(folder, by_version.get(current, []), current, scale, archived, root="..", current=True)
    for version in sorted(v for v in by_version if v < current):
        _write_version(folder / f"v{version}", by_version[version], version, scale, [], root="../..", current=False)
    scales = sorted((p.name, _version_of(p)) for p in site.iterdir() if _version_of(p) is not None)
    _write(site / "index.html", landing_page(scales))
    _write(site / "submit.html", submit_page(current))


def _write_version(folder: Path, entries: list[Entry], version: int, scale: str, archived: list[int], root: str,
                   current: bool) -> None:
    pages = folder / "entries"
    if pages.exists():
        shutil.rmtree(pages)  # an archived version rewritten: its entries as they are now
    pages.mkdir(parents=True)
    for entry in entries:
        _write(pages / f"{entry.slug}.html", entry_html(entry, scale, f"{root}/.."))
    _write(folder / "index.html", index_page(entries, version, scale, archived, root, current))
    _write(folder / "leaderboard.json", json.dumps(leaderboard(entries, version, scale), indent=2, sort_keys=True) + "\n")


def _version_of(folder: Path) -> int | None:
    """The battery version a published folder's ``leaderboard.json`` names (None: none readable)."""
    if not _published(folder):
        return None
    try:
        version = json.loads((folder / "leaderboard.json").read_text(encoding="utf-8")).get("battery_version")
    except (OSError, ValueError, AttributeError):
        return None
    return version if isinstance(version, int) and not isinstance(version, bool) else None


def _published(folder: Path) -> bool:
    return _plain_dir(folder) and (folder / "leaderboard.json").is_file() and not (folder / "leaderboard.json").is_symlink()


def _plain_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def _archived_versions(folder: Path) -> list[int]:
    if not _plain_dir(folder):
        return []
    return sorted(int(p.name[1:]) for p in folder.iterdir() if _plain_dir(p) and p.name[:1] == "v" and p.name[1:].isdigit())


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
