"""``reviews.yaml`` beside the submissions: a maintainer's record that a submission's exact source was reviewed.

A submission that cannot run isolated (a method, or any submission of a site built with ``--trust-submissions``
where bubblewrap cannot start) is at best "reproduced (not isolated)": the rerun reproduced its card, but its code
saw the trial. A review lifts it to "verified (reviewed)". ``<submissions>/reviews.yaml``::

    - entry: my-method               # the submission's folder name
      source: 3f2a...                # sha256 of the plugin's source (64 hex digits: ``source_sha256``)
      reviewer: B. Maintainer
      date: 2026-12-07               # YYYY-MM-DD
      note: reads only its own updates; no frame, gc or module walking   # optional

``source`` is the full sha256 over the plugin's files exactly as ``fedarena.plugins`` reads and hashes them
(``read_source``, ``digest_of``'s construction, not cut to 16 hex digits): its first 16 digits are the plugin's
identity (``+src:<digest>``) on the card, and the whole 64 leave no room to craft a second source with the same
hash. A review applies only when it equals the submission's source as the site reads it before the rerun: an
edited plugin needs a new review. The file is the maintainers' data, checked before any submission runs; what is
wrong is one line (``ReviewError``).
"""

from __future__ import annotations

import datetime
import hashlib
import re
from pathlib import Path

import yaml

from fedarena.errors import ConfigError
from fedarena.plugins import read_source
from fedarena.website.submission import check_keys

FILE = "reviews.yaml"
KEYS = ("entry", "source", "reviewer", "date", "note")
REQUIRED = ("entry", "source", "reviewer", "date")
MAX_FILE = 1024 * 1024  # bytes
MAX_TEXT = 1000  # characters of a reviewer or a note
SHA256 = re.compile(r"[0-9a-f]{64}")
DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


class ReviewError(ConfigError):
    """A reviews.yaml that cannot be read as reviews: what is wrong, in one line."""


class _Loader(yaml.SafeLoader):
    """YAML's safe loader with dates left as text (``_date`` checks them, with one line for 2026-02-30)."""


_Loader.yaml_implicit_resolvers = {first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
                                   for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}


def source_sha256(plugin: Path) -> str:
    """The full sha256 of a plugin's source (``fedarena.plugins.digest_of`` is its first 16 hex digits)."""
    h = hashlib.sha256()
    for relative, text in sorted(read_source(plugin)[2]):
        h.update(relative.encode() + b"\0" + text.encode() + b"\0")
    return h.hexdigest()


def read_reviews(submissions: Path) -> list[dict]:
    """The reviews in ``submissions/reviews.yaml``, each checked ([] without the file)."""
    path = submissions / FILE
    if not path.is_file():
        return []
    if path.stat().st_size > MAX_FILE:
        raise ReviewError(f"{path}: larger than {MAX_FILE // 1024} KiB")
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)  # noqa: S506 - the safe loader's subclass
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError) as err:
        raise ReviewError(f"{path} is not YAML ({' '.join(str(err).split())[:200]})") from None
    if data is None:
        return []
    if not isinstance(data, list):
        raise ReviewError(f"{path} holds a list of reviews (entry, source, reviewer, date, note), not "
                          f"{type(data).__name__}")
    return [_review(item, f"{path}: review {i}") for i, item in enumerate(data, 1)]


def _review(item, where: str) -> dict:
    if not isinstance(item, dict):
        raise ReviewError(f"{where} is a mapping ({', '.join(KEYS)}), not {type(item).__name__}")
    check_keys(item, KEYS, REQUIRED, where, ReviewError)
    entry = _text(item["entry"], "entry", where, 300)
    if "/" in entry or entry in (".", ".."):
        raise ReviewError(f"{where}: entry is a submission's folder name, got {entry!r}")
    source = item["source"]
    if not isinstance(source, str) or not SHA256.fullmatch(source.strip().lower()):
        raise ReviewError(f"{where}: source is the plugin's sha256 (64 hex digits), got {str(source)[:80]!r}")
    return {"entry": entry, "source": source.strip().lower(), "reviewer": _text(item["reviewer"], "reviewer", where),
            "date": _date(item["date"], where), "note": _text(item.get("note") or "", "note", where, empty=True)}


def _text(value, key: str, where: str, limit: int = MAX_TEXT, empty: bool = False) -> str:
    if not isinstance(value, str) or len(value) > limit or not (value.strip() or empty):
        raise ReviewError(f"{where}: {key} is a text of {0 if empty else 1} to {limit} characters")
    return value.strip()


def _date(value, where: str) -> str:
    """YYYY-MM-DD, a real day."""
    try:
        if isinstance(value, str) and DAY.fullmatch(value.strip()):
            return datetime.date.fromisoformat(value.strip()).isoformat()
    except ValueError:
        pass
    raise ReviewError(f"{where}: date is a day as YYYY-MM-DD, got {str(value)[:40]!r}")


def review_of(reviews: list[dict], folder: Path, plugin: Path) -> dict | None:
    """The latest review of the submission in ``folder`` whose source is exactly its plugin's now, else None."""
    source = source_sha256(plugin)
    matching = [r for r in reviews if r["entry"] == folder.name and r["source"] == source]
    return max(matching, key=lambda r: r["date"]) if matching else None
