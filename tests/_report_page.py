"""What a `pawn report` page embeds, read as its script reads it (tests of the report, the suite
and the dashboard share it)."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest


def page_data(html: str) -> dict:
    """The JSON of the page's ``<script id="pawn-data">`` (what its app draws)."""
    m = re.search(r'<script type="application/json" id="pawn-data">(.*?)</script>', html, re.S)
    assert m, "no embedded data"
    return json.loads(m.group(1).replace("<\\/", "</"))


def embedded(html_path: Path) -> dict:
    """:func:`page_data` of a report file."""
    return page_data(Path(html_path).read_text("utf-8"))


@contextlib.contextmanager
def browser_page(width: int = 1440, height: int = 1000):
    """A page of Debian's Chromium driven by Playwright, and the list its console errors and page
    errors are appended to: ``with browser_page() as (page, errors): ...``. Fails (not skips) when
    the chromium binary is missing: `.ci/run` installs it."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).exists():
        pytest.fail("Debian's chromium is not installed (apt-get install chromium); .ci/run installs it", pytrace=False)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            yield page, errors
        finally:
            browser.close()


def rendered_text(html_path: Path, page: str) -> str:
    """The text of a report page's ``#page`` tab as Debian's Chromium draws it (headless, its DOM
    dumped after the script ran; tags dropped, cells joined by `` | ``). Fails (not skips) when the
    chromium binary is missing: `.ci/run` installs it."""
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).exists():
        pytest.fail("Debian's chromium is not installed (apt-get install chromium); .ci/run installs it", pytrace=False)
    r = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000", "--dump-dom",
                        f"{Path(html_path).resolve().as_uri()}#{page}"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return re.sub(r"\s*(<[^>]+>\s*)+", " | ", r.stdout)
