"""A submission to the leaderboard: a folder with a plugin, ``submission.yaml`` and the ``card.json`` its authors
measured with ``fedarena evaluate``.

``submission.yaml``::

    name: Shrunk mean                      # the entry's name (text)
    component: aggregator.shrunk_mean      # aggregator.NAME or method.NAME, as the plugin registers it
    settings: {factor: 0.8}                # its hyperparameters (optional)
    authors: [A. Author, B. Author]        # (optional)
    paper: https://example.org/paper       # http(s) only (optional)
    claims: {clean_acc: 0.9, robust_acc: {min_max@0.2: 0.8}}   # as `fedarena evaluate --claim` takes them
    plugin: shrunk.py                      # the plugin file or package in the folder (optional when it is
                                           # the folder's only .py file or package)

Everything here is read as data and checked before any of the submission's code runs; what is wrong is one
line (``SubmissionError``), and the site lists the submission as rejected with it.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml

from fedarena.battery.card import check_claim
from fedarena.config import parse_value
from fedarena.errors import ConfigError

FILE, CARD = "submission.yaml", "card.json"
KEYS = ("name", "component", "settings", "authors", "paper", "claims", "plugin")
REQUIRED = ("name", "component")
MAX_TEXT = 300  # characters of a name, an author or a link
MAX_FILE = 64 * 1024  # bytes of submission.yaml
MAX_CARD = 16 * 2**20  # bytes of card.json
SETTING = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")  # a hyperparameter's name, as --set takes it
SLUG = re.compile(r"[^A-Za-z0-9._-]+")


class SubmissionError(ConfigError):
    """A submission that cannot be evaluated: why, in one line."""


@dataclass(frozen=True)
class Submission:
    folder: Path
    name: str
    kind: str  # aggregator or method
    component: str  # the registered name
    settings: dict = field(default_factory=dict)
    authors: tuple[str, ...] = ()
    paper: str = ""
    claims: dict = field(default_factory=dict)
    plugin: Path | None = None
    card: dict = field(default_factory=dict)  # the submitted card.json

    @property
    def slug(self) -> str:
        return slug_of(self.folder)


def slug_of(folder: Path) -> str:
    """The entry's file name: the folder's name in safe characters, with a digest of the name where it has others
    (two folder names never share a slug, nor a work folder)."""
    safe = SLUG.sub("_", folder.name).strip("._") or "unnamed"
    digest = "" if safe == folder.name else "-" + hashlib.sha256(folder.name.encode()).hexdigest()[:8]
    return f"submission-{safe}{digest}"


def submission_folders(root: Path) -> list[Path]:
    """The submission folders under ``root``, sorted by name (a folder is one submission)."""
    if not root.is_dir():
        raise SubmissionError(f"--submissions {root}: not a folder (give the folder holding one folder per submission)")
    return sorted((p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")), key=lambda p: p.name)


def check_keys(data: dict, keys: tuple[str, ...], required: tuple[str, ...], where: str,
               error: type[ConfigError]) -> None:
    """A mapping read from a user's YAML: no key but ``keys``, every one of ``required`` (one ``error`` line)."""
    unknown = sorted(map(str, set(data) - set(keys)))
    if unknown:
        raise error(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(keys)}")
    missing = [k for k in required if k not in data]
    if missing:
        raise error(f"{where}: missing {', '.join(missing)} (required: {', '.join(required)})")


def read_submission(folder: Path) -> Submission:
    """The submission in ``folder``, checked (a SubmissionError naming what is wrong otherwise)."""
    data = _yaml(folder / FILE)
    check_keys(data, KEYS, REQUIRED, FILE, SubmissionError)
    kind, _, name = _text(data["component"], "component").partition(".")
    if kind not in ("aggregator", "method") or not name:
        raise SubmissionError(f"{FILE}: component is aggregator.NAME or method.NAME, got {data['component']!r}")
    settings = _settings(data.get("settings") or {})
    try:
        claims = check_claim(data["claims"], f"{FILE}: claims") if data.get("claims") is not None else {}
    except ConfigError as err:
        raise SubmissionError(str(err)) from None
    return Submission(folder, _text(data["name"], "name"), kind, name, settings, _authors(data.get("authors")),
                      _paper(data.get("paper")), claims, _plugin(folder, data.get("plugin")), _card(folder / CARD))


