"""Data management behind ``fedarena data fetch NAME`` and ``fedarena data info NAME``.

``fetch`` downloads what can be downloaded (torchvision's Fashion-MNIST, MNIST, CIFAR-10; torchvision
checks the md5 of every downloaded archive) and verifies every file against its published checksum;
for sources that must be placed by hand (LEAF's FEMNIST/CelebA, Vehicle) it checks they are there and
otherwise says exactly which files go where and how to generate them. ``info`` reports each expected
file as present, missing, verified or failing its checksum. Neither is called by dataset builders.
"""

from __future__ import annotations

from pathlib import Path
from urllib.error import URLError

import fedarena.datasets  # noqa: F401  (importing the package registers every source)
from fedarena.datasets.catalog import DATASETS
from fedarena.datasets.files.sources import MISMATCH, MISSING, Source
from fedarena.datasets.files.storage import DataCorruptError, DataFetchError, data_root, missing_error


def info(name: str, data_dir: str | None = None, *, verify: bool = True) -> dict:
    """What the dataset needs and what is present: a JSON-ready dict (``files``: path, status, detail)."""
    source = DATASETS.get(name).source  # unknown names: UnknownNameError listing the datasets
    root = data_root(data_dir)
    if source is None:
        return {
            "dataset": name,
            "directory": str(root),
            "source": "none (generated or bundled)",
            "files": [],
            "complete": True,
            "downloadable": False,
            "how": "needs no files: it is generated, or ships with a dependency",
        }
    rows = source.check(root, verify)
    return {
        "dataset": name,
        "directory": str(root),
        "source": source.name,
        "files": [{"path": r.path, "status": r.status, "detail": r.detail} for r in rows],
        "complete": all(r.status not in (MISSING, MISMATCH) for r in rows),
        "downloadable": source.download is not None,
        "how": source.how,
    }


def info_text(name: str, data_dir: str | None = None, *, verify: bool = True) -> str:
    """``info`` as the lines the CLI prints."""
    report = info(name, data_dir, verify=verify)
    lines = [f"dataset {name}: {report['source']}", f"data directory: {report['directory']}"]
    width = max((len(f["path"]) for f in report["files"]), default=0)
    lines += [
        f"  {f['path']:<{width}}  {f['status']}" + (f"  ({f['detail']})" if f["detail"] else "")
        for f in report["files"]
    ]
    if report["complete"]:
        lines.append("status: complete")
    else:
        lines.append(f"status: incomplete; {report['how']}")
    return "\n".join(lines)


def fetch(name: str, data_dir: str | None = None) -> str:
    """Download what is missing (if possible), verify every file; returns ``info_text``. Raises DataError.

    Files already present (e.g. placed by hand) are not downloaded again, only checked.
    """
    source = DATASETS.get(name).source
    if source is None:
        return info_text(name, data_dir)
    root = data_root(data_dir)
    if source.download is not None and any(r.status == MISSING for r in source.check(root, False)):
        _download(name, source, root)
    rows = source.check(root, True)
    missing = [r.path for r in rows if r.status == MISSING]
    if missing:
        raise missing_error(name, root, missing, source.how)
    bad = [f"{r.path}: {r.detail}" for r in rows if r.status == MISMATCH]
    if bad:
        raise DataCorruptError(
            f"dataset {name!r}: checksum mismatch in {root}:\n  "
            + "\n  ".join(bad)
            + f"\nDelete these files and run `fedarena data fetch {name}` again. {source.how}"
        )
    return info_text(name, data_dir, verify=False)


def _download(name: str, source: Source, root: Path) -> None:
    """Run the source's downloader; network and checksum failures become one actionable DataFetchError."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        source.download(root)
    except (URLError, RuntimeError, OSError) as err:
        cause = " | ".join(str(err).strip().splitlines()[:4]) or "no detail"
        raise DataFetchError(
            f"dataset {name!r}: download failed ({type(err).__name__}: {cause}).\n"
            f"  tried: {', '.join(source.urls)}\n"
            f"  into the data directory: {root}\n"
            f"If this machine is offline, place the files by hand: {source.how}.\n"
            f"Then check with `fedarena data info {name}`."
        ) from None
