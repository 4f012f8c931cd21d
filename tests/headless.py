"""Headless Chromium for the tests that look at a page as a user would (skipped where it is not installed)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

CHROMIUM = next((path for name in ("chromium", "chromium-browser", "google-chrome")
                 if (path := shutil.which(name))), None)
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed")


def capture(url: str, png: Path, size: tuple[int, int] = (1600, 1000), budget_ms: int = 15000,
            min_bytes: int = 10_000) -> tuple[str, str]:
    """Open ``url``, let its scripts run for ``budget_ms`` of virtual time, screenshot it to ``png`` (at least
    ``min_bytes``: not a blank page); returns (the DOM then, Chromium's log with the page's console messages)."""
    cmd = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           f"--user-data-dir={png.parent / (png.stem + '-profile')}", f"--window-size={size[0]},{size[1]}",
           f"--virtual-time-budget={budget_ms}", f"--screenshot={png}", "--dump-dom", "--enable-logging=stderr",
           "--v=0", url]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    assert png.stat().st_size >= min_bytes, "blank screenshot"
    return done.stdout, done.stderr