def _yaml(path: Path) -> dict:
    try:
        text = _small(path, MAX_FILE).decode("utf-8")
        if any(isinstance(event, yaml.AliasEvent) for event in yaml.parse(text, Loader=yaml.SafeLoader)):
            raise SubmissionError(f"{FILE} uses a YAML alias (*name): write each value out")
        data = yaml.safe_load(text)
    except OSError:
        raise SubmissionError(f"no {FILE} in the folder (name, component, settings, authors, paper, claims)") from None
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError) as err:
        raise SubmissionError(f"{FILE} is not YAML ({' '.join(str(err).split())[:200]})") from None
    if not isinstance(data, dict):
        raise SubmissionError(f"{FILE} holds a mapping (name, component, ...), not {type(data).__name__}")
    return data


def _small(path: Path, limit: int) -> bytes:
    """A file's bytes, refused past ``limit``."""
    if path.stat().st_size > limit:
        raise SubmissionError(f"{path.name} is larger than {limit // 1024} KiB")
    return path.read_bytes()


def _settings(value: Any) -> dict:
    """Hyperparameters that ``fedarena evaluate --set NAME=VALUE`` carries unchanged (names and JSON values)."""
    if not isinstance(value, dict):
        raise SubmissionError(f"{FILE}: settings is a mapping of hyperparameter names to values")
    for key, item in value.items():
        if not isinstance(key, str) or not SETTING.fullmatch(key):
            raise SubmissionError(f"{FILE}: setting name {str(key)[:40]!r} is not a name (letters, digits, _ and .)")
        try:
            same = parse_value(setting_text(item)) == item
        except (TypeError, ValueError, RecursionError):
            same = False
        if not same:
            raise SubmissionError(f"{FILE}: setting {key} is not a plain value (a number, text, true/false or a list "
                                  f"or mapping of them)")
    return value


def setting_text(value: Any) -> str:
    """A setting's value as ``--set NAME=VALUE`` carries it (JSON, which the command reads back as YAML)."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def _text(value: Any, key: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_TEXT:
        raise SubmissionError(f"{FILE}: {key} is a text of 1 to {MAX_TEXT} characters")
    return value.strip()


def _authors(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise SubmissionError(f"{FILE}: authors is a list of names")
    return tuple(_text(v, "each author") for v in value)


def _paper(value: Any) -> str:
    if value is None or value == "":
        return ""
    text = _text(value, "paper")
    parsed = urlparse(text)
    if not text.startswith(("http://", "https://")) or not parsed.netloc:
        raise SubmissionError(f"{FILE}: paper is an http(s) link, got {text[:80]!r}")
    return text


def _plugin(folder: Path, value: Any) -> Path:
    if value is not None:
        path = (folder / _text(value, "plugin")).resolve()
        if folder.resolve() not in path.parents or not path.exists():
            raise SubmissionError(f"{FILE}: plugin {value!r} is not a file or package inside the submission's folder")
        return path
    found = sorted(p for p in folder.iterdir() if (p.suffix == ".py" and p.is_file())
                   or (p.is_dir() and (p / "__init__.py").exists()))
    if len(found) != 1:
        names = ", ".join(p.name for p in found) or "none"
        raise SubmissionError(f"{FILE}: name the plugin (plugin: FILE.py or PACKAGE); the folder holds {names}")
    if folder.resolve() not in found[0].resolve().parents:
        raise SubmissionError(f"the plugin {found[0].name} links outside the submission's folder")
    return found[0].resolve()


def _card(path: Path) -> dict:
    try:
        data = json.loads(_small(path, MAX_CARD).decode("utf-8"))
    except OSError:
        raise SubmissionError(f"no {CARD} in the folder (the card `fedarena evaluate --out DIR` wrote)") from None
    except (ValueError, RecursionError) as err:
        raise SubmissionError(f"{CARD} is not JSON ({' '.join(str(err).split())[:200]})") from None
    if not isinstance(data, dict) or not {"component", "battery_version", "scale"} <= set(data):
        raise SubmissionError(f"{CARD} is not a card (component, battery_version, scale, ... as fedarena evaluate "
                              f"writes it)")
    return data


def metadata(folder: Path) -> dict[str, Any]:
    """What a rejected submission's page may still show: its name and authors where its file gives them (as
    data; the page escapes them)."""
    try:
        data = _yaml(folder / FILE)
    except SubmissionError:
        return {}
    out = {}
    if isinstance(data.get("name"), str):
        out["name"] = data["name"][:MAX_TEXT]
    authors = data.get("authors")
    if isinstance(authors, str):
        authors = [authors]
    if isinstance(authors, list):
        out["authors"] = [a[:MAX_TEXT] for a in authors if isinstance(a, str)]
    return out
